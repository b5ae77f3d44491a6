package window

import (
	"slices"
	"sort"
	"time"
)

// Bounds of the default sliding window's state.
const (
	// ExactMax is the largest limit whose local trail is exact: up to it,
	// a region keeps one mark per millisecond that admitted hits, so it
	// decides as an exact sliding log of its own admissions.
	ExactMax = 2048
	// Granules is the number of granules a bucket is cut into for a coarse
	// trail: above ExactMax locally, and for every trail that replication
	// carries. A granule holds at most one mark.
	Granules = 256
	// MergeGranules is the number of spans a bucket is cut into when two
	// reports of a trail merge ([Trail.Merge]): the granule of coarse
	// trails before Granules was raised to 256, and still what a node of
	// that version records and accepts (at most one mark per span).
	// A mark only ever moves within its span, so reports recorded in
	// granules of either size merge span by span, the newest winning.
	MergeGranules = 64
)

// Mark is some hits of one region in one bucket: the last of them was
// admitted at offset At (ms from the start of the bucket), and Cum is the
// trail's hits up to and including this mark. All of a mark's hits count
// while its last one is in the trailing window.
type Mark struct {
	At  int64
	Cum uint64
}

// Trail is one region's hits in one bucket: marks in increasing order of
// At and of Cum, at most one per granule. In an exact trail a granule is
// one millisecond, so each mark is where its hits really fell; in a coarse
// trail it is a 1/Granules share of the bucket ([CoarseGranule]), and a
// mark's hits fell anywhere in its granule up to At. Cumulative counts make
// [Trail.Count] and [Trail.After] one lookup and one binary search.
//
// A trail only grows: marks are only added, and the last one's At and Cum
// only grow. Two reports of the same region's trail merge granule by
// granule ([Trail.Merge]), so replication stays idempotent and order-free.
// The nil Trail is empty.
type Trail []Mark

// CoarseGranule returns the coarse granule of offset at in a bucket of wMs:
// floor(at * Granules / wMs).
func CoarseGranule(at, wMs int64) int64 { return at * Granules / wMs }

// MergeSpan returns the span of offset at in a bucket of wMs in which
// reports merge: floor(at * MergeGranules / wMs). A span is
// Granules/MergeGranules whole coarse granules.
func MergeSpan(at, wMs int64) int64 { return at * MergeGranules / wMs }

// granule returns the granule of offset at: at itself when exact.
func granule(at, wMs int64, exact bool) int64 {
	if exact {
		return at
	}
	return CoarseGranule(at, wMs)
}

// Exact reports whether a region keeps an exact trail of its own hits for
// l: limits up to ExactMax.
func (l Limit) Exact() bool { return l.Limit <= ExactMax }

// Count returns the trail's hits.
func (t Trail) Count() uint64 {
	if len(t) == 0 {
		return 0
	}
	return t[len(t)-1].Cum
}

// N returns the hits of mark i.
func (t Trail) N(i int) uint64 {
	if i == 0 {
		return t[0].Cum
	}
	return t[i].Cum - t[i-1].Cum
}

// Last returns the offset of the trail's last hit, -1 when it is empty.
func (t Trail) Last() int64 {
	if len(t) == 0 {
		return -1
	}
	return t[len(t)-1].At
}

