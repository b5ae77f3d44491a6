package guard

import (
	"slices"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// trails is the default sliding window's state (window.Limit.DecideTrails)
// as the horizon's first store result read it: every region's trails of
// the previous and current buckets, and the estimate they give at t0 (the
// request's hits included when allowed). The estimate at a later instant,
// from the same trails, is what the window's slide freed since: a mark's
// hits leave the window when its last hit does, so a bunch of admissions
// frees its capacity in a bunch.
type trails struct {
	l         window.Limit
	bucket    int64
	prev, cur []window.Trail
	est0      uint64
	// whose is, per trail, whose admissions it holds: this node's
	// region's (its own or a replica's), another alive region's, or a
	// silent one's.
	whose []party
	// name is, per trail, its region's name (a replica's cut at "~").
	name []string
}

// party is whose admissions a trail holds (see trails.whose).
type party uint8

const (
	ownRegion party = iota
	aliveRegion
	silentRegion
)

// estimateOf is what the trails of party p give the estimate at t.
func (sp *trails) estimateOf(t time.Time, p party) uint64 {
	var est uint64
	for i, who := range sp.whose {
		if who == p {
			est = window.SatAdd(est, sp.estimateTrail(t, i))
		}
	}
	return est
}

// estimateTrail is what trail i gives the estimate at t.
func (sp *trails) estimateTrail(t time.Time, i int) uint64 {
	ms := t.UnixMilli()
	w := sp.l.WindowMs()
	b := ms / w
	e := ms - b*w
	switch b {
	case sp.bucket:
		return window.SatAdd(sp.cur[i].Count(), sp.prev[i].After(e))
	case sp.bucket + 1:
		return sp.cur[i].After(e)
	}
	return 0
}

// leavingOf returns what of party p's trails leaves the window from a to
// b.
func (sp *trails) leavingOf(p party, a, b time.Time) uint64 {
	return satSub(sp.estimateOf(a, p), sp.estimateOf(b, p))
}

// estimate is the estimate at t from the trails alone (nothing admitted
// since t0): every trail's, as window.Limit.DecideTrails sums them
// (newTrails checks that it gives back the store's).
func (sp *trails) estimate(t time.Time) uint64 {
	var est uint64
	for i := range sp.cur {
		est = window.SatAdd(est, sp.estimateTrail(t, i))
	}
	return est
}

// freed returns what the slide freed from t0 to t.
func (sp *trails) freed(t time.Time) uint64 {
	est := sp.estimate(t)
	if est >= sp.est0 {
		return 0
	}
	return sp.est0 - est
}

// leaving returns what of the trails leaves the window from a to b.
func (sp *trails) leaving(a, b time.Time) uint64 {
	ea, eb := sp.estimate(a), sp.estimate(b)
	if eb >= ea {
		return 0
	}
	return ea - eb
}

// newTrails returns the trail counter's state of res, decided at now with
// hits, or nil when res is not a trail counter's result or its trails do
// not give back its estimate (the window is res.SubMs).
func newTrails(now time.Time, lim window.Limit, hits uint64, res *region.Result, v *View) *trails {
	if a := lim.Algorithm; a != 0 && a != window.SlidingWindow {
		return nil
	}
	w := res.SubMs
	if w <= 0 || w != lim.WindowMs() || res.Bucket <= 0 || len(res.Regions) == 0 || res.Bucket*w+res.ElapsedMs != now.UnixMilli() {
		return nil
	}
	sp := &trails{bucket: res.Bucket, prev: make([]window.Trail, 0, len(res.Regions)), cur: make([]window.Trail, 0, len(res.Regions))}
	has := false
	sp.whose = make([]party, 0, len(res.Regions))
	for _, rc := range res.Regions {
		sp.prev = append(sp.prev, rc.PreviousTrail)
		sp.cur = append(sp.cur, rc.CurrentTrail)
		who := silentRegion
		name, _, _ := strings.Cut(rc.Region, "~")
		switch {
		case name == v.Region:
			who = ownRegion
		case slices.Contains(v.Alive, name):
			who = aliveRegion
		}
		sp.whose = append(sp.whose, who)
		sp.name = append(sp.name, name)
		has = has || rc.PreviousTrail.Count() > 0 || rc.CurrentTrail.Count() > 0
	}
	if !has {
		return nil
	}
	want := res.Estimate
	if res.Allowed {
		want += hits
	}
	sp.l = lim
	if sp.est0 = sp.estimate(now); sp.est0 != want {
		return nil
	}
	return sp
}

// freshOwn returns the hits region name admitted at or after the Unix ms
// cut, as the trails of res (the default sliding window's) hold them: its
// own and its replicas' (name~id, a node of the region deciding from its
// fallback, whose totals its region's nodes exchange at once, and the
// other regions get a one-way delay later, as they get the region's). A
// coarse mark counts whole when its last hit is at or after cut. ok is
// false when res carries no trails (another counter).
func freshOwn(res *region.Result, name string, cut int64) (n uint64, ok bool) {
	w := res.SubMs
	if w <= 0 || res.Bucket <= 0 {
		return 0, false
	}
	start := res.Bucket * w // the current bucket's start
	for _, rc := range res.Regions {
		if r, _, _ := strings.Cut(rc.Region, "~"); r != name {
			continue
		}
		if rc.CurrentTrail.Count() != rc.Current || rc.PreviousTrail.Count() != rc.Previous {
			return 0, false // not a trail counter's result
		}
		n += rc.CurrentTrail.After(max(cut-start, 0) - 1)
		if c := cut - (start - w); c < w {
			n += rc.PreviousTrail.After(max(c, 0) - 1)
		}
	}
	return n, true // 0: no hits of its own in either bucket
}

// reuseAge is how long after one of its region's admissions leaves the
// window a node may admit in its place (see [entry.refill]): the others
// hold what leaves of theirs for a horizon and as long again (see
// [trails.reserve]).
const reuseAge = 100 * time.Millisecond

// reuseSlot is the length of the slots that age a node's reuse.
const reuseSlot = reuseAge / 2

// blackout is how long before a bucket ends what leaves the window is not
// reused, for a horizon h: another node's reserve reads only the current
// bucket's trails, so what leaves before the bucket began must have been
// heard wherever it was reused. It holds while no region's horizon is more
// than twice another's.
func blackout(h time.Duration) time.Duration { return 2*h + reuseAge }

// reuses reports whether what leaves a window of limit l is reused, under
// horizon h: when its bucket holds a blackout and two horizons more, and
// the limit's rate is at least a hit per reuseAge, so that a region's
// admissions leave often enough for its requests to find them within
// reuseAge.
func reuses(l window.Limit, h time.Duration) bool {
	w := l.Window
	return w > blackout(h)+2*h && l.Limit >= uint64(w/reuseAge)
}

// reusable returns what of this region's trails leaves the window from a
// to b (at most a bucket less the blackout apart), less what leaves in a
// bucket's last blackout(h).
func (sp *trails) reusable(a, b time.Time, h time.Duration) uint64 {
	w := sp.l.WindowMs()
	am, bm := a.UnixMilli(), b.UnixMilli()
	if am >= bm {
		return 0
	}
	next := (am/w + 1) * w // the first bucket boundary after a
	var n uint64
	if x := min(bm, next-blackout(h).Milliseconds()); x > am {
		n += sp.leavingOf(ownRegion, a, time.UnixMilli(x))
	}
	if bm > next {
		n += sp.leavingOf(ownRegion, time.UnixMilli(max(am, next)), b)
	}
	return n
}

// reserve returns what of the other alive regions' trails left the window
// in the reuse reach before t, from the start of t's bucket on: their
// nodes may have admitted in its place, unheard yet. The reach of a
// region is a horizon and reuseAge, and as long again as it has not been
// heard from (ages): what it admitted since it was last heard has not
// arrived. ok is false when the trails do not hold t's bucket.
func (sp *trails) reserve(t time.Time, h time.Duration, ages map[string]time.Duration) (n uint64, ok bool) {
	if !reuses(sp.l, h) {
		return 0, true // no region reuses what leaves: nothing to hold
	}
	w := sp.l.WindowMs()
	tm := t.UnixMilli()
	if b := tm / w; b != sp.bucket && b != sp.bucket+1 {
		return 0, false
	}
	// Held whole, as if each region reused all of what left of its own:
	// a region reuses less only while its part of the count is beyond its
	// share (see reuseShare), by weights this node cannot read as it does.
	for i, who := range sp.whose {
		if who != aliveRegion {
			continue
		}
		reach := h + reuseAge + max(ages[sp.name[i]], 0)
		from := time.UnixMilli(max(tm-reach.Milliseconds(), tm/w*w))
		n = window.SatAdd(n, satSub(sp.estimateTrail(from, i), sp.estimateTrail(t, i)))
	}
	return n, true
}
