package window

import "time"

// Decision is the outcome of one request against a [Limit].
type Decision struct {
	// Allowed reports whether the hits were admitted.
	Allowed bool
	// Limit is the limit that applied.
	Limit uint64
	// Remaining is how many more hits would be admitted right now, after
	// this request.
	Remaining uint64
	// ResetAfter is how long until the full limit is available again with no
	// further traffic.
	ResetAfter time.Duration
	// RetryAfter is how long until the same request would be admitted with
	// no other traffic; 0 when Allowed, [Never] when hits exceed the limit.
	RetryAfter time.Duration

	// Bucket is the current bucket's index (counter algorithms).
	Bucket int64
	// ElapsedMs is e, the time elapsed in the current bucket, in ms
	// (counter algorithms).
	ElapsedMs int64
	// Estimate is the count the decision was made on, before this request:
	// the counter estimate, the live hits of a sliding log, or the tokens in
	// use in a token bucket.
	Estimate uint64
	// PrevWeight is the oldest bucket's weight as a float, SubWeightNum /
	// SubWeightDen: (W - e) / W for SlidingWindow, 0 for FixedWindow and the
	// algorithms that keep no counts. It is for display; decisions use the
	// exact fraction.
	PrevWeight float64

	// The terms of a counter's estimate, so that it can be recomputed from
	// the decision alone with integer math (counter algorithms only; zero
	// otherwise):
	//
	//	Estimate = SubWhole + floor(SubOldest * SubWeightNum / SubWeightDen)
	//
	// saturating at the maximum uint64. It is the estimate before this
	// request: an allowed request adds its hits to the current (sub-)bucket
	// after the decision.

	// SubMs is the length of the (sub-)buckets counted, in ms: W for
	// [Limit.DecideCounter].
	SubMs int64
	// SubWhole is the sum of the counts of the (sub-)buckets wholly inside
	// the trailing window, the current one included: cur for the two-bucket
	// counter.
	SubWhole uint64
	// SubOldest is the count of the oldest (sub-)bucket that overlaps the
	// trailing window: prev for the two-bucket counter.
	SubOldest uint64
	// SubWeightNum / SubWeightDen is the oldest (sub-)bucket's weight: its
	// overlap with the trailing window, S - e, over its length S (1 for a
	// strict counter, 0 for FixedWindow). For [Limit.DecideTrails] the
	// oldest half has one term per region ([Limit.SpanTerms]), and
	//
	//	Estimate = SubWhole + sum of floor(t.N * t.Num / t.Den) over them
	//
	// SubOldest is the sum of their N, SubMs the half's length H, and
	// SubWeightNum / SubWeightDen the one term's weight when exactly one
	// region's term is nonzero, else 0 / 0.
	SubWeightNum, SubWeightDen uint64
}

// Counts are a key's counts in the previous and current buckets, summed over
// regions.
type Counts struct {
	Prev, Cur uint64
}

// Estimate returns the count a counter algorithm decides on at nowMs:
// cur + floor(prev * (W - e) / W) for SlidingWindow, cur for FixedWindow,
// where e is the time elapsed in the current bucket. It saturates at the
// maximum uint64.
func (l Limit) Estimate(nowMs int64, c Counts) uint64 {
	w := l.WindowMs()
	return l.estimate(nowMs-Bucket(nowMs, l.Window)*w, w, c)
}

// estimate is Estimate at elapsed time e in a bucket of length w.
func (l Limit) estimate(e, w int64, c Counts) uint64 {
	if l.Algorithm == FixedWindow || c.Prev == 0 {
		return c.Cur
	}
	est := c.Cur + MulDiv(c.Prev, uint64(w-e), uint64(w))
	if est < c.Cur {
		return ^uint64(0)
	}
	return est
}

// DecideCounter decides a request for hits against the counts c held before
// it, for SlidingWindow and FixedWindow: allowed iff Estimate + hits <= limit.
// When the decision is allowed, the caller adds hits to the current bucket.
// hits should be from 1 to l.Limit: 0 asks whether the limit is already
// exceeded, and more than l.Limit is never allowed (RetryAfter is [Never]).
// l must be valid (see [Limit.Validate]).
//
// A calendar window ([Limit.Calendar]) decides with
// [Calendar.DecideCalendar] on c.Cur.
func (l Limit) DecideCounter(nowMs int64, c Counts, hits uint64) Decision {
	if l.Calendar.Unit != 0 {
		return l.Calendar.DecideCalendar(time.UnixMilli(nowMs), l.Limit, c.Cur, hits)
	}
	w := l.WindowMs()
	b := nowMs / w // floor(nowMs / w), as Bucket, with one division
	e := nowMs - b*w
	if e < 0 {
		b--
		e += w
	}
	start := b * w
	est := l.estimate(e, w, c)
	d := Decision{Limit: l.Limit, Bucket: b, ElapsedMs: e, Estimate: est,
		SubMs: w, SubWhole: c.Cur, SubOldest: c.Prev, SubWeightDen: uint64(w)}
	if l.Algorithm != FixedWindow {
		d.SubWeightNum = uint64(w - e)
		d.PrevWeight = float64(w-e) / float64(w)
	}
	after := c
	switch {
	case est <= l.Limit && hits <= l.Limit-est:
		d.Allowed = true
		after.Cur += hits
		est += hits
	case hits > l.Limit:
		d.RetryAfter = Never
	default:
		d.RetryAfter = time.Duration(l.earliestCounter(start, e, w, c, hits)-e) * time.Millisecond
	}
	if est < l.Limit {
		d.Remaining = l.Limit - est
	}
	d.ResetAfter = time.Duration(l.earliestCounter(start, e, w, after, l.Limit)-e) * time.Millisecond
	return d
}

// earliestCounter returns the earliest elapsed time, counted from the start
// of the current bucket and at least e, at which need more hits would fit
// under the limit if no other traffic came. need must be at most l.Limit, so
// the answer is less than three buckets away (two buckets from the end of
// the current one the estimate is 0).
func (l Limit) earliestCounter(start, e, w int64, c Counts, need uint64) int64 {
	m := l.Limit - need // the estimate may be at most m
	// In the current bucket the estimate only falls as e grows.
	if c.Cur <= m {
		if l.Algorithm == FixedWindow {
			return e
		}
		if emin := MinElapsed(c.Prev, m-c.Cur, uint64(w)); emin <= e {
			return e
		} else if emin < w {
			return emin
		}
	}
	// In the next bucket, the current count becomes the previous one and the
	// current count is 0.
	if l.Algorithm == FixedWindow {
		return w
	}
	return w + MinElapsed(c.Cur, m, uint64(w))
}

// MinElapsed returns the least elapsed time e (ms, 0 to w) in a bucket of
// length w at which floor(prev * (w - e) / w) <= k: when a weighted count
// of prev has fallen to k. It requires w > 0.
func MinElapsed(prev, k, w uint64) int64 {
	if prev == 0 {
		return 0
	}
	// floor(prev*(w-e)/w) <= k  <=>  prev*(w-e) < (k+1)*w
	//                           <=>  w-e <= ceil((k+1)*w/prev) - 1.
	x := MulDivCeil(k+1, w, prev) - 1
	if x >= w {
		return 0
	}
	return int64(w - x)
}
