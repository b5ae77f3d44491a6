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

// View is what one region's node answered a Peek with: the bucket it was
// in and every region's count of the previous (closed) bucket, read from
// the store at Read (the store's clock: the bucket's start plus the
// answer's elapsed time).
type View struct {
	Read     time.Time
	Bucket   int64
	Previous map[string]uint64
}

// Agreement is when the regions came to agree on a closed bucket, and the
// bound they had to meet.
type Agreement struct {
	Bucket int64
	// Since is the instant the clock starts: the heal, or the bucket's end
	// when it closed after the heal.
	Since time.Time
	// At is the first instant by which every region's store was read
	// holding the agreed counts (the latest of the regions' first such
	// reads); zero when the regions never agreed. NotBefore is the latest
	// read of a region that did not hold them yet: the true instant lies
	// in (NotBefore, At].
	At, NotBefore time.Time
	Bound         time.Duration
	// Counts is the agreed vector.
	Counts map[string]uint64
	// Diverged reports whether some region was read holding other counts
	// of the bucket during [from, to) given to agreement (the cut): a cut
	// that left the regions agreeing measured nothing.
	Diverged bool
}

// After is how long after Since the regions agreed, at most; -1 when they
// never did.
func (a Agreement) After() time.Duration {
	if a.At.IsZero() {
		return -1
	}
	return a.At.Sub(a.Since)
}

// agreement finds when the regions' views (per region, in time order)
// came to agree on bucket b: each region's last view of it (read while in
// bucket b+1) must show the same counts, non-zero for every region in
// want; each region holds them from its first read after its last read of
// other counts. Diverged is set when a view read in [from, to) differed.
func agreement(views [][]View, b int64, want []string, since time.Time, bound time.Duration, from, to time.Time) Agreement {
	a := Agreement{Bucket: b, Since: since, Bound: bound}
	var final map[string]uint64
	for _, vs := range views {
		var last map[string]uint64
		for _, v := range vs {
			if v.Bucket == b+1 {
				last = v.Previous
			}
		}
		if last == nil || (final != nil && !maps.Equal(last, final)) {
			return a
		}
		final = last
	}
	for _, name := range want {
		if final[name] == 0 {
			return a
		}
	}
	var at, notBefore time.Time
	for _, vs := range views {
		var first, lastOther time.Time
		for _, v := range vs {
			if v.Bucket != b+1 {
				continue
			}
			if !maps.Equal(v.Previous, final) {
				first, lastOther = time.Time{}, v.Read
				if !v.Read.Before(from) && v.Read.Before(to) {
					a.Diverged = true
				}
			} else if first.IsZero() {
				first = v.Read
			}
		}
		if first.After(at) {
			at = first
		}
		if lastOther.After(notBefore) {
			notBefore = lastOther
		}
	}
	a.At, a.NotBefore, a.Counts = at, notBefore, final
	return a
}

// String formats the agreement for the report.
func (a Agreement) String() string {
	if a.At.IsZero() {
		return fmt.Sprintf("bucket %d: no agreement (bound %v after %s)", a.Bucket, a.Bound, a.Since.Format("15:04:05.000"))
	}
	lo := "-"
	if !a.NotBefore.IsZero() {
		lo = a.NotBefore.Sub(a.Since).String()
	}
	return fmt.Sprintf("bucket %d: agreed %v after %s (a region still differed at %s; bound %v), counts %v",
		a.Bucket, a.After(), a.Since.Format("15:04:05.000"), lo, a.Bound, a.Counts)
}
