package window

import (
	"math/rand/v2"
	"testing"
	"time"
)

// randomLimit returns a valid limit for algo: windows from 1 s to 7 days,
// limits from 1 to 2^53, biased to the small ones that stores see most.
func randomLimit(r *rand.Rand, algo Algorithm) Limit {
	windows := []time.Duration{time.Second, 2 * time.Second, 1500 * time.Millisecond, 10 * time.Second, time.Minute, 7 * time.Minute, time.Hour, 24 * time.Hour, MaxWindow}
	w := windows[r.IntN(len(windows))]
	if r.IntN(4) == 0 {
		w = MinWindow + time.Duration(r.Int64N(int64(MaxWindow-MinWindow)/1e6))*time.Millisecond
	}
	var lim uint64
	switch r.IntN(4) {
	case 0:
		lim = 1 + r.Uint64N(10)
	case 1:
		lim = 1 + r.Uint64N(1000)
	case 2:
		lim = 1 + r.Uint64N(1<<32)
	default:
		lim = 1 + r.Uint64N(MaxLimit)
	}
	if algo == SlidingLog && lim > 100 {
		lim = 1 + lim%100
	}
	return Limit{Limit: lim, Window: w, Algorithm: algo}
}

// randomHits returns a request size from 1 to lim, mostly small.
func randomHits(r *rand.Rand, lim uint64) uint64 {
	if r.IntN(2) == 0 {
		return 1 + r.Uint64N(min(lim, 3))
	}
	return 1 + r.Uint64N(lim)
}

// For every algorithm, random limits and random traffic: each answer's
// RetryAfter, ResetAfter and Remaining are exact to the millisecond (the same
// request is allowed at now+RetryAfter and denied 1 ms earlier), and a denied
// request never fits under the limit.
func TestRetryAfterExactRandom(t *testing.T) {
	t.Parallel()
	for _, algo := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket, SlidingLog} {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			denied := 0
			for seed := uint64(1); seed <= 40; seed++ {
				r := rand.New(rand.NewPCG(seed, uint64(algo)))
				l := randomLimit(r, algo)
				lim := newLimiter(l)
				now := int64(1_700_000_000_000) + r.Int64N(l.WindowMs()*3)
				for i := 0; i < 300; i++ {
					// Steps from 0 to about W/limit*4, sometimes a whole window.
					gap := r.Int64N(max(1, 4*l.WindowMs()/int64(min(l.Limit, 1<<20))))
					if r.IntN(20) == 0 {
						gap = r.Int64N(2 * l.WindowMs())
					}
					now += gap
					hits := randomHits(r, l.Limit)
					before := clone(lim)
					d := lim.decide(now, hits, true)
					if !d.Allowed {
						denied++
					}
					if d.Allowed && d.Estimate+hits > l.Limit {
						t.Fatalf("seed %d %+v: allowed with estimate %d + %d > limit", seed, l, d.Estimate, hits)
					}
					if !d.Allowed && d.Estimate+hits <= l.Limit {
						t.Fatalf("seed %d %+v: denied with estimate %d + %d <= limit", seed, l, d.Estimate, hits)
					}
					if msg := exactRetry(before, l, now, hits, d); msg != "" {
						t.Fatalf("seed %d %+v, step %d at %d hits %d: %s", seed, l, i, now, hits, msg)
					}
				}
			}
			if denied < 1000 {
				t.Errorf("only %d of 12000 requests denied: the traffic does not test denials", denied)
			}
			t.Logf("%d of 12000 requests denied", denied)
		})
	}
}
