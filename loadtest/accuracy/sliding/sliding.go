// Package sliding holds the sliding window counter over K sub-buckets that
// loadtest/accuracy measures (-mode subbuckets) as a comparison point for
// the stores' algorithms: the window split into K epoch-aligned sub-buckets
// of S = W/K whole milliseconds, and at nowMs, in sub-bucket j with e
// elapsed in it,
//
//	estimate = c[j-K+1] + ... + c[j] + floor(c[j-K] * (S - e) / S)
//
// (K = 1 is the two-bucket counter, [TwoBucket]; Strict counts c[j-K]
// whole). No store runs it.
package sliding

import (
	"fmt"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// Sub-bucket bounds of a [Counter].
const (
	// DefaultSubBuckets is the number of sub-buckets the default counter
	// splits a window into (see [Default]).
	DefaultSubBuckets = 100
	// MaxSubBuckets is the most sub-buckets a window may be split into.
	MaxSubBuckets = 100
)

// ErrSubBuckets is returned by [Counter.Validate] for a sub-bucket count out
// of 1..MaxSubBuckets or one that does not split the window into whole
// milliseconds.
var ErrSubBuckets = fmt.Errorf("sliding: sub-buckets must be from 1 to %d and split the window into whole milliseconds", MaxSubBuckets)

// Counter is a sliding window counter over sub-buckets: Limit.Window (W) is
// split into K epoch-aligned sub-buckets of S = W/K whole milliseconds, and a
// key keeps one count per sub-bucket. Sub-bucket j holds the hits admitted in
// [j*S, (j+1)*S) (Unix ms). At nowMs, in sub-bucket j = floor(nowMs/S) with
// e = nowMs - j*S elapsed in it, the trailing window (nowMs-W, nowMs] covers
// sub-buckets j-K+1..j wholly and overlaps sub-bucket j-K by S-e:
//
//	whole    = c[j-K+1] + ... + c[j]
//	oldest   = c[j-K]
//	estimate = whole + floor(oldest * (S - e) / S)   (Strict: whole + oldest)
//	allow    = estimate + hits <= limit               (then c[j] += hits)
//
// With K = 1 this is the two-bucket counter of [window.Limit.DecideCounter]
// (whole = cur, oldest = prev): the seeds' formula, kept as its own mode.
//
// The weighted estimate assumes the oldest sub-bucket's hits were spread
// evenly over it; the error this leaves is at most one sub-bucket's worth of
// misplaced hits, so it shrinks as K grows. Strict counts the oldest
// overlapping sub-bucket whole, so the estimate is never below the exact
// count in the trailing window: in one region the limit is never exceeded in
// any trailing window, at the price of capacity left unused after bursts.
// loadtest/accuracy measures the bounds of each mode.
//
// Counts are per region and grow-only, so they replicate as the two-bucket
// counts do: a counter is identified by (key, W, K), its buckets by the
// sub-bucket index j, and each region's count of a sub-bucket max-merges.
//
// The zero value is not valid: Limit and K must be set ([Default] gives
// the default shape for a limit). A Counter is a small value, safe to copy
// and to use from many goroutines.
type Counter struct {
	window.Limit
	// K is the number of sub-buckets per window, 1 to [MaxSubBuckets]; W
	// must be a whole number of milliseconds times K.
	K int64
	// Strict counts the oldest overlapping sub-bucket whole instead of
	// weighting it by its overlap with the trailing window.
	Strict bool
}

// Default returns the default sliding window counter for l: the
// largest K from 1 to [DefaultSubBuckets] that splits l.Window into whole
// milliseconds (100 for every window that is a multiple of 100 ms), weighted.
func Default(l window.Limit) Counter {
	return Counter{Limit: l, K: SubBucketsFor(l.Window, DefaultSubBuckets)}
}

// TwoBucket returns the seeds' two-bucket counter for l (K = 1).
func TwoBucket(l window.Limit) Counter { return Counter{Limit: l, K: 1} }

// SubBucketsFor returns the largest k from 1 to want that splits w into
// whole milliseconds. Every node computes the same k from the same window,
// so it may identify a counter.
func SubBucketsFor(w time.Duration, want int64) int64 {
	wm := w.Milliseconds()
	for k := min(want, MaxSubBuckets); k > 1; k-- {
		if wm%k == 0 {
			return k
		}
	}
	return 1
}

// Validate reports whether s is within the supported bounds: a valid Limit
// and K from 1 to MaxSubBuckets dividing the window's milliseconds.
func (s Counter) Validate() error {
	if err := s.Limit.Validate(); err != nil {
		return err
	}
	if s.K < 1 || s.K > MaxSubBuckets || s.WindowMs()%s.K != 0 {
		return ErrSubBuckets
	}
	return nil
}

// SubMs returns the sub-bucket length S in milliseconds.
func (s Counter) SubMs() int64 { return s.WindowMs() / s.K }

// SubBucket returns the index of the sub-bucket that holds nowMs:
// floor(nowMs / S).
func (s Counter) SubBucket(nowMs int64) int64 {
	sm := s.SubMs()
	j := nowMs / sm
	if nowMs%sm < 0 {
		j--
	}
	return j
}

// Estimate returns the count s decides on at nowMs from c, the counts of
// sub-buckets j-K..j (len K+1, oldest first, j = s.SubBucket(nowMs)); see
// [Counter]. It saturates at the maximum uint64.
func (s Counter) Estimate(nowMs int64, c []uint64) uint64 {
	sm := s.SubMs()
	j := s.SubBucket(nowMs)
	whole, oldest := sumCounts(c)
	num := uint64(sm - (nowMs - j*sm))
	if s.Strict {
		num = uint64(sm)
	}
	return window.SatAdd(whole, window.MulDiv(oldest, num, uint64(sm)))
}

// Decide decides a request for hits against c, the counts of sub-buckets
// j-K..j held before it (len K+1, oldest first; j = s.SubBucket(nowMs); a
// missing count is 0): allowed iff estimate + hits <= limit. When the
// decision is allowed, the caller adds hits to sub-bucket j (the last count).
// hits should be from 1 to s.Limit.Limit: more is never allowed (RetryAfter
// is [window.Never]). s must be valid (see [Counter.Validate]).
//
// The Decision's Bucket is j, and its Sub* fields carry the terms of the
// estimate: Estimate = SubWhole + floor(SubOldest * SubWeightNum /
// SubWeightDen), before this request.
func (s Counter) Decide(nowMs int64, c []uint64, hits uint64) window.Decision {
	sm := s.WindowMs()
	if s.K != 1 {
		sm /= s.K
	}
	j := nowMs / sm
	e := nowMs - j*sm
	if e < 0 {
		j--
		e += sm
	}
	k := int(s.K)
	if len(c) != k+1 {
		c = fitCounts(c, k+1)
	}
	whole, oldest := sumCounts(c)
	num := uint64(sm - e)
	if s.Strict {
		num = uint64(sm)
	}
	est := window.SatAdd(whole, window.MulDiv(oldest, num, uint64(sm)))
	d := window.Decision{
		Limit: s.Limit.Limit, Bucket: j, ElapsedMs: e, Estimate: est,
		SubMs: sm, SubWhole: whole, SubOldest: oldest, SubWeightNum: num, SubWeightDen: uint64(sm),
		PrevWeight: float64(num) / float64(sm),
	}
	lim := s.Limit.Limit
	allowed := est <= lim && hits <= lim-est
	switch {
	case allowed:
		d.Allowed = true
		est += hits
	case hits > lim:
		d.RetryAfter = window.Never
	default:
		d.RetryAfter = time.Duration(s.earliest(e, sm, c, 0, lim-hits)-e) * time.Millisecond
	}
	if est < lim {
		d.Remaining = lim - est
	}
	var added uint64
	if allowed {
		added = hits
	}
	d.ResetAfter = time.Duration(s.earliest(e, sm, c, added, 0)-e) * time.Millisecond
	return d
}

// earliest returns the earliest elapsed time, counted from the start of the
// current sub-bucket and at least e, at which the estimate is at most m if
// no other traffic came, with added more hits in the current sub-bucket
// (c[K] + added). It is less than K+1 sub-buckets away: K sub-buckets after
// the current one ends, every count has left the window.
func (s Counter) earliest(e, sm int64, c []uint64, added, m uint64) int64 {
	k := len(c) - 1
	// In sub-bucket j+i (i = 0..K) the oldest count is c[i] and the whole
	// ones are c[i+1..K]. Find the first i whose whole sum fits under m,
	// scanning from the newest: acc = c[i+1] + ... + c[K] <= m.
	cur := window.SatAdd(c[k], added)
	i := k
	var acc uint64
	if cur <= m {
		acc = cur
		for i--; i > 0 && c[i] <= m-acc; i-- {
			acc += c[i]
		}
	}
	// Now acc = c[i+1..K] <= m, and for every earlier sub-bucket the whole
	// counts alone exceed m. Walk forward from sub-bucket j+i.
	for ; i <= k; i++ {
		oldest := cur
		if i < k {
			oldest = c[i]
		}
		at0 := int64(0) // elapsed time in sub-bucket j+i from which it fits
		if s.Strict {
			if oldest > m-acc {
				at0 = sm
			}
		} else {
			at0 = window.MinElapsed(oldest, m-acc, uint64(sm))
		}
		if at0 < sm {
			if i == 0 {
				return max(e, at0)
			}
			return int64(i)*sm + at0
		}
		switch {
		case i+1 < k:
			acc -= c[i+1] // c[i+1] moves from the whole ones to the oldest
		case i+1 == k:
			acc -= cur
		}
	}
	return int64(k+1) * sm
}

// sumCounts returns the saturating sum of c[1:] and c[0]. It adds in four
// independent lanes, without carries while every count is below 2^56 (then
// up to 128 counts cannot overflow), so that a long window of sub-buckets
// costs little more than a short one.
func sumCounts(c []uint64) (whole, oldest uint64) {
	if len(c) == 0 {
		return 0, 0
	}
	oldest, c = c[0], c[1:]
	if len(c) <= 128 {
		var a0, a1, a2, a3, or uint64
		r := c
		for len(r) >= 4 {
			a0 += r[0]
			a1 += r[1]
			a2 += r[2]
			a3 += r[3]
			or |= r[0] | r[1] | r[2] | r[3]
			r = r[4:]
		}
		for _, v := range r {
			a0 += v
			or |= v
		}
		if or>>56 == 0 {
			return a0 + a1 + a2 + a3, oldest
		}
	}
	for _, v := range c {
		whole = window.SatAdd(whole, v)
	}
	return whole, oldest
}

// fitCounts returns c as n counts, oldest first: the newest n of them, or
// zeros in front of a shorter c.
func fitCounts(c []uint64, n int) []uint64 {
	if len(c) >= n {
		return c[len(c)-n:]
	}
	out := make([]uint64, n)
	copy(out[n-len(c):], c)
	return out
}
