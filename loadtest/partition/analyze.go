package main

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"
)

// Admission is one admitted hit: when the client saw it (the midpoint of
// the request's send and its answer) and which region admitted it.
type Admission struct {
	At     time.Time
	Region int
}

// Window is one trailing window (At-W, At] that ends at an admission: how
// many hits the cluster admitted in it, and how many each region did.
type Window struct {
	At        time.Time
	Count     int
	PerRegion []int
}

// Phase is a span of time [From, To) over which the trailing windows that
// end at admissions inside it are summarized.
type Phase struct {
	Name     string
	From, To time.Time
}

// PhaseStats summarizes the trailing windows that end in one phase, as
// multiples of the limit: the largest (and that window), the smallest, and
// the median; Admitted counts the phase's admissions per region.
type PhaseStats struct {
	Phase
	Windows       int
	Max, Min, P50 float64
	Worst         Window
	Admitted      []int
}

// trailing returns, for every admission in time order, the trailing window
// (t-w, t] that ends at it: the admissions in it, in total and per region
// (of nRegions). adm is sorted in place.
func trailing(adm []Admission, w time.Duration, nRegions int) []Window {
	slices.SortStableFunc(adm, func(a, b Admission) int { return a.At.Compare(b.At) })
	out := make([]Window, 0, len(adm))
	per := make([]int, nRegions)
	lo := 0
	for hi := range adm {
		per[adm[hi].Region]++
		// Admissions at the same instant as hi all belong to the window
		// that ends at hi; advance hi's window over them first.
		for lo < hi && !adm[lo].At.After(adm[hi].At.Add(-w)) {
			per[adm[lo].Region]--
			lo++
		}
		if hi+1 < len(adm) && adm[hi+1].At.Equal(adm[hi].At) {
			continue
		}
		out = append(out, Window{At: adm[hi].At, Count: hi - lo + 1, PerRegion: slices.Clone(per)})
	}
	return out
}

// summarize computes the phase's figures from the windows (as returned by
// trailing) and the admissions, against limit.
func summarize(p Phase, windows []Window, adm []Admission, limit uint64, nRegions int) PhaseStats {
	st := PhaseStats{Phase: p, Admitted: make([]int, nRegions)}
	var ratios []float64
	for _, w := range windows {
		if w.At.Before(p.From) || !w.At.Before(p.To) {
			continue
		}
		r := float64(w.Count) / float64(limit)
		ratios = append(ratios, r)
		if len(ratios) == 1 || r > st.Max {
			st.Max, st.Worst = r, w
		}
		if len(ratios) == 1 || r < st.Min {
			st.Min = r
		}
	}
	for _, a := range adm {
		if !a.At.Before(p.From) && a.At.Before(p.To) {
			st.Admitted[a.Region]++
		}
	}
	st.Windows = len(ratios)
	if len(ratios) > 0 {
		sort.Float64s(ratios)
		st.P50 = ratios[len(ratios)/2]
	}
	return st
}

// View is what one region's node answered a Peek with: the bucket it is
// in and every region's count of the previous (closed) bucket.
type View struct {
	OK       bool
	Bucket   int64
	Previous map[string]uint64
}

// Round is one poll of every region, started at Start and answered in
// full by Done; Views is indexed like the regions.
type Round struct {
	Start, Done time.Time
	Views       []View
}

// agreeOn reports whether every region's view in r shows bucket b closed
// (they are all in bucket b+1) with the same non-zero count for every one
// of the want regions, and no other region's count differing.
func agreeOn(r Round, b int64, want []string) bool {
	if len(r.Views) == 0 {
		return false
	}
	for _, v := range r.Views {
		if !v.OK || v.Bucket != b+1 || !maps.Equal(v.Previous, r.Views[0].Previous) {
			return false
		}
	}
	for _, name := range want {
		if r.Views[0].Previous[name] == 0 {
			return false
		}
	}
	return true
}

// Agreement is when the regions first agreed on a closed bucket, and the
// bound they had to meet.
type Agreement struct {
	Bucket int64
	// Since is the instant the clock starts: the heal, or the bucket's end
	// when it closed after the heal.
	Since time.Time
	// After is how long after Since the first agreeing round was answered
	// in full (-1 when no round agreed); Before is when the last round
	// that did not agree started (a lower bound on the true delay).
	After, Before time.Duration
	Bound         time.Duration
	// Counts is the agreed vector.
	Counts map[string]uint64
	// DisagreedInCut reports whether a round during the cut saw the
	// regions disagree on the bucket (or not all of them in it).
	DisagreedInCut bool
}

// agreement finds the first round that started at or after since and
// agrees on bucket b.
func agreement(rounds []Round, b int64, want []string, since time.Time, bound time.Duration) Agreement {
	a := Agreement{Bucket: b, Since: since, After: -1, Bound: bound}
	for _, r := range rounds {
		if r.Start.Before(since) {
			continue
		}
		if agreeOn(r, b, want) {
			a.After = r.Done.Sub(since)
			a.Counts = r.Views[0].Previous
			return a
		}
		a.Before = r.Start.Sub(since)
	}
	return a
}

// String formats the agreement for the report.
func (a Agreement) String() string {
	if a.After < 0 {
		return fmt.Sprintf("bucket %d: no agreement (bound %v after %s)", a.Bucket, a.Bound, a.Since.Format("15:04:05.000"))
	}
	return fmt.Sprintf("bucket %d: agreed %v after %s (not yet at %v; bound %v), counts %v",
		a.Bucket, a.After.Round(time.Millisecond), a.Since.Format("15:04:05.000"), a.Before.Round(time.Millisecond), a.Bound, a.Counts)
}
