package window

import (
	"math"
	"time"
)

// Half is one region's hits in one half of a bucket: N hits, the first
// admitted at offset First and the last at offset Last, in ms from the start
// of the bucket (not of the half); and, when its hits fell in more than one
// run (a hit more than [Limit.RunGapMs] after the one before it starts a
// new run), where its latest run began (Run) and how many hits came before
// that (Before). Before is 0 while the half holds one run. A Half with N = 0
// holds nothing and its offsets mean nothing.
//
// Every field is monotone in time for one region, so a Half replicates as
// counts do: First merges by minimum, the others by maximum (see
// [Half.Merge]).
type Half struct {
	N           uint64
	First, Last int64
	Run         int64
	Before      uint64
}

// Halves is one region's state of one bucket: the hits of its early half
// [0, H) and of its late half [H, W), where H = floor(W/2) ([Limit.HalfMs]).
type Halves struct {
	Early, Late Half
}

// Count returns the region's count of the bucket, Early.N + Late.N,
// saturating.
func (h Halves) Count() uint64 { return satAdd(h.Early.N, h.Late.N) }

// Add records hits admitted at offset e (ms from the bucket's start, 0 to
// W-1) of a bucket of length wMs.
func (h *Halves) Add(e, wMs int64, hits uint64) {
	x := &h.Early
	if e >= wMs/2 {
		x = &h.Late
	}
	x.Add(e, runGap(wMs), hits)
}

// Add records hits admitted at offset e; a hit more than gap ms after the
// last one starts a new run.
func (h *Half) Add(e, gap int64, hits uint64) {
	switch {
	case h.N == 0:
		h.First, h.Last, h.Run, h.Before = e, e, 0, 0
	case e-h.Last > gap:
		h.Run, h.Before, h.Last = e, h.N, e
	default:
		h.First, h.Last = min(h.First, e), max(h.Last, e)
	}
	h.N = satAdd(h.N, hits)
}

// Merge merges o, another report of the same region's half, into h: First
// by minimum, the other fields by maximum. It is idempotent, commutative and
// associative, so reports may arrive duplicated, late or out of order, and
// merging every report gives the latest one.
func (h *Half) Merge(o Half) {
	switch {
	case o.N == 0:
	case h.N == 0:
		*h = o
	default:
		h.N, h.First, h.Last = max(h.N, o.N), min(h.First, o.First), max(h.Last, o.Last)
		h.Run, h.Before = max(h.Run, o.Run), max(h.Before, o.Before)
	}
}

// Merge merges o into h half by half; see [Half.Merge].
func (h *Halves) Merge(o Halves) {
	h.Early.Merge(o.Early)
	h.Late.Merge(o.Late)
}

// Valid reports whether h is a state a region can reach in a half [lo, hi)
// of a bucket: First <= Last within the half, N >= 1, and either no run
// split (Run = Before = 0) or First < Run <= Last and 0 < Before < N. The
// zero Half is valid. Decisions treat an invalid half as N hits spread over
// the whole half.
func (h Half) Valid(lo, hi int64) bool {
	if h.N == 0 {
		return h == Half{}
	}
	if h.First < lo || h.Last >= hi || h.First > h.Last {
		return false
	}
	if h.Run == 0 && h.Before == 0 {
		return true
	}
	return h.First < h.Run && h.Run <= h.Last && h.Before > 0 && h.Before < h.N
}

// Valid reports whether both halves are valid for a bucket of wMs.
func (h Halves) Valid(wMs int64) bool {
	return h.Early.Valid(0, wMs/2) && h.Late.Valid(wMs/2, wMs)
}

// HalfMs returns H = floor(W/2), where the late half of a bucket begins, in
// ms.
func (l Limit) HalfMs() int64 { return l.WindowMs() / 2 }

// RunGapMs returns the gap after which a hit starts a new run in a half:
// W/40 (at least 1 ms).
func (l Limit) RunGapMs() int64 { return runGap(l.WindowMs()) }

