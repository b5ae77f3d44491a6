package gossip

import (
	"context"
	"log/slog"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
)

// Accepting repair answers.
//
// A repair answer (KindRepaired) carries this node's own region's totals,
// which it max-merges into its own store (Restorer): the one place where
// another node's word raises this region's own count. It carries the
// answerer's region's own totals too, merged as a flush of that region's
// would be (any member may send those at any time), so that a store that
// lost its counts holds the other regions' again one round trip after it
// asked, not only when each region next sends. Of this region's own
// totals, an answer is taken only for what this node asked:
//
//   - from a member it sent the request to (under the token it had then),
//     while the request is open (repairWindow); others are dropped as
//     unasked;
//   - for buckets that started no later than the request: a bucket that
//     began after the loss holds every hit this store counted in it, and
//     an answer for it is skipped (and counted as unasked);
//   - and, for each total, only a value two sources agree on: the second
//     largest of the answers' per-source maxima, where a source is a
//     region (a node of this region with a store of its own is a source of
//     its own), or, when the members asked are of one other region only,
//     a member. With a single source asked (a pool of two regions whose
//     other region has one node), its word is taken alone.
//
// So one member alone cannot raise this region's own count, as long as
// two sources were asked: a value it makes up is restored only as far as
// an honest source reports at least as much. Members of two regions
// together can (as can any holder of the gossip key, for the counts of
// its own region): see docs/security.md.

// repairSource is one source of repair answers and its best answer.
type repairSource struct {
	src string
	t   region.Total
}

// RepairAnswer is what the answers to a repair say of one total: the
// largest value of the two sources that report the most, largest first,
// and the count last restored. Exported for the cluster simulator
// (loadtest/sim), which repairs a restarted store as a node does.
type RepairAnswer struct {
	top      [2]repairSource
	restored uint64
}

// repairQuorum is the state of the open repair. Guarded by repairState.mu.
type repairQuorum struct {
	since    time.Time         // when the repair was asked for (Config.Now)
	asked    map[string]uint64 // member asked -> its token then
	regions  map[string]string // member asked -> its region
	answered map[string]bool   // regions a member of which answered
	answers  map[dref]*RepairAnswer
}

// reset starts a new repair asked for at now.
func (q *repairQuorum) reset(now time.Time) {
	*q = repairQuorum{since: now, asked: map[string]uint64{}, regions: map[string]string{}, answered: map[string]bool{}, answers: map[dref]*RepairAnswer{}}
}

// allAnswered reports whether a member of every other region asked has
// answered.
func (q *repairQuorum) allAnswered(own string) bool {
	for _, r := range q.regions {
		if r != own && !q.answered[r] {
			return false
		}
	}
	return true
}

// ask records that m was asked.
func (q *repairQuorum) ask(m *member) {
	if q.asked == nil {
		return // no repair open
	}
	q.asked[m.node.Name] = m.token
	q.regions[m.node.Name] = m.region
}

// wasAsked reports whether s was asked for the open repair.
func (q *repairQuorum) wasAsked(s *member) bool {
	t, ok := q.asked[s.node.Name]
	return ok && t == s.token
}

// sources returns the source of an answer from the member named name and
// how many sources agree on a value restored (1 or 2).
func (q *repairQuorum) sources(own, name string) (src string, need int) {
	others := map[string]bool{}
	for _, r := range q.regions {
		if r != own {
			others[r] = true
		}
	}
	byRegion := len(others) >= 2
	srcs := map[string]bool{}
	sourceOf := func(member string) string {
		if r := q.regions[member]; byRegion && r != own {
			return "region " + r
		}
		return "member " + member
	}
	for m := range q.regions {
		srcs[sourceOf(m)] = true
	}
	return sourceOf(name), min(2, len(srcs))
}

// Offer records source src's answer t and returns the total to restore
// now, if the value two sources agree on (one, when need is 1) grew.
func (a *RepairAnswer) Offer(src string, t region.Total, need int) (region.Total, bool) {
	switch { // each source's largest answer, for the two largest sources
	case a.top[0].src == src:
		if t.Count > a.top[0].t.Count {
			a.top[0].t = t
		}
	case a.top[1].src == src:
		if t.Count > a.top[1].t.Count {
			a.top[1].t = t
		}
	case a.top[0].src == "":
		a.top[0] = repairSource{src, t}
	case a.top[1].src == "" || t.Count > a.top[1].t.Count:
		a.top[1] = repairSource{src, t}
	}
	if a.top[1].src != "" && a.top[1].t.Count > a.top[0].t.Count {
		a.top[0], a.top[1] = a.top[1], a.top[0]
	}
	agreed := a.top[need-1]
	if agreed.src == "" || agreed.t.Count <= a.restored {
		return region.Total{}, false
	}
	a.restored = agreed.t.Count
	return agreed.t, true
}

// restore takes a repair answer from s (checked by handle: totals of this
// region or its replicas, sent by a member asked while a repair was open)
// and max-merges into the store, this region's own count included, the
// totals whose agreed value grew (see the top of this file).
func (n *Node) restore(now time.Time, m Message, s *member) {
	var ts, theirs []region.Total
	late := false
	n.rep.mu.Lock()
	q := &n.rep.quorum
	src, need := q.sources(n.cfg.Region, s.node.Name)
	sinceMs := q.since.UnixMilli()
	// s's region has answered once what it sent is in the store: until
	// then the node holds its decisions (GuardView).
	defer func() {
		n.rep.mu.Lock()
		q.answered[s.region] = true
		n.rep.mu.Unlock()
	}()
	for _, t := range m.Totals {
		switch {
		case !replicaOf(t.Region, n.cfg.Region):
			theirs = append(theirs, t) // the answerer's own (check)
			continue
		case t.Count == 0 || !now.Before(n.expiry(t.Window, t.Bucket)):
			continue
		case bucketStart(t.Window, t.Bucket) > sinceMs:
			late = true // began after the loss: this store counted all of it
			continue
		}
		k := dref{ref{t.Key, t.Window, t.Bucket}, t.Region}
		a := q.answers[k]
		if a == nil {
			if len(q.answers) >= n.cfg.MaxTouched {
				n.met.drop("heard_full")
				continue
			}
			a = &RepairAnswer{}
			q.answers[k] = a
		}
		if r, ok := a.Offer(src, t, need); ok {
			ts = append(ts, r)
		}
	}
	n.rep.mu.Unlock()
	if late {
		n.met.drop("unasked")
	}
	if len(theirs) > 0 {
		// The answerer's region's own totals, as a flush of its would
		// bring them: the store lost them with the rest, and they would
		// otherwise come back only when that region sends them again.
		n.mergeRemote(now, m, theirs)
	}
	if len(ts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if r, ok := n.store.(Restorer); ok {
		err = r.Restore(ctx, ts)
	} else {
		err = n.store.Merge(ctx, ts)
	}
	if err != nil {
		n.met.drop("store_error")
		n.logNet(slog.LevelWarn, "restore totals", "from", m.Node, "n", len(ts), "err", err)
		n.rep.mu.Lock()
		n.rep.again = true
		for _, t := range ts { // offer them again with the next answer
			if a := q.answers[dref{ref{t.Key, t.Window, t.Bucket}, t.Region}]; a != nil {
				a.restored = 0
			}
		}
		n.rep.mu.Unlock()
		return
	}
	n.met.repairTotals(len(ts))
	n.hear(now, ts)
}

// repairAsked reports whether s was asked for the open repair.
func (n *Node) repairAsked(s *member) bool {
	n.rep.mu.Lock()
	defer n.rep.mu.Unlock()
	return n.rep.quorum.wasAsked(s)
}
