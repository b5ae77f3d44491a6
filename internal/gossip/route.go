package gossip

import (
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// score is the rendezvous (highest random weight) score of key on the
// member named name: FNV-1a 64 over name, a zero byte and key, finished with
// the SplitMix64 mixer. Every node computes the same scores.
func score(name, key string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * prime
	}
	h *= prime // the zero byte between name and key
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	return window.Mix64(h)
}

// owner returns the member of ms that owns key: the one with the highest
// score (ties go to the smaller name). ms must not be empty.
func owner(key string, ms []*member) *member {
	var best *member
	var bestScore uint64
	for _, m := range ms {
		s := score(m.node.Name, key)
		if best == nil || s > bestScore || (s == bestScore && m.node.Name < best.node.Name) {
			best, bestScore = m, s
		}
	}
	return best
}

// route groups totals by destination among ms: a member that decides
// from a store of its own (Config.OwnStore) gets every total; among the
// others, which share their region's store, the owner of each key gets it.
func route(totals []region.Total, ms []*member) map[*member][]region.Total {
	out := map[*member][]region.Total{}
	if len(ms) == 0 {
		return out
	}
	shared := make([]*member, 0, len(ms))
	for _, m := range ms {
		if m.ownStore {
			out[m] = totals
		} else {
			shared = append(shared, m)
		}
	}
	if len(shared) == 0 {
		return out
	}
	for _, t := range totals {
		o := owner(t.Key, shared)
		out[o] = append(out[o], t)
	}
	return out
}
