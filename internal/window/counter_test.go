package window

import (
	"math/big"
	"testing"
	"time"
)

const minute = 60_000

// seeds are the worked examples of docs/design.md's sliding window counter
// section, with the figures it states, and a few more of the same kind.
var seeds = []struct {
	name    string
	l       Limit
	nowMs   int64
	c       Counts
	hits    uint64
	est     uint64
	allowed bool
	remain  uint64
	retry   time.Duration
}{
	{
		// bucket 22 held 400, bucket 23 holds 250, request at 23:45.
		name: "500/min at 23:45", l: Limit{Limit: 500, Window: time.Minute},
		nowMs: 23*minute + 45_000, c: Counts{Prev: 400, Cur: 250}, hits: 1,
		est: 350, allowed: true, remain: 149,
	},
	{
		name: "100/min at :40", l: Limit{Limit: 100, Window: time.Minute},
		nowMs: 7*minute + 40_000, c: Counts{Prev: 90, Cur: 50}, hits: 1,
		est: 80, allowed: true, remain: 19,
	},
	{
		// 30% of the minute: 3 + floor(5 * 0.7) = 6.
		name: "7/min at 30%", l: Limit{Limit: 7, Window: time.Minute},
		nowMs: 3*minute + 18_000, c: Counts{Prev: 5, Cur: 3}, hits: 1,
		est: 6, allowed: true, remain: 0,
	},
	{
		// The next request at the same instant: 4 + 3 = 7, denied until
		// floor(5 * (60000 - e) / 60000) <= 2, i.e. e >= 24001 ms.
		name: "7/min at 30%, next", l: Limit{Limit: 7, Window: time.Minute},
		nowMs: 3*minute + 18_000, c: Counts{Prev: 5, Cur: 4}, hits: 1,
		est: 7, allowed: false, remain: 0, retry: 6001 * time.Millisecond,
	},
}

