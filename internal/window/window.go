package window

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Algorithm selects how a [Limit] counts hits over time.
type Algorithm uint8

// The algorithms. The zero value means SlidingWindow.
const (
	// SlidingWindow is the default: a sliding window counter over
	// epoch-aligned buckets in which each region keeps a trail of marks,
	// each some hits and the offset of the last of them, exact to the
	// millisecond up to ExactMax and in 1/Granules of a bucket above it
	// ([Limit.DecideTrails]). A mark counts whole while its last hit is in
	// the trailing window, so one region never admits more than the limit
	// in any trailing window.
	SlidingWindow Algorithm = iota + 1
	// FixedWindow counts hits per epoch-aligned bucket: allow = cur + hits <= limit.
	FixedWindow
	// TokenBucket is a token bucket computed as GCRA: limit tokens refill
	// evenly over the window into a bucket of Limit.Burst tokens (the
	// limit when Burst is 0).
	TokenBucket
	// SlidingLog keeps every hit's timestamp: exact, memory-heavy.
	SlidingLog
	// SlidingWindowTwoBucket is the seeds' two-bucket sliding window
	// counter ([Limit.DecideCounter]):
	//
	//	estimate = cur + floor(prev * (W - e) / W)
	//	allow    = estimate + hits <= limit
	//
	// where cur and prev are the current and previous epoch-aligned buckets'
	// counts and e is the time elapsed in the current bucket. It assumes the
	// previous bucket's hits were spread evenly over it, so a burst that
	// began late in a bucket is admitted again in the next one (up to
	// 1 + phase times the limit in a trailing window).
	SlidingWindowTwoBucket
)

// String returns the algorithm's name as used in configuration.
func (a Algorithm) String() string {
	switch a {
	case 0, SlidingWindow:
		return "sliding_window"
	case FixedWindow:
		return "fixed_window"
	case TokenBucket:
		return "token_bucket"
	case SlidingLog:
		return "sliding_log"
	case SlidingWindowTwoBucket:
		return "sliding_window_two_bucket"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm parses a configuration name; "" means SlidingWindow.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "", "sliding_window", "sliding":
		return SlidingWindow, nil
	case "fixed_window", "fixed":
		return FixedWindow, nil
	case "token_bucket", "gcra", "leaky_bucket":
		return TokenBucket, nil
	case "sliding_log", "log":
		return SlidingLog, nil
	case "sliding_window_two_bucket", "two_bucket":
		return SlidingWindowTwoBucket, nil
	}
	return 0, fmt.Errorf("window: unknown algorithm %q (want sliding_window, sliding_window_two_bucket, fixed_window, token_bucket or sliding_log)", s)
}

// Counted reports whether the algorithm keeps per-bucket counts, which
// replicate across regions. TokenBucket and SlidingLog are region-local.
func (a Algorithm) Counted() bool {
	return a == 0 || a == SlidingWindow || a == FixedWindow || a == SlidingWindowTwoBucket
}

// Trails reports whether the algorithm decides on trails of marks
// ([Limit.DecideTrails]): SlidingWindow, the default.
func (a Algorithm) Trails() bool { return a == 0 || a == SlidingWindow }

// Bounds on a Limit.
const (
	MinWindow = time.Second
	MaxWindow = 7 * 24 * time.Hour
	MaxLimit  = 1 << 53
)

// Never is the RetryAfter of a request that can never be admitted: one that
// asks for more hits than the limit.
const Never = time.Duration(math.MaxInt64)

// Errors returned by Validate and the checks on hits.
var (
	ErrLimit  = errors.New("window: limit must be from 1 to 2^53")
	ErrWindow = errors.New("window: window must be from 1s to 7d, in whole milliseconds")
	ErrHits   = errors.New("window: hits must be from 1 to the limit (a token bucket's burst)")
	ErrAlgo   = errors.New("window: unknown algorithm")
	ErrStrict = errors.New("window: strict applies to the sliding_window algorithm only")
	ErrBurst  = errors.New("window: burst applies to the token_bucket algorithm only, from 1 to 1000 times the limit and at most 2^53")
	ErrCal    = errors.New("window: a calendar window is a fixed_window with no window length, burst or strict")
)

