package guard

import (
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
}

// estimate is the estimate at t from the trails alone (nothing admitted
// since t0).
func (sp *trails) estimate(t time.Time) uint64 {
	ms := t.UnixMilli()
	switch b := ms / sp.l.WindowMs(); b {
	case sp.bucket:
		return sp.l.DecideTrails(ms, sp.prev, sp.cur, -1, 0).Estimate
	case sp.bucket + 1:
		return sp.l.DecideTrails(ms, sp.cur, nil, -1, 0).Estimate
	default:
		return 0
	}
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
func newTrails(now time.Time, lim window.Limit, hits uint64, res *region.Result) *trails {
	if a := lim.Algorithm; a != 0 && a != window.SlidingWindow {
		return nil
	}
	w := res.SubMs
	if w <= 0 || w != lim.WindowMs() || res.Bucket <= 0 || len(res.Regions) == 0 || res.Bucket*w+res.ElapsedMs != now.UnixMilli() {
		return nil
	}
	sp := &trails{bucket: res.Bucket, prev: make([]window.Trail, 0, len(res.Regions)), cur: make([]window.Trail, 0, len(res.Regions))}
	has := false
	for _, rc := range res.Regions {
		sp.prev = append(sp.prev, rc.PreviousTrail)
		sp.cur = append(sp.cur, rc.CurrentTrail)
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