func TestDecideCounterSeeds(t *testing.T) {
	t.Parallel()
	for _, tt := range seeds {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.l.DecideCounter(tt.nowMs, tt.c, tt.hits)
			checkSeed(t, d, tt.est, tt.allowed, tt.remain, tt.retry)
			if got, want := d.Bucket, tt.nowMs/minute; got != want {
				t.Errorf("Bucket = %d, want %d", got, want)
			}
			if got, want := tt.l.Estimate(tt.nowMs, tt.c), tt.est; got != want {
				t.Errorf("Estimate() = %d, want %d", got, want)
			}
			lim := &counterState{l: tt.l, b: d.Bucket, c: tt.c}
			if msg := exactRetry(lim, tt.l, tt.nowMs, tt.hits, d); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// The 500/min seed as a store would run it: bucket 23 becomes 251.
func TestDecideCounterSeedBucketGrows(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 500, Window: time.Minute}
	now := int64(23*60_000 + 45_000)
	s := &counterState{l: l, b: 23, c: Counts{Prev: 400, Cur: 250}}
	d := s.decide(now, 1, true)
	if !d.Allowed {
		t.Fatalf("Allowed = false, want true")
	}
	if got, want := s.c.Cur, uint64(251); got != want {
		t.Errorf("bucket 23 = %d, want %d", got, want)
	}
	if got, want := l.Estimate(now, s.c), uint64(351); got != want {
		t.Errorf("Estimate() after = %d, want %d", got, want)
	}
}

// step is one request in a table that steps through fixed instants.
type step struct {
	t       int64 // ms
	hits    uint64
	allowed bool
	remain  uint64
	retry   time.Duration
	reset   time.Duration
}

// runSteps plays steps against a fresh limiter for l, committing allowed
// requests, and checks every answer and its exactness.
func runSteps(t *testing.T, l Limit, steps []step) {
	t.Helper()
	playSteps(t, newLimiter(l), l, steps)
}

// playSteps plays steps against lim, a limiter for l, committing allowed
// requests, and checks every answer and its exactness. Instants in
// messages count from t0.
func playSteps(t *testing.T, lim limiter, l Limit, steps []step) {
	t.Helper()
	for i, s := range steps {
		before := clone(lim)
		d := lim.decide(s.t, s.hits, true)
		if d.Allowed != s.allowed || d.Remaining != s.remain || d.RetryAfter != s.retry || d.ResetAfter != s.reset {
			t.Errorf("step %d (t=%d ms, hits %d): got allowed %v remaining %d retry %v reset %v, want %v %d %v %v",
				i, s.t-t0, s.hits, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, s.allowed, s.remain, s.retry, s.reset)
		}
		if msg := exactRetry(before, l, s.t, s.hits, d); msg != "" {
			t.Errorf("step %d (t=%d ms): %s", i, s.t-t0, msg)
		}
	}
}

// checkSeed checks a worked example's decision: its estimate, whether it
// is allowed, what remains and when to retry.
func checkSeed(t *testing.T, d Decision, est uint64, allowed bool, remain uint64, retry time.Duration) {
	t.Helper()
	if d.Estimate != est {
		t.Errorf("Estimate = %d, want %d", d.Estimate, est)
	}
	if d.Allowed != allowed {
		t.Errorf("Allowed = %v, want %v", d.Allowed, allowed)
	}
	if d.Remaining != remain {
		t.Errorf("Remaining = %d, want %d", d.Remaining, remain)
	}
	if d.RetryAfter != retry {
		t.Errorf("RetryAfter = %v, want %v", d.RetryAfter, retry)
	}
}

// Instants in the x/time/rate style: t0 is the start of a bucket of 10 s.
const (
	t0 = 1_700_000_000_000 // a multiple of 10 s
	t1 = t0 + 1_000
	t2 = t0 + 2_500
	t3 = t0 + 9_999
	t4 = t0 + 10_000
	t5 = t0 + 12_500
	t6 = t0 + 15_000
	t7 = t0 + 17_500
	t8 = t0 + 20_000
	t9 = t0 + 30_000
)

// TestSteps steps each algorithm through the instants t0 to t9, 3 or 4
// hits per 10 s: every answer and its exactness.
func TestSteps(t *testing.T) {
	t.Parallel()
	s := time.Millisecond
	for _, tc := range []struct {
		name  string
		l     Limit
		steps []step
	}{
		{"fixed_window", Limit{Limit: 3, Window: 10 * time.Second, Algorithm: FixedWindow}, []step{
			{t: t0, hits: 1, allowed: true, remain: 2, reset: 10_000 * s},
			{t: t1, hits: 2, allowed: true, remain: 0, reset: 9_000 * s},
			{t: t2, hits: 1, allowed: false, remain: 0, retry: 7_500 * s, reset: 7_500 * s},
			{t: t3, hits: 1, allowed: false, remain: 0, retry: 1 * s, reset: 1 * s},
			{t: t4, hits: 3, allowed: true, remain: 0, reset: 10_000 * s},
			{t: t5, hits: 1, allowed: false, remain: 0, retry: 7_500 * s, reset: 7_500 * s},
			{t: t8, hits: 4, allowed: false, remain: 3, retry: Never},
			{t: t8, hits: 2, allowed: true, remain: 1, reset: 10_000 * s},
			{t: t9, hits: 3, allowed: true, remain: 0, reset: 10_000 * s},
		}},
		{"sliding_window", Limit{Limit: 4, Window: 10 * time.Second}, []step{
			// Bucket 0: 4 hits fill it. The full limit is back once the estimate
			// is 0, in the next bucket at floor(prev * (W - e) / W) = 0.
			{t: t0, hits: 2, allowed: true, remain: 2, reset: 15_001 * s}, // prev 2: e > 5000
			{t: t2, hits: 2, allowed: true, remain: 0, reset: 15_001 * s}, // prev 4: e > 7500
			{t: t3, hits: 1, allowed: false, remain: 0, retry: 2 * s, reset: 7_502 * s},
			// Bucket 1, prev 4: estimate 4 at e = 0, 3 from e = 1 ms.
			{t: t4, hits: 1, allowed: false, remain: 0, retry: 1 * s, reset: 7_501 * s},
			// e = 2500: floor(4 * 0.75) = 3, a hit fits; then 1 + 3 = 4.
			{t: t5, hits: 1, allowed: true, remain: 0, reset: 7_501 * s},
			// e = 5000: 1 + floor(4 * 0.5) = 3, a hit fits; then 2 + 2 = 4.
			{t: t6, hits: 1, allowed: true, remain: 0, reset: 10_001 * s},
			// e = 7500: 2 + floor(4 * 0.25) = 3; 2 hits fit once floor(...) = 0.
			{t: t7, hits: 2, allowed: false, remain: 1, retry: 1 * s, reset: 7_501 * s},
			// Bucket 2, prev 2: estimate 2, 2 hits fit.
			{t: t8, hits: 2, allowed: true, remain: 0, reset: 15_001 * s},
			// Bucket 3, prev 2 (bucket 2), cur 0: estimate 2 until e > 5000.
			{t: t9, hits: 4, allowed: false, remain: 2, retry: 5_001 * s, reset: 5_001 * s},
		}},
		{"sliding_log", Limit{Limit: 3, Window: 10 * time.Second, Algorithm: SlidingLog}, []step{
			{t: t0, hits: 1, allowed: true, remain: 2, reset: 10_000 * s},
			{t: t1, hits: 2, allowed: true, remain: 0, reset: 10_000 * s},
			// The t0 entry must leave: it expires at t0 + W.
			{t: t2, hits: 1, allowed: false, remain: 0, retry: 7_500 * s, reset: 8_500 * s},
			{t: t3, hits: 1, allowed: false, remain: 0, retry: 1 * s, reset: 1_001 * s},
			{t: t4, hits: 1, allowed: true, remain: 0, reset: 10_000 * s},
			// t1's entry has expired at t5 (t1 <= t5 - W).
			{t: t5, hits: 2, allowed: true, remain: 0, reset: 10_000 * s},
			{t: t6, hits: 1, allowed: false, remain: 0, retry: 5_000 * s, reset: 7_500 * s},
			{t: t8, hits: 4, allowed: false, remain: 1, retry: Never, reset: 2_500 * s},
			{t: t8, hits: 1, allowed: true, remain: 0, reset: 10_000 * s},
			{t: t9, hits: 3, allowed: true, remain: 0, reset: 10_000 * s},
		}},
		// 3 per 10 s as a token bucket: a hit costs c = 3333334 µs and the
		// capacity is 10000002 µs (TestGCRACapacity).
		{"token_bucket", Limit{Limit: 3, Window: 10 * time.Second, Algorithm: TokenBucket}, []step{
			{t: t0, hits: 1, allowed: true, remain: 2, reset: 3_334 * s},
			{t: t1, hits: 2, allowed: true, remain: 0, reset: 9_000 * s},
			// TAT - now = 9000001 µs; one more hit needs TAT + c - now <= cap.
			{t: t2, hits: 1, allowed: false, remain: 0, retry: 834 * s, reset: 7_500 * s},
			{t: t3, hits: 1, allowed: true, remain: 1, reset: 3_335 * s},
			{t: t4, hits: 3, allowed: false, remain: 2, retry: 3_334 * s, reset: 3_334 * s},
			{t: t8, hits: 4, allowed: false, remain: 3, retry: Never},
			{t: t8, hits: 3, allowed: true, remain: 0, reset: 10_000 * s},
			{t: t9, hits: 1, allowed: true, remain: 2, reset: 3_334 * s},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, tc.l, tc.steps)
		})
	}
}

