package region

import (
	"slices"
	"strings"

	"github.com/rlcluster/rlcluster/internal/window"
)

// Counters over K > 1 sub-buckets (Request.K): the Memory store keeps them
// in a ring of K+1 sub-buckets per (key, W, K), the Redis store in one hash
// per (key, W, K) whose fields are "<j>:<region>".

// floorMod returns a mod m in 0..m-1.
func floorMod(a, m int64) int64 {
	r := a % m
	if r < 0 {
		r += m
	}
	return r
}

// sub returns sub-bucket j of a ring entry, or nil.
func (e *memEntry) sub(j int64) *memBucket {
	if e == nil || e.subs == nil {
		return nil
	}
	b := &e.subs[floorMod(j, int64(len(e.subs)))]
	if b.used && b.idx == j {
		return b
	}
	return nil
}

// ensureSub returns sub-bucket j of a ring entry of k+1 sub-buckets,
// making room for it; it returns nil when j is older than the sub-buckets
// j-k..j of the newest one seen, or than the one held in its slot.
func (e *memEntry) ensureSub(j, k int64) *memBucket {
	if e.subs == nil {
		e.subs = make([]memBucket, k+1)
		e.top = j
	}
	if j < e.top-k {
		return nil
	}
	b := &e.subs[floorMod(j, k+1)]
	switch {
	case b.used && b.idx == j:
		return b
	case b.used && b.idx > j:
		return nil
	}
	*b = memBucket{idx: j, used: true, counts: b.counts[:0]}
	e.top = max(e.top, j)
	return b
}

// subExpired reports whether a ring entry holds no sub-bucket from j-k on,
// j the sub-bucket of nowMs.
func (e *memEntry) subExpired(nowMs int64) bool {
	k := e.k.k
	j := floorDiv(nowMs, e.k.wMs/k)
	for i := range e.subs {
		if e.subs[i].used && e.subs[i].idx >= j-k {
			return false
		}
	}
	return true
}

// decideSliding decides r (K > 1 or strict) on the sub-buckets bs of its
// counter, oldest first (bs[0] is j-K, a nil one holds nothing; for K <= 1
// the previous and current buckets), and returns the decision and the
// per-region counts before the request.
func decideSliding(r *Request, nowMs int64, bs []*memBucket) window.Decision {
	s, _ := r.sliding()
	c := make([]uint64, len(bs))
	for i, b := range bs {
		c[i] = b.sum()
	}
	return s.Decide(nowMs, c, r.Hits)
}

// slidingRegions lists the per-region counts of the sub-buckets bs (oldest
// first, bs[0] the oldest overlapping one), sorted by region, with local
// always present: Current sums the whole ones, Previous is the oldest's.
func slidingRegions(local string, bs []*memBucket) []RegionCount {
	n := 1
	for _, b := range bs {
		if b != nil {
			n += len(b.counts)
		}
	}
	out := make([]RegionCount, 1, n)
	out[0] = RegionCount{Region: local}
	for i, b := range bs {
		if b == nil {
			continue
		}
		for _, c := range b.counts {
			if i == 0 {
				out = append(out, RegionCount{Region: c.region, Previous: c.n})
			} else {
				out = append(out, RegionCount{Region: c.region, Current: c.n})
			}
		}
	}
	slices.SortFunc(out, func(a, b RegionCount) int { return strings.Compare(a.Region, b.Region) })
	j := 0
	for i := 1; i < len(out); i++ {
		if out[i].Region == out[j].Region {
			out[j].Current = satAdd(out[j].Current, out[i].Current)
			out[j].Previous = max(out[j].Previous, out[i].Previous)
			continue
		}
		j++
		out[j] = out[i]
	}
	return out[:j+1]
}