func runGap(wMs int64) int64 { return max(wMs/40, 1) }

// Term is a share of a half-bucket's hits in the trailing window:
// floor(N * Num / Den) of N hits are counted.
type Term struct {
	N, Num, Den uint64
}

// Value returns floor(N * Num / Den), 0 for the zero Term.
func (t Term) Value() uint64 {
	if t.Num == 0 {
		return 0
	}
	return MulDiv(t.N, t.Num, t.Den)
}

// evenTerm returns the term of n hits taken as spread evenly over the
// milliseconds a..b at offset e: those after e are in the trailing window.
// Strict counts all n while b > e.
func evenTerm(n uint64, a, b, e int64, strict bool) Term {
	den := uint64(b - a + 1)
	t := Term{N: n, Den: den}
	switch {
	case strict:
		if b > e {
			t.Num = den
		}
	case e < a:
		t.Num = den
	case e < b:
		t.Num = uint64(b - e)
	}
	return t
}

// halfTerms returns the terms of half o at offset e (ms from the start of
// the bucket that holds o), which lies in [lo, hi): its earlier runs as all
// at Run-1 and its latest run spread over Run..Last (one run: First..Last,
// and a zero first term). An invalid half counts as spread over [lo, hi).
func halfTerms(o Half, e, lo, hi int64, strict bool) (early, latest Term) {
	if !o.Valid(lo, hi) {
		return Term{}, evenTerm(o.N, lo, hi-1, e, strict)
	}
	if o.Before == 0 {
		return Term{}, evenTerm(o.N, o.First, o.Last, e, strict)
	}
	return evenTerm(o.Before, o.Run-1, o.Run-1, e, strict), evenTerm(o.N-o.Before, o.Run, o.Last, e, strict)
}

// oldest returns p's oldest half overlapping the trailing window at offset
// e of the next bucket, and the half's bounds.
func oldest(p Halves, e, h, w int64) (Half, int64, int64) {
	if e < h {
		return p.Early, 0, h
	}
	return p.Late, h, w
}

// SpanTerms returns the terms of [Limit.DecideSpans]'s estimate at e ms
// into the current bucket (Decision.ElapsedMs), for prev, the regions'
// states of the previous bucket: each region's earlier runs, then its latest
// run, leaving out terms that count nothing. The estimate is
// Decision.SubWhole plus the sum of their values.
func (l Limit) SpanTerms(e int64, prev []Halves) []Term {
	w := l.WindowMs()
	var out []Term
	for i := range prev {
		o, lo, hi := oldest(prev[i], e, w/2, w)
		if o.N == 0 {
			continue
		}
		a, b := halfTerms(o, e, lo, hi, l.Strict)
		for _, t := range [2]Term{a, b} {
			if t.Num != 0 {
				out = append(out, t)
			}
		}
	}
	return out
}

