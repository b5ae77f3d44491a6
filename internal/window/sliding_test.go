package window

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// The seeds' worked examples in the two-bucket mode (K = 1): the same
// figures as DecideCounter's.
func TestTwoBucketSeeds(t *testing.T) {
	t.Parallel()
	for _, tt := range seeds {
		t.Run(tt.name, func(t *testing.T) {
			s := TwoBucket(tt.l)
			c := []uint64{tt.c.Prev, tt.c.Cur}
			d := s.Decide(tt.nowMs, c, tt.hits)
			checkSeed(t, d, tt.est, tt.allowed, tt.remain, tt.retry)
			if got, want := s.Estimate(tt.nowMs, c), tt.est; got != want {
				t.Errorf("Estimate() = %d, want %d", got, want)
			}
			if got, want := d, tt.l.DecideCounter(tt.nowMs, tt.c, tt.hits); got != want {
				t.Errorf("Decide = %+v, DecideCounter = %+v", got, want)
			}
			st := &slidingState{s: s, j: d.Bucket, c: c}
			if msg := exactRetry(st, tt.l, tt.nowMs, tt.hits, d); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// K = 1 is the two-bucket counter: the same decision, field for field, as
// DecideCounter, on random and extreme inputs.
func TestTwoBucketIsDecideCounter(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 20_000; i++ {
		l := randomLimit(r, SlidingWindow)
		now := r.Int64N(1<<52) - 1<<50
		c := Counts{Prev: r.Uint64N(2*l.Limit + 1), Cur: r.Uint64N(l.Limit + 1)}
		if i%100 == 0 {
			c = Counts{Prev: ^uint64(0) - r.Uint64N(5), Cur: r.Uint64()}
		}
		hits := randomHits(r, l.Limit)
		got := TwoBucket(l).Decide(now, []uint64{c.Prev, c.Cur}, hits)
		if want := l.DecideCounter(now, c, hits); got != want {
			t.Fatalf("%+v now %d %+v hits %d:\n got  %+v\n want %+v", l, now, c, hits, got, want)
		}
	}
}

// Steps through one window of 4 sub-buckets of 2.5 s, weighted and strict.
func TestSlidingSteps(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 4, Window: 10 * time.Second}
	s := time.Millisecond
	t.Run("weighted", func(t *testing.T) {
		runSlidingSteps(t, Sliding{Limit: l, K: 4}, []step{
			// t0's sub-bucket takes 4 hits. It counts whole until it becomes
			// the oldest (t0+10 s), then weighted: floor(4 * (2500 - e) /
			// 2500) is 3 from e = 1 ms and 0 from e = 1876 ms.
			{t: t0, hits: 4, allowed: true, remain: 0, reset: 11_876 * s},
			{t: t1, hits: 1, allowed: false, retry: 9_001 * s, reset: 10_876 * s},
			// t0+12.5 s: the oldest overlapping sub-bucket is the empty one
			// after t0's: the 4 hits have left the window.
			{t: t5, hits: 4, allowed: true, remain: 0, reset: 11_876 * s},
			// t0+15 s: those 4 count whole until t0+22.5 s.
			{t: t6, hits: 1, allowed: false, retry: 7_501 * s, reset: 9_376 * s},
		})
	})
	t.Run("strict", func(t *testing.T) {
		runSlidingSteps(t, Sliding{Limit: l, K: 4, Strict: true}, []step{
			// Strict counts sub-bucket 0 whole until sub-bucket 5 starts.
			{t: t0, hits: 4, allowed: true, remain: 0, reset: 12_500 * s},
			{t: t1, hits: 1, allowed: false, retry: 11_500 * s, reset: 11_500 * s},
			{t: t4, hits: 1, allowed: false, retry: 2_500 * s, reset: 2_500 * s},
			{t: t5, hits: 3, allowed: true, remain: 1, reset: 12_500 * s},
		})
	})
}

func runSlidingSteps(t *testing.T, sl Sliding, steps []step) {
	t.Helper()
	playSteps(t, newSlidingState(sl), sl.Limit, steps)
}

// checkStats checks that the estimate is recomputed from the decision's
// stats alone, and against a big-integer computation from the counts.
func checkStats(t *testing.T, s Sliding, now int64, c []uint64, d Decision) {
	t.Helper()
	re := satAdd(d.SubWhole, MulDiv(d.SubOldest, d.SubWeightNum, d.SubWeightDen))
	if re != d.Estimate {
		t.Fatalf("%+v now %d %v: estimate from stats %d, Estimate %d", s, now, c, re, d.Estimate)
	}
	sm := s.SubMs()
	j := new(big.Int).Div(big.NewInt(now), big.NewInt(sm)) // Euclidean: floor
	e := new(big.Int).Sub(big.NewInt(now), new(big.Int).Mul(j, big.NewInt(sm)))
	want := new(big.Int)
	for _, x := range c[1:] {
		want.Add(want, new(big.Int).SetUint64(x))
	}
	w := new(big.Int).Sub(big.NewInt(sm), e)
	if s.Strict {
		w = big.NewInt(sm)
	}
	p := new(big.Int).Mul(new(big.Int).SetUint64(c[0]), w)
	want.Add(want, p.Div(p, big.NewInt(sm)))
	if want.Cmp(new(big.Int).SetUint64(^uint64(0))) > 0 {
		want.SetUint64(^uint64(0))
	}
	if got := new(big.Int).SetUint64(d.Estimate); got.Cmp(want) != 0 {
		t.Fatalf("%+v now %d %v: Estimate %v, want %v", s, now, c, got, want)
	}
	if d.Bucket != j.Int64() || d.SubMs != sm {
		t.Fatalf("%+v now %d: Bucket %d SubMs %d, want %v %d", s, now, d.Bucket, d.SubMs, j, sm)
	}
}

// randomSliding returns a valid sub-bucket counter for a random limit.
func randomSliding(r *rand.Rand) Sliding {
	l := randomLimit(r, SlidingWindow)
	ks := []int64{1, 2, 4, 8, 10, 16, 20, MaxSubBuckets}
	return Sliding{Limit: l, K: SubBucketsFor(l.Window, ks[r.IntN(len(ks))]), Strict: r.IntN(2) == 0}
}

// Random counters, weighted and strict, with random traffic: the estimate
// matches its stats and a big-integer computation, and RetryAfter,
// ResetAfter and Remaining are exact to the millisecond.
func TestSlidingExactRandom(t *testing.T) {
	t.Parallel()
	denied := 0
	for seed := uint64(1); seed <= 60; seed++ {
		r := rand.New(rand.NewPCG(seed, 99))
		s := randomSliding(r)
		if err := s.Validate(); err != nil {
			t.Fatalf("Validate(%+v) = %v", s, err)
		}
		st := newSlidingState(s)
		now := int64(1_700_000_000_000) + r.Int64N(s.WindowMs()*3)
		for i := 0; i < 300; i++ {
			gap := r.Int64N(max(1, 4*s.WindowMs()/int64(min(s.Limit.Limit, 1<<20))))
			if r.IntN(20) == 0 {
				gap = r.Int64N(2 * s.WindowMs())
			}
			now += gap
			hits := randomHits(r, s.Limit.Limit)
			before := clone(st).(*slidingState)
			c := before.at(now)
			d := st.decide(now, hits, true)
			if !d.Allowed {
				denied++
			}
			checkStats(t, s, now, c, d)
			if got, want := d.Allowed, d.Estimate <= s.Limit.Limit && hits <= s.Limit.Limit-d.Estimate; got != want {
				t.Fatalf("seed %d: Allowed = %v with estimate %d + %d", seed, got, d.Estimate, hits)
			}
			if msg := exactRetry(before, s.Limit, now, hits, d); msg != "" {
				t.Fatalf("seed %d %+v, step %d at %d hits %d: %s", seed, s, i, now, hits, msg)
			}
		}
	}
	if denied < 1000 {
		t.Errorf("only %d of 18000 requests denied: the traffic does not test denials", denied)
	}
}

func TestSlidingValidate(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 10, Window: time.Second}
	tests := []struct {
		s    Sliding
		want error
	}{
		{Sliding{Limit: l, K: 1}, nil},
		{Sliding{Limit: l, K: 10}, nil},
		{Sliding{Limit: l, K: 8, Strict: true}, nil},
		{Sliding{Limit: l, K: 0}, ErrSubBuckets},
		{Sliding{Limit: l, K: 3}, ErrSubBuckets}, // 333.3 ms
		{Sliding{Limit: l, K: MaxSubBuckets + 1}, ErrSubBuckets},
		{Sliding{Limit: Limit{Window: time.Second}, K: 1}, ErrLimit},
	}
	for _, tt := range tests {
		if got := tt.s.Validate(); got != tt.want {
			t.Errorf("Validate(%+v) = %v, want %v", tt.s, got, tt.want)
		}
	}
	for _, tt := range []struct {
		w    time.Duration
		want int64
	}{{time.Second, 100}, {time.Minute, 100}, {1500 * time.Millisecond, 100}, {1001 * time.Millisecond, 91}, {1009 * time.Millisecond, 1}, {1999 * time.Millisecond, 1}} {
		if got := DefaultSliding(Limit{Limit: 1, Window: tt.w}).K; got != tt.want {
			t.Errorf("DefaultSliding(%v).K = %d, want %d", tt.w, got, tt.want)
		}
	}
}