// Windows from 1 s to 7 days and limits up to 2^53: the estimate and the
// decision match a big-integer computation, and nothing overflows.
func TestCounterExtremes(t *testing.T) {
	t.Parallel()
	windows := []time.Duration{time.Second, 1500 * time.Millisecond, time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}
	limits := []uint64{1, 2, 7, 1000, 1 << 32, MaxLimit - 1, MaxLimit}
	nows := []int64{0, 1, 1_700_000_012_345, 1<<53/1000 - 1, -1_234_567}
	for _, w := range windows {
		for _, lim := range limits {
			for _, algo := range []Algorithm{SlidingWindow, FixedWindow} {
				l := Limit{Limit: lim, Window: w, Algorithm: algo}
				if err := l.Validate(); err != nil {
					t.Fatalf("Validate(%+v) = %v", l, err)
				}
				counts := []Counts{{}, {Prev: lim, Cur: 0}, {Prev: lim, Cur: lim}, {Prev: lim - 1, Cur: 1}, {Prev: MaxLimit, Cur: lim / 2}, {Prev: 3 * MaxLimit, Cur: 3 * MaxLimit}}
				for _, now := range nows {
					for _, c := range counts {
						for _, hits := range []uint64{1, lim / 2, lim} {
							if hits == 0 {
								continue
							}
							d := l.DecideCounter(now, c, hits)
							want := bigEstimate(l, now, c)
							if got := new(big.Int).SetUint64(d.Estimate); got.Cmp(want) != 0 {
								t.Fatalf("%+v now %d %+v: Estimate = %v, want %v", l, now, c, got, want)
							}
							sum := new(big.Int).Add(want, new(big.Int).SetUint64(hits))
							if got, want := d.Allowed, sum.Cmp(new(big.Int).SetUint64(lim)) <= 0; got != want {
								t.Fatalf("%+v now %d %+v hits %d: Allowed = %v, want %v", l, now, c, hits, got, want)
							}
							lm := &counterState{l: l, b: d.Bucket, c: c}
							if msg := exactRetry(lm, l, now, hits, d); msg != "" {
								t.Fatalf("%+v now %d %+v hits %d: %s", l, now, c, hits, msg)
							}
						}
					}
				}
			}
		}
	}
}