// FirstAfter returns the index of the first mark with At > e (len(t) when
// none is): the marks from it on are those still counted at offset e of
// the next bucket.
func (t Trail) FirstAfter(e int64) int {
	lo, hi := 0, len(t)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t[m].At <= e {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// After returns how many of the trail's hits count in the trailing window
// at offset e of the next bucket: those of the marks with At > e.
func (t Trail) After(e int64) uint64 {
	i := t.FirstAfter(e)
	switch {
	case i == len(t):
		return 0
	case i == 0:
		return t.Count()
	}
	return t.Count() - t[i-1].Cum
}

// Add records hits admitted at offset at of a bucket of wMs, in a granule of
// one millisecond when exact, else of wMs/Granules. An offset before the
// last mark's (a clock that stepped back) is taken as the last mark's, so
// that the trail stays ordered and no hit leaves the window early.
func (t *Trail) Add(at, wMs int64, hits uint64, exact bool) {
	s := *t
	var cum uint64
	if n := len(s); n > 0 {
		last := &s[n-1]
		at = max(at, last.At)
		if granule(at, wMs, exact) == granule(last.At, wMs, exact) {
			last.At, last.Cum = at, SatAdd(last.Cum, hits)
			return
		}
		cum = last.Cum
	}
	*t = append(s, Mark{At: at, Cum: SatAdd(cum, hits)})
}

// Extends reports whether Add(at, wMs, hits, exact) would append a mark to
// t, leaving its marks as they are, rather than change its last one.
func (t Trail) Extends(at, wMs int64, exact bool) bool {
	n := len(t)
	if n == 0 {
		return true
	}
	last := t[n-1].At
	return granule(max(at, last), wMs, exact) != granule(last, wMs, exact)
}

// Coarse returns t with its marks gathered into coarse granules of a bucket
// of wMs: per granule one mark at its last mark's offset. It returns t
// itself when t is coarse already.
func (t Trail) Coarse(wMs int64) Trail { return t.gather(wMs, Granules) }

// Spans returns t with its marks gathered into merge spans of a bucket of
// wMs ([MergeSpan]): at most MergeGranules marks, as a node that records
// coarse trails in spans reads them. It returns t itself when t holds at
// most one mark per span already.
func (t Trail) Spans(wMs int64) Trail { return t.gather(wMs, MergeGranules) }

// gather returns t with its marks gathered into granules of wMs/n: per
// granule one mark at its last mark's offset; t itself when it holds at
// most one mark per granule.
func (t Trail) gather(wMs, n int64) Trail {
	if t.sparse(wMs, n) {
		return t
	}
	out := make(Trail, 0, min(int64(len(t)), n))
	for i, m := range t {
		if k := len(out); k > 0 {
			last := &out[k-1]
			if at := max(m.At, last.At); at*n/wMs == last.At*n/wMs {
				last.At, last.Cum = at, SatAdd(last.Cum, t.N(i))
				continue
			}
		}
		out = append(out, Mark{At: m.At, Cum: SatAdd(out.Count(), t.N(i))})
	}
	return out
}

// sparse reports whether t holds at most one mark per granule of wMs/n.
func (t Trail) sparse(wMs, n int64) bool {
	if len(t) == 0 {
		return true
	}
	g := t[0].At * n / wMs // one division per mark, not two
	for _, m := range t[1:] {
		next := m.At * n / wMs
		if next == g {
			return false
		}
		g = next
	}
	return true
}

// Valid reports whether t is a coarse trail a region can report for a
// bucket of wMs, as replication carries it: marks at strictly increasing
// offsets from 0 to wMs-1 with strictly increasing Cum from 1, at most one
// per coarse granule.
func (t Trail) Valid(wMs int64) bool {
	var cum uint64
	for i, m := range t {
		if m.Cum <= cum || m.At < 0 || m.At >= wMs {
			return false
		}
		if i > 0 && CoarseGranule(m.At, wMs) <= CoarseGranule(t[i-1].At, wMs) {
			return false
		}
		cum = m.Cum
	}
	return true
}

// Merge merges o, another report of the same region's trail in a bucket of
// wMs, into t, span by span ([MergeSpan]): where o's marks in a span hold
// more hits than t's (or as many, the last later, or as many and as late
// in more marks), they replace t's. A trail's marks only move within their
// span, so reports of one region's trail are snapshots of one trail that
// grows span by span, whether they were recorded in coarse granules or in
// spans, or gathered into either for replication ([Trail.Coarse],
// [Trail.Spans]). The merge of any of them, in any order and any number of
// times, is the newest of them in each span, and of equally new ones the
// finest: idempotent, commutative and associative, and never more hits
// than the region admitted. t may be exact (a region's own trail, echoed
// back coarse by a peer). Merge never changes the marks t held: it makes
// a new slice when anything changes.
func (t *Trail) Merge(o Trail, wMs int64) {
	if len(o) == 0 {
		return
	}
	if len(*t) == 0 {
		*t = append(Trail(nil), o...)
		return
	}
	if slices.Equal(*t, o) {
		// The same report again (a bucket that no longer changes, as a
		// store's mirror passes it on every decision): nothing changes.
		return
	}
	a, b := *t, o
	var ca, cb uint64 // the Cum before a's and b's first marks
	out := make(Trail, 0, max(len(a), len(b)))
	var cum uint64
	for len(a) > 0 || len(b) > 0 {
		var g int64
		switch {
		case len(a) == 0:
			g = MergeSpan(b[0].At, wMs)
		case len(b) == 0:
			g = MergeSpan(a[0].At, wMs)
		default:
			g = min(MergeSpan(a[0].At, wMs), MergeSpan(b[0].At, wMs))
		}
		ia, la := granuleRun(a, g, wMs)
		ib, lb := granuleRun(b, g, wMs)
		var na, nb uint64
		if ia > 0 {
			na = a[ia-1].Cum - ca
		}
		if ib > 0 {
			nb = b[ib-1].Cum - cb
		}
		src, base := a[:ia], ca
		if nb > na || (nb == na && (lb > la || (lb == la && ib > ia))) {
			src, base = b[:ib], cb
		}
		for _, m := range src {
			out = append(out, Mark{At: m.At, Cum: SatAdd(cum, m.Cum-base)})
		}
		if len(src) > 0 {
			cum = out[len(out)-1].Cum
		}
		if ia > 0 {
			ca = a[ia-1].Cum
		}
		if ib > 0 {
			cb = b[ib-1].Cum
		}
		a, b = a[ia:], b[ib:]
	}
	*t = out
}

// granuleRun returns how many of t's first marks lie in merge span g and
// the last one's offset (-1 when none).
func granuleRun(t Trail, g, wMs int64) (k int, last int64) {
	last = -1
	for k < len(t) && MergeSpan(t[k].At, wMs) == g {
		last = t[k].At
		k++
	}
	return k, last
}

// Fit returns t as a decision reads it for a region whose count is n: the
// count is the authority on how many hits there are, the trail on where
// they fell. Hits of n that t lacks (a count reported without its marks)
// are added as a mark at the bucket's last millisecond, wMs-1, so they
// count as long as any hit of the bucket may; when t holds more hits than
// n (two histories merged, after a restart), its earliest hits are dropped
// until it holds n, which keeps the ones that count longest. It returns t
// itself when t holds exactly n.
func (t Trail) Fit(n uint64, wMs int64) Trail {
	c := t.Count()
	switch {
	case n == c:
		return t
	case n < c:
		drop := c - n
		i := sort.Search(len(t), func(i int) bool { return t[i].Cum > drop })
		out := make(Trail, len(t)-i)
		for j, m := range t[i:] {
			out[j] = Mark{At: m.At, Cum: m.Cum - drop}
		}
		return out
	}
	out := make(Trail, len(t), len(t)+1)
	copy(out, t)
	if k := len(out); k > 0 && out[k-1].At == wMs-1 {
		out[k-1].Cum = n
		return out
	}
	return append(out, Mark{At: wMs - 1, Cum: n})
}

// DecideTrails decides a request for hits with the default sliding window
// ([SlidingWindow]). Each region keeps, per epoch-aligned bucket of length
// W, a [Trail] of marks: each mark is N hits whose last one was admitted at
// offset At. At nowMs, e ms into bucket b, the trailing window
// (nowMs-W, nowMs] holds all of bucket b and, of bucket b-1, the hits after
// offset e. A mark counts whole while its last hit is in the window:
//
//	estimate = sum over regions of cur's count
//	         + sum over regions of the N of prev's marks with At > e
//	allow    = estimate + hits <= limit   (then cur[local] gets the hits at e)
//
// The estimate is never below the exact count of the hits in the trailing
// window, so one region never admits more than the limit in any trailing
// window. It exceeds the exact count only by hits that share a granule
// with a later hit still in the window: none for an exact trail (a
// granule of 1 ms), at most one granule's hits (1/Granules of a bucket)
// for a coarse one.
//
// prev and cur are the regions' trails of buckets b-1 and b, in any order
// (fitted to each region's count by [Trail.Fit]), and
// cur[local] is the local region's, the one an allowed request adds its
// hits to (for ResetAfter; pass a local out of range when cur lacks it).
// The decision does not change prev or cur: when it is allowed, the caller
// adds the hits to the local region's cur with [Trail.Add] at
// Decision.ElapsedMs.
//
// The estimate's terms are SubWhole (cur's count) and SubOldest (prev's
// hits still counted), with a weight of 1.
func (l Limit) DecideTrails(nowMs int64, prev, cur []Trail, local int, hits uint64) Decision {
	w := l.WindowMs()
	b := nowMs / w
	e := nowMs - b*w
	if e < 0 {
		b--
		e += w
	}
	var curN, prevN, prevAll uint64
	for _, t := range cur {
		curN = SatAdd(curN, t.Count())
	}
	for _, t := range prev {
		prevN = SatAdd(prevN, t.After(e))
		prevAll = SatAdd(prevAll, t.Count())
	}
	est := SatAdd(curN, prevN)
	d := Decision{Limit: l.Limit, Bucket: b, ElapsedMs: e, Estimate: est,
		SubMs: w, SubWhole: curN, SubOldest: prevN, SubWeightNum: 1, SubWeightDen: 1}
	if prevAll > 0 {
		d.PrevWeight = float64(prevN) / float64(prevAll)
	}
	lim := l.Limit
	var added uint64
	switch {
	case est <= lim && hits <= lim-est:
		d.Allowed = true
		added = hits
		est += hits
	case hits > lim:
		d.RetryAfter = Never
	default:
		d.RetryAfter = time.Duration(earliestTrails(e, w, prev, cur, est-(lim-hits))-e) * time.Millisecond
	}
	if est < lim {
		d.Remaining = lim - est
	}
	// The full limit fits once every counted hit has left: the last of
	// cur's marks (or this request's hits) one window after it fell.
	reset := e
	if prevN > 0 {
		for _, t := range prev {
			reset = max(reset, t.Last())
		}
	}
	for _, t := range cur {
		if len(t) > 0 {
			reset = max(reset, w+t.Last())
		}
	}
	if added > 0 {
		reset = max(reset, w+e)
	}
	d.ResetAfter = time.Duration(reset-e) * time.Millisecond
	return d
}

// earliestTrails returns the earliest offset t >= e from the start of the
// current bucket at which over of the counted hits have left the trailing
// window with no other traffic: prev's marks leave at their At, cur's at
// W + At. It walks the marks of every region in the order they leave.
func earliestTrails(e, w int64, prev, cur []Trail, over uint64) int64 {
	var pos [16]int
	idx := pos[:0]
	if len(prev)+len(cur) > len(pos) {
		idx = make([]int, 0, len(prev)+len(cur))
	}
	for _, t := range prev {
		idx = append(idx, t.FirstAfter(e))
	}
	for range cur {
		idx = append(idx, 0)
	}
	for {
		best, bt := -1, int64(0)
		for k, i := range idx {
			var at int64
			switch {
			case k < len(prev):
				if i >= len(prev[k]) {
					continue
				}
				at = prev[k][i].At
			default:
				c := cur[k-len(prev)]
				if i >= len(c) {
					continue
				}
				at = w + c[i].At
			}
			if best < 0 || at < bt {
				best, bt = k, at
			}
		}
		if best < 0 {
			return 2 * w // only when the counts saturated
		}
		var n uint64
		if best < len(prev) {
			n = prev[best].N(idx[best])
		} else {
			n = cur[best-len(prev)].N(idx[best])
		}
		idx[best]++
		if n >= over {
			return max(bt, e)
		}
		over -= n
	}
}
