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
	// no other traffic; 0 when Allowed.
	RetryAfter time.Duration

	// Bucket is the current bucket's index (counter algorithms).
	Bucket int64
	// Estimate is the count the decision was made on, before this request.
	Estimate uint64
	// PrevWeight is (W - e) / W for SlidingWindow, 0 otherwise.
	PrevWeight float64
}

// Counts are a key's counts in the previous and current buckets, summed over
// regions.
type Counts struct {
	Prev, Cur uint64
}

// Estimate returns the count a counter algorithm decides on at nowMs:
// cur + floor(prev * (W - e) / W) for SlidingWindow, cur for FixedWindow.
func (l Limit) Estimate(nowMs int64, c Counts) uint64 {
	if l.Algorithm == FixedWindow || c.Prev == 0 {
		return c.Cur
	}
	w := l.WindowMs()
	e := nowMs - Bucket(nowMs, l.Window)*w
	return c.Cur + MulDiv(c.Prev, uint64(w-e), uint64(w))
}

// DecideCounter decides a request for hits against the counts c held before
// it, for SlidingWindow and FixedWindow. When the decision is allowed, the
// caller adds hits to the current bucket. hits must be from 1 to l.Limit.
func (l Limit) DecideCounter(nowMs int64, c Counts, hits uint64) Decision {
	w := l.WindowMs()
	b := Bucket(nowMs, l.Window)
	e := nowMs - b*w
	est := l.Estimate(nowMs, c)
	d := Decision{Limit: l.Limit, Bucket: b, Estimate: est}
	if l.Algorithm != FixedWindow {
		d.PrevWeight = float64(w-e) / float64(w)
	}
	after := c
	if est <= l.Limit && hits <= l.Limit-est {
		d.Allowed = true
		after.Cur += hits
		est += hits
	} else {
		d.RetryAfter = time.Duration(l.earliestCounter(nowMs, c, hits)-nowMs) * time.Millisecond
	}
	if est < l.Limit {
		d.Remaining = l.Limit - est
	}
	d.ResetAfter = time.Duration(l.earliestCounter(nowMs, after, l.Limit)-nowMs) * time.Millisecond
	return d
}

// earliestCounter returns the earliest instant (Unix ms) at or after nowMs at
// which need more hits would fit under the limit if no other traffic came.
// need must be at most l.Limit, so the answer is at most two buckets away.
func (l Limit) earliestCounter(nowMs int64, c Counts, need uint64) int64 {
	w := l.WindowMs()
	start := Bucket(nowMs, l.Window) * w
	e := nowMs - start
	m := l.Limit - need // the estimate may be at most m
	// In the current bucket the estimate only falls as e grows.
	if c.Cur <= m {
		if l.Algorithm == FixedWindow {
			return nowMs
		}
		if emin := minElapsed(c.Prev, m-c.Cur, uint64(w)); emin <= e {
			return nowMs
		} else if emin < w {
			return start + emin
		}
	}
	// In the next bucket, the current count becomes the previous one.
	if l.Algorithm == FixedWindow {
		return start + w
	}
	return start + w + minElapsed(c.Cur, m, uint64(w))
}

// minElapsed returns the least elapsed time e (ms, 0 to w) in a bucket at
// which floor(prev * (w - e) / w) <= k.
func minElapsed(prev, k, w uint64) int64 {
	if prev == 0 {
		return 0
	}
	// floor(prev*(w-e)/w) <= k  <=>  prev*(w-e) < (k+1)*w
	//                           <=>  w-e <= ceil((k+1)*w/prev) - 1.
	x := mulDivCeil(k+1, w, prev) - 1
	if x >= w {
		return 0
	}
	return int64(w - x)
}
