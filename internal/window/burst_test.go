package window

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestGCRABurstCapacity: 5 per second with a burst of 20 admits 20 hits at
// once from a full bucket, then one every 200 ms, and is full again 4 s
// after it was emptied.
func TestGCRABurstCapacity(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 5, Window: time.Second, Algorithm: TokenBucket, Burst: 20}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(l)
	for i := range 20 {
		d := lim.decide(t0, 1, false)
		if msg := exactRetry(lim, l, t0, 1, d); msg != "" {
			t.Fatalf("hit %d: %s", i+1, msg)
		}
		lim.decide(t0, 1, true)
		if !d.Allowed || d.Remaining != uint64(19-i) || d.Limit != 5 {
			t.Fatalf("hit %d: Allowed %v Remaining %d Limit %d, want true %d 5", i+1, d.Allowed, d.Remaining, d.Limit, 19-i)
		}
	}
	d := lim.decide(t0, 1, true)
	if d.Allowed || d.RetryAfter != 200*time.Millisecond || d.ResetAfter != 4*time.Second {
		t.Errorf("hit 21: Allowed %v RetryAfter %v ResetAfter %v, want false 200ms 4s", d.Allowed, d.RetryAfter, d.ResetAfter)
	}
	if msg := exactRetry(lim, l, t0, 1, d); msg != "" {
		t.Error(msg)
	}
	// One second later, the limit's 5 tokens are back, not the burst.
	for i := range 5 {
		if d := lim.decide(t0+1000, 1, true); !d.Allowed {
			t.Fatalf("1 s later, hit %d denied", i+1)
		}
	}
	if d := lim.decide(t0+1000, 1, true); d.Allowed {
		t.Error("1 s later, hit 6 allowed: refill is 5 per second")
	}
	// A request for the whole burst fits a full bucket; one more does not,
	// ever.
	if d, _ := l.DecideGCRA(t0, 0, 20); !d.Allowed || d.Remaining != 0 {
		t.Errorf("request for the burst: Allowed %v Remaining %d, want true 0", d.Allowed, d.Remaining)
	}
	if d, _ := l.DecideGCRA(t0, 0, 21); d.Allowed || d.RetryAfter != Never {
		t.Errorf("request above the burst: Allowed %v RetryAfter %v, want false Never", d.Allowed, d.RetryAfter)
	}
	// A burst below the limit caps what one moment admits.
	small := Limit{Limit: 10, Window: time.Second, Algorithm: TokenBucket, Burst: 2}
	lim = newLimiter(small)
	for i := range 2 {
		if d := lim.decide(t0, 1, true); !d.Allowed {
			t.Fatalf("burst 2: hit %d denied", i+1)
		}
	}
	if d := lim.decide(t0, 1, true); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Errorf("burst 2: hit 3 Allowed %v RetryAfter %v, want false 100ms", d.Allowed, d.RetryAfter)
	}
}

// TestGCRABurstBound: under random traffic, the hits a token bucket
// admits in any interval of length T are at most burst + ceil(T*L/W), and
// every denial's RetryAfter and every ResetAfter is exact.
func TestGCRABurstBound(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		l := Limit{Limit: 1 + rng.Uint64N(20), Window: time.Duration(1+rng.IntN(10)) * time.Second, Algorithm: TokenBucket}
		l.Burst = 1 + rng.Uint64N(3*l.Limit)
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		lim := newLimiter(l)
		type adm struct {
			at   int64
			hits uint64
		}
		var admitted []adm
		now := int64(t0)
		for range 300 {
			now += rng.Int64N(l.Window.Milliseconds() / 2)
			hits := 1 + rng.Uint64N(l.Capacity())
			d := lim.decide(now, hits, false)
			if msg := exactRetry(lim, l, now, hits, d); msg != "" {
				t.Fatalf("%+v at %d, %d hits: %s", l, now-t0, hits, msg)
			}
			lim.decide(now, hits, true)
			if d.Allowed {
				admitted = append(admitted, adm{now, hits})
			}
		}
		wUs := l.Window.Microseconds()
		for i := range admitted {
			var sum uint64
			for j := i; j < len(admitted); j++ {
				sum += admitted[j].hits
				span := (admitted[j].at - admitted[i].at) * 1000
				refill := uint64((span*int64(l.Limit) + wUs - 1) / wUs)
				if sum > l.Burst+refill {
					t.Fatalf("%+v: %d hits admitted in %d ms, more than burst %d + refill %d", l, sum, span/1000, l.Burst, refill)
				}
			}
		}
	}
}

func TestBurstValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l    Limit
		want error
	}{
		{Limit{Limit: 5, Window: time.Second, Algorithm: TokenBucket, Burst: 5000}, nil},
		{Limit{Limit: 5, Window: time.Second, Algorithm: TokenBucket, Burst: 5001}, ErrBurst},
		{Limit{Limit: 5, Window: time.Second, Algorithm: FixedWindow, Burst: 10}, ErrBurst},
		{Limit{Limit: MaxLimit, Window: time.Second, Algorithm: TokenBucket, Burst: MaxLimit + 1}, ErrBurst},
	} {
		if got := tc.l.Validate(); got != tc.want {
			t.Errorf("%+v.Validate() = %v, want %v", tc.l, got, tc.want)
		}
	}
}