// DecideSpans decides a request for hits with the default sliding window
// counter ([SlidingWindow]): each bucket of length W is split at H =
// floor(W/2) into two halves, and each region keeps, per half, its count,
// the offsets of its first and last hit, and where its latest run of hits
// began ([Half]). At nowMs, e ms into bucket b, the trailing window
// (nowMs-W, nowMs] holds all of bucket b, the halves of bucket b-1 that end
// after e, and part of the oldest half that overlaps it (the early half of
// b-1 while e < H, else its late half). Each region's oldest half gives two
// terms: its latest run's N-Before hits taken as spread evenly over the
// milliseconds Run..Last, and the Before hits of its earlier runs taken as
// all at Run-1, the latest they can be (one run: all N over First..Last).
// Counting earlier runs late keeps clumped arrivals (several bursts in one
// half) from being spread over the gaps between them. For n hits spread
// over a..b:
//
//	Den      = b - a + 1
//	Num      = Den      if e < a
//	           b - e    if a <= e < b
//	           0        otherwise
//	term     = floor(n * Num / Den)
//	whole    = sum of cur's counts + (e < H ? sum of prev's late halves : 0)
//	estimate = whole + sum of the terms over regions
//	allow    = estimate + hits <= limit   (then cur[local] gets the hits at e)
//
// With Strict, Num = Den while b > e, else 0: the hits of a run count whole
// while the run may still have hits in the trailing window, so the estimate
// is never below the exact count and one region never admits more than the
// limit in any trailing window.
//
// prev and cur are the regions' states of buckets b-1 and b, in any order,
// and cur[local] is the local region's, the one an allowed request adds its
// hits to (for ResetAfter; when cur lacks the local region, pass a local
// out of range and the added hits are taken as a region of their own).
// [Limit.SpanTerms] lists the terms of the estimate. The decision does not change prev or cur: when it is allowed, the caller adds
// the hits to the local region's cur with [Halves.Add] at e.
func (l Limit) DecideSpans(nowMs int64, prev, cur []Halves, local int, hits uint64) Decision {
	w := l.WindowMs()
	b := nowMs / w
	e := nowMs - b*w
	if e < 0 {
		b--
		e += w
	}
	h := w / 2
	var curN, prevLate uint64
	for i := range cur {
		curN = satAdd(curN, cur[i].Count())
	}
	whole := curN
	if e < h {
		for i := range prev {
			prevLate = satAdd(prevLate, prev[i].Late.N)
		}
		whole = satAdd(whole, prevLate)
	}
	d := Decision{Limit: l.Limit, Bucket: b, ElapsedMs: e, SubMs: h, SubWhole: whole}
	est := whole
	var oldN, part uint64
	terms := 0
	for i := range prev {
		o, lo, hi := oldest(prev[i], e, h, w)
		if o.N == 0 {
			continue
		}
		ta, tb := halfTerms(o, e, lo, hi, l.Strict)
		for _, t := range [2]Term{ta, tb} {
			if t.Num == 0 {
				continue
			}
			if terms++; terms == 1 {
				d.SubWeightNum, d.SubWeightDen = t.Num, t.Den
			} else {
				d.SubWeightNum, d.SubWeightDen = 0, 0
			}
			oldN = satAdd(oldN, t.N)
			v := t.Value()
			part = satAdd(part, v)
			est = satAdd(est, v)
		}
	}
	d.Estimate = est
	d.SubOldest = oldN
	if oldN > 0 {
		d.PrevWeight = float64(part) / float64(oldN)
	}
	sp := spanState{w: w, h: h, prev: prev, cur: cur, local: local, strict: l.Strict, e: e}
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
		d.RetryAfter = time.Duration(sp.earliest(0, lim-hits)-e) * time.Millisecond
	}
	if est < lim {
		d.Remaining = lim - est
	}
	d.ResetAfter = time.Duration(sp.earliest(added, 0)-e) * time.Millisecond
	return d
}

// spanState is a span counter's state at offset e of the current bucket,
// for finding the earliest time a request fits.
type spanState struct {
	w, h, e   int64
	prev, cur []Halves
	local     int // the index in cur of the region the hits go to
	strict    bool
}