// MaxBurstFactor bounds a token bucket's burst at this many times its limit,
// so that a full bucket refills within 1000 windows.
const MaxBurstFactor = 1000

// Limit is at most Limit hits per Window, counted by Algorithm.
// The zero Algorithm means SlidingWindow. A Limit is a small value, safe to
// copy and to use from many goroutines.
type Limit struct {
	Limit     uint64
	Window    time.Duration
	Algorithm Algorithm
	// Strict is accepted for SlidingWindow only, and changes nothing: the
	// default sliding window never admits more than the limit in any
	// trailing window in one region. It remains so that configurations
	// that set it keep loading.
	Strict bool
	// Burst is a TokenBucket's capacity in tokens, the most hits it admits
	// at once; 0 means Limit. Limit tokens refill per Window whatever the
	// burst. At most MaxBurstFactor times Limit. Only for TokenBucket.
	Burst uint64
	// Calendar, when its Unit is set, makes l a calendar window: Limit
	// hits per bucket of the calendar ([Calendar.Bucket]), counted as a
	// fixed window ([Calendar.DecideCalendar]). Window is then 0 and
	// Algorithm FixedWindow. Its buckets are named as [Limit.BucketAt]
	// says.
	Calendar Calendar
}

// Capacity returns the most hits one request may ask of l: the burst of a
// token bucket that sets one, else the limit.
func (l Limit) Capacity() uint64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}

// Validate reports whether l is within the supported bounds.
func (l Limit) Validate() error {
	if l.Limit < 1 || l.Limit > MaxLimit {
		return ErrLimit
	}
	if l.Calendar.Unit != 0 {
		if l.Calendar.Unit > CalendarYear || l.Algorithm != FixedWindow || l.Window != 0 || l.Strict || l.Burst != 0 {
			return ErrCal
		}
		return nil
	}
	if l.Window < MinWindow || l.Window > MaxWindow || l.Window%time.Millisecond != 0 {
		return ErrWindow
	}
	if l.Algorithm > SlidingWindowTwoBucket {
		return ErrAlgo
	}
	if l.Strict && !l.Algorithm.Trails() {
		return ErrStrict
	}
	if l.Burst > 0 && (l.Algorithm != TokenBucket || l.Burst > MaxLimit || l.Burst/MaxBurstFactor > l.Limit ||
		(l.Burst/MaxBurstFactor == l.Limit && l.Burst%MaxBurstFactor != 0)) {
		return ErrBurst
	}
	return nil
}

// ValidateHits reports whether hits may be asked of l: from 1 to
// l.Capacity().
func (l Limit) ValidateHits(hits uint64) error {
	if hits < 1 || hits > l.Capacity() {
		return ErrHits
	}
	return nil
}

// WindowMs returns the window in milliseconds.
func (l Limit) WindowMs() int64 { return l.Window.Milliseconds() }

// Ms returns t as Unix milliseconds, the time unit of this package.
func Ms(t time.Time) int64 { return t.UnixMilli() }

// Bucket returns the index of the epoch-aligned bucket of length w that holds
// the instant nowMs: floor(nowMs / w).
func Bucket(nowMs int64, w time.Duration) int64 {
	wm := w.Milliseconds()
	b := nowMs / wm
	if nowMs%wm < 0 {
		b--
	}
	return b
}

// MulDiv returns floor(a * b / c) computed exactly in 128 bits. It requires
// c > 0 and a result that fits in 64 bits.
func MulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// MulDivCeil returns ceil(a * b / c), saturating at the maximum uint64.
func MulDivCeil(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return ^uint64(0)
	}
	q, r := bits.Div64(hi, lo, c)
	if r != 0 {
		q++
	}
	return q
}

// Mix64 is SplitMix64's finalizer: a bijection of uint64 whose every
// output bit depends on every input bit, so that nearby inputs (slot
// numbers, hashes that share a prefix) come out spread. Every node
// computes the same value from the same input.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// SatAdd returns a + b, saturating at the maximum uint64.
func SatAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return ^uint64(0)
	}
	return s
}