// bigEstimate is Estimate in arbitrary precision.
func bigEstimate(l Limit, now int64, c Counts) *big.Int {
	w := big.NewInt(l.WindowMs())
	b := new(big.Int).Div(big.NewInt(now), w) // Euclidean: floor for w > 0
	e := new(big.Int).Sub(big.NewInt(now), new(big.Int).Mul(b, w))
	est := new(big.Int).SetUint64(c.Cur)
	if l.Algorithm == FixedWindow {
		return est
	}
	p := new(big.Int).Mul(new(big.Int).SetUint64(c.Prev), new(big.Int).Sub(w, e))
	return est.Add(est, p.Div(p, w))
}

func TestBucket(t *testing.T) {
	t.Parallel()
	tests := []struct {
		now  int64
		w    time.Duration
		want int64
	}{
		{0, time.Second, 0},
		{999, time.Second, 0},
		{1000, time.Second, 1},
		{-1, time.Second, -1},
		{-1000, time.Second, -1},
		{-1001, time.Second, -2},
		{23*60_000 + 45_000, time.Minute, 23},
		{1_700_000_000_000, 7 * 24 * time.Hour, 2810},
	}
	for _, tt := range tests {
		if got := Bucket(tt.now, tt.w); got != tt.want {
			t.Errorf("Bucket(%d, %v) = %d, want %d", tt.now, tt.w, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		l    Limit
		want error
	}{
		{Limit{Limit: 1, Window: time.Second}, nil},
		{Limit{Limit: MaxLimit, Window: MaxWindow, Algorithm: SlidingLog}, nil},
		{Limit{Limit: 0, Window: time.Second}, ErrLimit},
		{Limit{Limit: MaxLimit + 1, Window: time.Second}, ErrLimit},
		{Limit{Limit: 1, Window: 999 * time.Millisecond}, ErrWindow},
		{Limit{Limit: 1, Window: MaxWindow + time.Millisecond}, ErrWindow},
		{Limit{Limit: 1, Window: time.Second + time.Microsecond}, ErrWindow},
		{Limit{Limit: 1, Window: time.Second, Algorithm: SlidingWindowTwoBucket + 1}, ErrAlgo},
		{Limit{Limit: 1, Window: time.Second, Algorithm: SlidingWindowTwoBucket, Strict: true}, ErrStrict},
		{Limit{Limit: 1, Window: time.Second, Strict: true}, nil},
	}
	for _, tt := range tests {
		if got := tt.l.Validate(); got != tt.want {
			t.Errorf("Validate(%+v) = %v, want %v", tt.l, got, tt.want)
		}
	}
}

func TestSatAdd(t *testing.T) {
	t.Parallel()
	const top = ^uint64(0)
	for _, tt := range []struct{ a, b, want uint64 }{
		{0, 0, 0}, {2, 3, 5}, {top - 1, 1, top}, {top, 1, top}, {1 << 63, 1 << 63, top}, {top, top, top},
	} {
		if got := SatAdd(tt.a, tt.b); got != tt.want {
			t.Errorf("SatAdd(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
