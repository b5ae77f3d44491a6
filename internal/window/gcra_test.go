package window

import (
	"math/big"
	"testing"
	"time"
)

// TestGCRACapacity: 3 per 10 s, a hit costs c = ceil(10^7 / 3) = 3333334
// µs, 3 of them 10000002 µs, so tol = 2 µs and cap = 10000002 µs.
func TestGCRACapacity(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 3, Window: 10 * time.Second, Algorithm: TokenBucket}
	if got, want := l.GCRACapacity(), int64(10_000_002); got != want {
		t.Fatalf("GCRACapacity() = %d, want %d", got, want)
	}
}

// A full bucket admits limit single hits even when the window is not a
// multiple of the limit in µs, and the next token comes after W/limit.
func TestGCRABurst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		l     Limit
		retry time.Duration // of the hit after the burst
	}{
		{Limit{Limit: 7, Window: time.Minute, Algorithm: TokenBucket}, 8_572 * time.Millisecond}, // 8571428.57 µs
		{Limit{Limit: 3, Window: time.Second, Algorithm: TokenBucket}, 334 * time.Millisecond},
		{Limit{Limit: 2, Window: time.Second, Algorithm: TokenBucket}, 500 * time.Millisecond},
		{Limit{Limit: 5, Window: 7 * 24 * time.Hour, Algorithm: TokenBucket}, 7 * 24 * time.Hour / 5},
		{Limit{Limit: 1000, Window: time.Second, Algorithm: TokenBucket}, time.Millisecond},
		{Limit{Limit: 999, Window: time.Second, Algorithm: TokenBucket}, 2 * time.Millisecond}, // 1001.001 µs
	}
	for _, tt := range tests {
		lim := newLimiter(tt.l)
		for i := uint64(0); i < tt.l.Limit; i++ {
			if d := lim.decide(t0, 1, true); !d.Allowed {
				t.Fatalf("%+v: hit %d of the burst denied", tt.l, i+1)
			}
		}
		d := lim.decide(t0, 1, true)
		if got, want := d.Allowed, false; got != want {
			t.Errorf("%+v: hit after the burst Allowed = %v, want %v", tt.l, got, want)
		}
		if got, want := d.RetryAfter, tt.retry; got != want {
			t.Errorf("%+v: RetryAfter = %v, want %v", tt.l, got, want)
		}
		if msg := exactRetry(lim, tt.l, t0, 1, d); msg != "" {
			t.Errorf("%+v: %s", tt.l, msg)
		}
		// One request for the whole limit fits a full bucket too.
		if d, _ := tt.l.DecideGCRA(t0, 0, tt.l.Limit); !d.Allowed || d.Remaining != 0 {
			t.Errorf("%+v: request for the limit: Allowed %v Remaining %d, want true 0", tt.l, d.Allowed, d.Remaining)
		}
	}
}

// Denied requests leave the state alone; no state means a full bucket.
func TestGCRAState(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 10, Window: time.Second, Algorithm: TokenBucket}
	d, tat := l.DecideGCRA(t0, 0, 10)
	if !d.Allowed || tat != t0*1000+1_000_000 {
		t.Fatalf("DecideGCRA(no state, 10) = %v, %d; want allowed, %d", d.Allowed, tat, t0*1000+1_000_000)
	}
	d, tat2 := l.DecideGCRA(t0+50, tat, 1)
	if d.Allowed || tat2 != tat {
		t.Errorf("DecideGCRA(full, 1) = %v, %d; want denied, %d", d.Allowed, tat2, tat)
	}
	if got, want := d.Estimate, uint64(10); got != want {
		t.Errorf("Estimate = %d, want %d", got, want)
	}
	d, tat3 := l.DecideGCRA(t0+100, tat, 1)
	if !d.Allowed || tat3 != tat+100_000 {
		t.Errorf("DecideGCRA(+100ms, 1) = %v, %d; want allowed, %d", d.Allowed, tat3, tat+100_000)
	}
	if got, want := d.Estimate, uint64(9); got != want {
		t.Errorf("Estimate = %d, want %d", got, want)
	}
	// A state left far behind is a full bucket, not a credit.
	if d, tat := l.DecideGCRA(t0+10_000, tat, 10); !d.Allowed || tat != (t0+10_000)*1000+1_000_000 {
		t.Errorf("DecideGCRA(old state, 10) = %v, %d", d.Allowed, tat)
	}
}

// Windows from 1 s to 7 days and limits up to 2^53: the decision matches a
// big-integer computation of the formula, and every value the Redis script
// handles stays below 2^53.
func TestGCRAExtremes(t *testing.T) {
	t.Parallel()
	windows := []time.Duration{time.Second, 1500 * time.Millisecond, time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}
	limits := []uint64{1, 2, 3, 7, 999, 1_000_001, 1 << 32, MaxLimit - 1, MaxLimit}
	nows := []int64{1, 1_700_000_012_345, 4_000_000_000_000, -1_234_567}
	for _, w := range windows {
		for _, lim := range limits {
			l := Limit{Limit: lim, Window: w, Algorithm: TokenBucket}
			capUs := l.GCRACapacity()
			if capUs < w.Microseconds() || capUs > 2*w.Microseconds() {
				t.Fatalf("%+v: GCRACapacity() = %d, want W..2W", l, capUs)
			}
			for _, now := range nows {
				nowUs := now * 1000
				for _, off := range []int64{0, -1, 1, capUs / 3, capUs - 1, capUs, capUs + 5} {
					tat := nowUs + off
					for _, hits := range []uint64{1, 2, lim / 3, lim - 1, lim} {
						if hits == 0 || hits > lim {
							continue
						}
						d, next := l.DecideGCRA(now, tat, hits)
						inc := bigCeil(new(big.Int).Mul(big.NewInt(int64(hits)), big.NewInt(w.Microseconds())), new(big.Int).SetUint64(lim))
						start := max(tat, nowUs)
						wantNext := new(big.Int).Add(big.NewInt(start), inc)
						wantAllowed := new(big.Int).Sub(wantNext, big.NewInt(nowUs)).Cmp(big.NewInt(capUs)) <= 0
						if d.Allowed != wantAllowed {
							t.Fatalf("%+v now %d tat %+d hits %d: Allowed = %v, want %v", l, now, off, hits, d.Allowed, wantAllowed)
						}
						if d.Allowed && big.NewInt(next).Cmp(wantNext) != 0 {
							t.Fatalf("%+v now %d tat %+d hits %d: new TAT = %d, want %v", l, now, off, hits, next, wantNext)
						}
						if got := l.GCRAIncrement(hits); big.NewInt(got).Cmp(inc) != 0 {
							t.Fatalf("GCRAIncrement(%d) = %d, want %v", hits, got, inc)
						}
						if now > 0 && (next >= 1<<53 || start+inc.Int64() >= 1<<53) {
							t.Fatalf("%+v now %d: TAT %d not below 2^53", l, now, next)
						}
						if d.Estimate+hits > lim && d.Allowed {
							t.Fatalf("%+v: allowed with Estimate %d + hits %d > limit", l, d.Estimate, hits)
						}
						lm := &gcraState{l: l, tatUs: tat}
						if msg := exactRetry(lm, l, now, hits, d); msg != "" {
							t.Fatalf("%+v now %d tat %+d hits %d: %s", l, now, off, hits, msg)
						}
					}
				}
			}
		}
	}
}

// bigCeil returns ceil(a / b) for positive a, b.
func bigCeil(a, b *big.Int) *big.Int {
	q, r := new(big.Int).QuoRem(a, b, new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}
