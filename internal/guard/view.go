package guard

import (
	"slices"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// View is what the guard needs to know of the pool at a decision.
type View struct {
	// Region is this node's region.
	Region string
	// Alive lists the regions heard from within the suspicion timeout,
	// this one included.
	Alive []string
	// Silent lists the member regions not heard from within the
	// suspicion timeout.
	Silent []string
	// Nodes is the number of alive nodes of this region (at least 1).
	Nodes int
	// Horizon is how long a count admitted elsewhere may take to arrive
	// here: the flush interval plus the one-way delay.
	Horizon time.Duration
	// Ages is, per member region, the time since it was last heard from:
	// the guard counts a region quiet for a key from it (see
	// [entry.quiet]) and charges a silent region what it may have
	// refilled since (see [heldCount.refilled]). A region absent from it
	// counts as heard just now.
	Ages map[string]time.Duration
	// Unheard is, per alive region, the member regions it said recently
	// that it does not hear (absent: it hears every one). See
	// [View.Crossed].
	Unheard map[string][]string
	// RegionNodes is, per alive region, its alive nodes (see [stagger]);
	// a region absent from it is taken to have Nodes.
	RegionNodes map[string]int
}

// nodesOf is the alive nodes of alive region r.
func (v *View) nodesOf(r string) int {
	if n := v.RegionNodes[r]; n > 0 {
		return n
	}
	return max(v.Nodes, 1)
}

// poolNodes is the alive nodes of the alive regions.
func (v *View) poolNodes() int {
	n := 0
	for _, r := range v.Alive {
		n += v.nodesOf(r)
	}
	return max(n, 1)
}

// Crossed reports whether the regions do not split into sides that each
// hear all of their own: an alive region does not hear this one or
// another alive region, or hears a region that is silent here. One cut
// link does that (ap and us cannot reach each other, eu hears both): ap
// and us each take eu for alive and us or ap for silent, and each would
// admit the limit less the other's share, eu's share included in both.
// A crossed view is decided with every other region charged as silent
// (see [View.Isolated]).
func (v *View) Crossed() bool {
	for _, a := range v.Alive {
		if a == v.Region {
			continue
		}
		un := v.Unheard[a]
		for _, b := range un {
			if b == v.Region || slices.Contains(v.Alive, b) {
				return true // a does not hear a region this one hears
			}
		}
		for _, b := range v.Silent {
			if b != a && !slices.Contains(un, b) {
				return true // a hears a region this one does not
			}
		}
	}
	return false
}

// Isolated returns v with every other region silent when v is
// [View.Crossed], else v itself: each region then admits at most its
// share of the limit (limit/R) beyond what the others are known to have
// admitted, so that the regions together stay within the limit whatever
// links are cut, at the cost of what an idle region's share would have
// lent to a busy one.
func (v *View) Isolated() *View {
	if !v.Crossed() {
		return v
	}
	q := *v
	q.Alive = []string{v.Region}
	q.Silent = make([]string, 0, len(v.Alive)+len(v.Silent)-1)
	for _, r := range v.Alive {
		if r != v.Region {
			q.Silent = append(q.Silent, r)
		}
	}
	q.Silent = append(q.Silent, v.Silent...)
	slices.Sort(q.Silent)
	return &q
}

// RejoinHold is how long a region heard again after a silence stays
// silent in a [View]: until the totals it re-sends on hearing this region
// again (the open and previous buckets) can have arrived, two flush
// intervals plus two one-way delays. Taken for alive at once, it would
// stop being charged while the estimate still lacks what it admitted
// during the silence.
func RejoinHold(flush, oneWay time.Duration) time.Duration { return 2 * (flush + oneWay) }

// UnheardHold is how long a region's report of the regions it does not
// hear ([View.Unheard]) holds: a node sends one with every heartbeat
// while it has any, so three heartbeats without one mean it hears every
// region again.
func UnheardHold(heartbeat time.Duration) time.Duration { return 3 * heartbeat }

// Off reports whether the guard does nothing under v: no other region is
// alive and none is silent.
func (v *View) Off() bool { return len(v.Alive) <= 1 && len(v.Silent) == 0 }

// Charge reports whether this node charges the silent regions their
// share: whenever any member region is silent. Which side of a split is
// the larger one cannot be told from one side (two groups of two, or a
// cut link that leaves a third region hearing both sides, look the same
// as a majority to every side), so every side charges every region it
// does not hear.
func (v *View) Charge() bool { return len(v.Silent) > 0 }

// rank is the number of alive regions named before this one.
func rank(v *View) uint64 {
	var k uint64
	for _, r := range v.Alive {
		if r < v.Region {
			k++
		}
	}
	return k
}

// regionCount is a region's count in the current and previous buckets.
type regionCount struct {
	name string
	n    uint64
}

// counts returns the alive regions' counts (see [tally]) and the silent
// regions' counts (see [heldCount]), from the per-region counts of a
// store result (replicas region~id count for their region).
func counts(res *region.Result, v *View) (c tally, silent []heldCount) {
	var buf [16]regionCount // no allocation up to 16 alive regions
	others := buf[:0]
	for _, rc := range res.Regions {
		name, _, _ := strings.Cut(rc.Region, "~")
		n := rc.Current + rc.Previous
		switch {
		case name == v.Region:
			c.own += n
		case slices.Contains(v.Alive, name):
			i := slices.IndexFunc(others, func(o regionCount) bool { return o.name == name })
			if i < 0 {
				others = append(others, regionCount{name: name})
				i = len(others) - 1
			}
			others[i].n += n
		case slices.Contains(v.Silent, name):
			silent = append(silent, heldCount{region: name, id: rc.Region, bucket: res.Bucket, cur: rc.Current, prev: rc.Previous,
				curTrail: lowTrail(rc.CurrentTrail), prevTrail: lowTrail(rc.PreviousTrail)})
		}
	}
	for _, o := range others {
		x := weight(o.n)
		c.others += x
		if o.name < v.Region {
			c.before += x
		}
	}
	return c, silent
}

// heldCount is a silent region's counts in the current and previous
// buckets as a store result read them. Nothing newer arrives from a region
// this node does not hear, so what they add to the estimate only shrinks
// as the window slides: [heldCount.at] recomputes it at a later decision.
type heldCount struct {
	region, id          string // the region, and the replica (region~id) the counts are of
	bucket              int64
	cur, prev           uint64
	curTrail, prevTrail window.Trail
	olderTrail          window.Trail // the bucket before prev, kept from an earlier result (see keepOlder)
}

// heldMarks bounds the marks a [heldCount] keeps of each trail.
const heldMarks = 8

// lowTrail is a copy of t in at most heldMarks marks that never counts
// more of it in the window than t does: each kept mark stands for a run
// of t's marks, with their hits, at the earliest of their offsets, so it
// leaves the window when the first of them does. Held as high as t, a
// silent region would be charged less than its share once part of the
// run had left.
func lowTrail(t window.Trail) window.Trail {
	if len(t) <= heldMarks {
		return slices.Clone(t)
	}
	run := (len(t) + heldMarks - 1) / heldMarks
	out := make(window.Trail, 0, heldMarks)
	for i := 0; i < len(t); i += run {
		out = append(out, window.Mark{At: t[i].At, Cum: t[min(i+run, len(t))-1].Cum})
	}
	return out
}

// at is what h adds to the estimate of lim at nowMs, as the store would
// count it: by its trails for the default sliding window, else by
// [window.Limit.Estimate] (the current bucket's count for a calendar one).
func (h *heldCount) at(nowMs int64, lim window.Limit) uint64 {
	_, b := lim.BucketAt(nowMs)
	c, prevTrail := window.Counts{Cur: h.cur, Prev: h.prev}, h.prevTrail
	switch {
	case b == h.bucket:
	case lim.Window > 0 && b == h.bucket+1:
		c, prevTrail = window.Counts{Prev: h.cur}, h.curTrail
	default:
		return 0
	}
	switch {
	case lim.Algorithm.Trails():
		return window.SatAdd(c.Cur, prevTrail.After(nowMs-b*lim.WindowMs()))
	case lim.Window > 0:
		return lim.Estimate(nowMs, c)
	}
	return c.Cur
}

// refilled is what of h's hits left the window between t0, when its region
// was last heard, and t0+d (at most nowMs), and so may have been admitted
// again by that region before it could tell that it was unheard: a region
// that keeps its window full refills what slides out, and those hits are
// in no estimate here. They leave a window after they left. It counts from
// the default sliding window's trails, and is 0 for other counters.
func (h *heldCount) refilled(t0 int64, d time.Duration, nowMs int64, lim window.Limit) uint64 {
	if !lim.Algorithm.Trails() || lim.Window <= 0 {
		return 0
	}
	w := lim.WindowMs()
	a, b := max(t0, nowMs-w)-w, min(t0+d.Milliseconds(), nowMs)-w
	if a >= b {
		return 0
	}
	var n uint64
	in := func(t window.Trail, start int64) {
		n = window.SatAdd(n, satSub(t.After(a-start), t.After(b-start)))
	}
	start := h.bucket * w
	in(h.curTrail, start)
	in(h.prevTrail, start-w)
	in(h.olderTrail, start-2*w)
	return n
}

// keepOlder gives each of silent the trail of the bucket before its
// previous one from old, the silent counts of an earlier result: a result
// in a later bucket no longer holds it, and [heldCount.refilled] may
// still need it.
func keepOlder(silent, old []heldCount) {
	for i := range silent {
		for _, o := range old {
			if o.id != silent[i].id {
				continue
			}
			switch o.bucket {
			case silent[i].bucket - 1:
				silent[i].olderTrail = o.prevTrail
			case silent[i].bucket:
				silent[i].olderTrail = o.olderTrail
			}
		}
	}
}

// charge takes the silent regions' unseen shares off h (a limit or a
// headroom) when v says this side charges them: each silent region r is
// charged max(ceil(limit/R_all) - held, refilled), held being what the
// estimate of lim at nowMs holds of it (see [heldCount.at]; 0 when
// unknown) and refilled what it may have admitted again, unheard, in the
// undetected time after it was last heard (see [heldCount.refilled]).
func charge(h, limit uint64, silent []heldCount, nowMs int64, lim window.Limit, v *View, undetected time.Duration) uint64 {
	if !v.Charge() {
		return h
	}
	share := window.MulDivCeil(limit, 1, uint64(len(v.Alive)+len(v.Silent)))
	for _, r := range v.Silent {
		var c, refill uint64
		t0 := nowMs - v.Ages[r].Milliseconds()
		for i := range silent {
			if silent[i].region == r {
				c = window.SatAdd(c, silent[i].at(nowMs, lim))
				refill = window.SatAdd(refill, silent[i].refilled(t0, undetected, nowMs, lim))
			}
		}
		need := max(satSub(share, c), refill)
		if h <= need {
			return 0
		}
		h -= need
	}
	return h
}