// earliest returns the earliest offset t >= e from the start of the current
// bucket at which the estimate is at most m if no other traffic came, with
// added more hits at e in cur[local]. The estimate only falls as t grows,
// and is 0 from 2W on. It scans four segments, in each of which the whole
// part is fixed and the oldest half is one half: [e, H) and [H, W) with the
// previous bucket's halves, then [W, W+H) and [W+H, 2W) with the current
// bucket's, which by then is the previous one.
func (s spanState) earliest(added, m uint64) int64 {
	late := s.e >= s.h // the half the added hits land in
	var curEarly, curLate, prevLate uint64
	for i := range s.cur {
		curEarly = satAdd(curEarly, s.cur[i].Early.N)
		curLate = satAdd(curLate, s.cur[i].Late.N)
	}
	if late {
		curLate = satAdd(curLate, added)
	} else {
		curEarly = satAdd(curEarly, added)
	}
	for i := range s.prev {
		prevLate = satAdd(prevLate, s.prev[i].Late.N)
	}
	cur := satAdd(curEarly, curLate)
	segs := [4]struct {
		from, to int64 // offsets from the current bucket's start
		whole    uint64
		late     bool // the oldest half is a late half
		next     bool // the oldest half is the current bucket's
	}{
		{0, s.h, satAdd(cur, prevLate), false, false},
		{s.h, s.w, cur, true, false},
		{s.w, s.w + s.h, curLate, false, true},
		{s.w + s.h, 2 * s.w, 0, true, true},
	}
	for _, g := range segs {
		from := max(g.from, s.e)
		if from >= g.to || g.whole > m {
			continue
		}
		base, halves := int64(0), s.prev
		if g.next {
			base, halves = s.w, s.cur
		}
		lo, hi := int64(0), s.h
		if g.late {
			lo, hi = s.h, s.w
		}
		budget := m - g.whole
		// The spreads of the segment's oldest halves, in the current
		// bucket's offsets.
		var buf [8]spread
		sp := buf[:0]
		for i := range halves {
			o := halves[i].Early
			if g.late {
				o = halves[i].Late
			}
			if g.next && i == s.local && added > 0 && late == g.late {
				o.Add(s.e, runGap(s.w), added)
			}
			sp = appendSpreads(sp, o, lo, hi, base)
		}
		if g.next && added > 0 && late == g.late && (s.local < 0 || s.local >= len(halves)) {
			sp = appendSpreads(sp, Half{N: added, First: s.e, Last: s.e}, lo, hi, base)
		}
		if budget == 0 || len(sp) <= 1 {
			// Every term must fall to 0, or the one term to budget: each
			// has its own least offset.
			t := from
			for _, p := range sp {
				t = max(t, p.from(budget, s.strict))
			}
			return t
		}
		// sum returns the terms at offset t, stopping once past budget.
		sum := func(t int64) uint64 {
			var v uint64
			for _, p := range sp {
				if v = satAdd(v, p.at(t, s.strict)); v > budget {
					break
				}
			}
			return v
		}
		if sum(from) <= budget {
			return from
		}
		// At the last millisecond of the segment every term is 0 (a half's
		// hits are before its end), so the answer is in (from, to-1]:
		// bisect.
		a, z := from, g.to-1
		for a+1 < z {
			mid := a + (z-a)/2
			if sum(mid) <= budget {
				z = mid
			} else {
				a = mid
			}
		}
		return z
	}
	return 2 * s.w
}

// spread is n hits taken as spread evenly over the milliseconds a..b, for
// finding when their term falls.
type spread struct {
	n    uint64
	a, b int64
}

// at returns the term's value at offset e: evenTerm's.
func (p spread) at(e int64, strict bool) uint64 {
	return evenTerm(p.n, p.a, p.b, e, strict).Value()
}

// from returns the least offset at which the term counts at most k
// (math.MinInt64 when it always does).
func (p spread) from(k uint64, strict bool) int64 {
	if p.n <= k {
		return math.MinInt64
	}
	if strict {
		return p.b
	}
	// floor(n*num/den) <= k  <=>  num <= ceil((k+1)*den/n) - 1 = x, and
	// num = b - e on a..b-1: e >= b - x.
	den := uint64(p.b - p.a + 1)
	x := MulDivCeil(k+1, den, p.n) - 1
	if x >= den {
		return math.MinInt64
	}
	return p.b - int64(x)
}

// appendSpreads appends the spreads of half o, which lies in [lo, hi) of
// a bucket starting at base, as halfTerms weighs it.
func appendSpreads(sp []spread, o Half, lo, hi, base int64) []spread {
	switch {
	case o.N == 0:
		return sp
	case !o.Valid(lo, hi):
		return append(sp, spread{o.N, base + lo, base + hi - 1})
	case o.Before == 0:
		return append(sp, spread{o.N, base + o.First, base + o.Last})
	}
	return append(sp, spread{o.Before, base + o.Run - 1, base + o.Run - 1}, spread{o.N - o.Before, base + o.Run, base + o.Last})
}
