package sliding

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// state keeps a counter's counts as a store would: c[i] is sub-bucket
// j-K+i's count, as of sub-bucket j.
type state struct {
	s Counter
	j int64
	c []uint64
}

func newState(s Counter) *state {
	return &state{s: s, c: make([]uint64, s.K+1)}
}

// at returns the counts of sub-buckets j-K..j at nowMs with no traffic since
// sub-bucket st.j.
func (st *state) at(nowMs int64) []uint64 {
	n := st.s.SubBucket(nowMs) - st.j
	out := make([]uint64, len(st.c))
	if n >= 0 && n < int64(len(st.c)) {
		copy(out, st.c[n:])
	}
	return out
}

// decide answers hits at nowMs and, when commit is set and the request is
// allowed, records it.
func (st *state) decide(nowMs int64, hits uint64, commit bool) window.Decision {
	c := st.at(nowMs)
	d := st.s.Decide(nowMs, c, hits)
	if commit && d.Allowed {
		c[len(c)-1] = window.SatAdd(c[len(c)-1], hits)
		st.j, st.c = d.Bucket, c
	}
	return d
}

func (st *state) clone() *state {
	c := *st
	c.c = append([]uint64(nil), st.c...)
	return &c
}

// probe is a request that must be allowed (want) or denied on a state with
// no other traffic.
type probe struct {
	on   *state
	at   int64
	hits uint64
	want bool
	what string
}

// exactness returns the probes that prove d, st's answer to hits at nowMs
// (st not yet updated), exact to the millisecond: the same request is
// allowed at now+RetryAfter and denied 1 ms earlier; after this request, the
// full limit is allowed at now+ResetAfter and denied 1 ms earlier, and
// Remaining hits fit right away but one more does not. Decisions are
// monotone in time without traffic, so the neighbouring instants suffice.
func exactness(st *state, nowMs int64, hits uint64, d window.Decision) []probe {
	lim := st.s.Limit.Limit
	after := st.clone()
	after.decide(nowMs, hits, true)
	var ps []probe
	if !d.Allowed && d.RetryAfter != window.Never {
		at := nowMs + d.RetryAfter.Milliseconds()
		ps = append(ps, probe{st, at, hits, true, "at now+RetryAfter"}, probe{st, at - 1, hits, false, "at now+RetryAfter-1ms"})
	}
	reset := nowMs + d.ResetAfter.Milliseconds()
	ps = append(ps, probe{after, reset, lim, true, "the full limit at now+ResetAfter"})
	if d.ResetAfter > 0 {
		ps = append(ps, probe{after, reset - 1, lim, false, "the full limit at now+ResetAfter-1ms"})
	}
	if d.Remaining > 0 {
		ps = append(ps, probe{after, nowMs, d.Remaining, true, "Remaining right after"})
	}
	if d.Remaining < lim {
		ps = append(ps, probe{after, nowMs, d.Remaining + 1, false, "Remaining+1 right after"})
	}
	return ps
}

// exact returns what is wrong with d, st's answer to hits at nowMs (st not
// yet updated), or "": RetryAfter is 0 exactly when allowed, and the probes
// (exactness's, then extra) answer as they must.
func exact(st *state, nowMs int64, hits uint64, d window.Decision, extra ...probe) string {
	if d.Allowed != (d.RetryAfter == 0) || d.RetryAfter < 0 {
		return fmt.Sprintf("Allowed %v with RetryAfter %v", d.Allowed, d.RetryAfter)
	}
	for _, p := range append(exactness(st, nowMs, hits, d), extra...) {
		if got := p.on.decide(p.at, p.hits, false).Allowed; got != p.want {
			return fmt.Sprintf("%d hits %s (+%d ms): allowed %v, want %v (%+v)", p.hits, p.what, p.at-nowMs, got, p.want, d)
		}
	}
	return ""
}

// randomLimit returns a valid limit: windows from 1 s to 7 days, some of
// them odd milliseconds, limits from 1 to 2^53, mostly small.
func randomLimit(r *rand.Rand) window.Limit {
	ws := []time.Duration{time.Second, 1500 * time.Millisecond, 10 * time.Second, time.Minute, time.Hour, window.MaxWindow}
	w := ws[r.IntN(len(ws))]
	if r.IntN(4) == 0 {
		w = window.MinWindow + time.Duration(r.Int64N(int64(window.MaxWindow-window.MinWindow)/1e6))*time.Millisecond
	}
	tops := []uint64{10, 1000, 1 << 32, window.MaxLimit}
	return window.Limit{Limit: 1 + r.Uint64N(tops[r.IntN(len(tops))]), Window: w}
}

// randomHits returns a request size from 1 to lim, half of them at most 3.
func randomHits(r *rand.Rand, lim uint64) uint64 {
	return 1 + r.Uint64N([]uint64{min(lim, 3), lim}[r.IntN(2)])
}

// K = 1 is the seeds' two-bucket counter: the same decision, field for
// field, as window's DecideCounter, on random and extreme inputs.
func TestTwoBucketIsDecideCounter(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 20_000; i++ {
		l := randomLimit(r)
		now := r.Int64N(1<<52) - 1<<50
		c := window.Counts{Prev: r.Uint64N(2*l.Limit + 1), Cur: r.Uint64N(l.Limit + 1)}
		if i%100 == 0 {
			c = window.Counts{Prev: ^uint64(0) - r.Uint64N(5), Cur: r.Uint64()}
		}
		hits := randomHits(r, l.Limit)
		got := TwoBucket(l).Decide(now, []uint64{c.Prev, c.Cur}, hits)
		if want := l.DecideCounter(now, c, hits); got != want {
			t.Fatalf("%+v now %d %+v hits %d:\n got  %+v\n want %+v", l, now, c, hits, got, want)
		}
		if got, want := TwoBucket(l).Estimate(now, []uint64{c.Prev, c.Cur}), l.Estimate(now, c); got != want {
			t.Fatalf("%+v now %d %+v: Estimate %d, want %d", l, now, c, got, want)
		}
	}
}

// Steps through one window of 4 sub-buckets of 2.5 s, weighted and strict,
// from t0, the start of a 10 s bucket.
func TestSlidingSteps(t *testing.T) {
	t.Parallel()
	const t0 = 1_700_000_000_000
	l := window.Limit{Limit: 4, Window: 10 * time.Second}
	s := time.Millisecond
	type step struct {
		at            int64 // ms from t0
		hits          uint64
		allowed       bool
		remain        uint64
		retry, resetA time.Duration
	}
	for _, tc := range []struct {
		name  string
		c     Counter
		steps []step
	}{
		{"weighted", Counter{Limit: l, K: 4}, []step{
			// t0's sub-bucket takes 4 hits. It counts whole until it becomes
			// the oldest (t0+10 s), then weighted: floor(4 * (2500 - e) /
			// 2500) is 3 from e = 1 ms and 0 from e = 1876 ms.
			{0, 4, true, 0, 0, 11_876 * s},
			{1_000, 1, false, 0, 9_001 * s, 10_876 * s},
			// t0+12.5 s: the oldest overlapping sub-bucket is the empty one
			// after t0's: the 4 hits have left the window.
			{12_500, 4, true, 0, 0, 11_876 * s},
			// t0+15 s: those 4 count whole until t0+22.5 s.
			{15_000, 1, false, 0, 7_501 * s, 9_376 * s},
		}},
		// Strict counts sub-bucket 0 whole until sub-bucket 5 starts.
		{"strict", Counter{Limit: l, K: 4, Strict: true}, []step{
			{0, 4, true, 0, 0, 12_500 * s},
			{1_000, 1, false, 0, 11_500 * s, 11_500 * s},
			{10_000, 1, false, 0, 2_500 * s, 2_500 * s},
			{12_500, 3, true, 1, 0, 12_500 * s},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newState(tc.c)
			for i, p := range tc.steps {
				before := st.clone()
				d := st.decide(t0+p.at, p.hits, true)
				got := step{p.at, p.hits, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter}
				if got != p {
					t.Errorf("step %d: got %+v, want %+v", i, got, p)
				}
				if msg := exact(before, t0+p.at, p.hits, d); msg != "" {
					t.Errorf("step %d: %s", i, msg)
				}
			}
		})
	}
}

// checkStats checks that the estimate is recomputed from the decision's
// stats alone, and against a big-integer computation from the counts.
func checkStats(t *testing.T, s Counter, now int64, c []uint64, d window.Decision) {
	t.Helper()
	re := window.SatAdd(d.SubWhole, window.MulDiv(d.SubOldest, d.SubWeightNum, d.SubWeightDen))
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

// randomCounter returns a valid sub-bucket counter for a random limit.
func randomCounter(r *rand.Rand) Counter {
	l := randomLimit(r)
	ks := []int64{1, 2, 4, 8, 10, 16, 20, MaxSubBuckets}
	return Counter{Limit: l, K: SubBucketsFor(l.Window, ks[r.IntN(len(ks))]), Strict: r.IntN(2) == 0}
}

// Random counters, weighted and strict, with random traffic: the estimate
// matches its stats and a big-integer computation, and RetryAfter,
// ResetAfter and Remaining are exact to the millisecond.
func TestSlidingExactRandom(t *testing.T) {
	t.Parallel()
	denied := 0
	for seed := uint64(1); seed <= 60; seed++ {
		r := rand.New(rand.NewPCG(seed, 99))
		s := randomCounter(r)
		if err := s.Validate(); err != nil {
			t.Fatalf("Validate(%+v) = %v", s, err)
		}
		st := newState(s)
		now := int64(1_700_000_000_000) + r.Int64N(s.WindowMs()*3)
		for i := 0; i < 300; i++ {
			gap := r.Int64N(max(1, 4*s.WindowMs()/int64(min(s.Limit.Limit, 1<<20))))
			if r.IntN(20) == 0 {
				gap = r.Int64N(2 * s.WindowMs())
			}
			now += gap
			hits := randomHits(r, s.Limit.Limit)
			before := st.clone()
			c := before.at(now)
			d := st.decide(now, hits, true)
			if !d.Allowed {
				denied++
			}
			checkStats(t, s, now, c, d)
			if got, want := d.Allowed, d.Estimate <= s.Limit.Limit && hits <= s.Limit.Limit-d.Estimate; got != want {
				t.Fatalf("seed %d: Allowed = %v with estimate %d + %d", seed, got, d.Estimate, hits)
			}
			if msg := exact(before, now, hits, d); msg != "" {
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
	l := window.Limit{Limit: 10, Window: time.Second}
	tests := []struct {
		s    Counter
		want error
	}{
		{Counter{Limit: l, K: 1}, nil},
		{Counter{Limit: l, K: 10}, nil},
		{Counter{Limit: l, K: 8, Strict: true}, nil},
		{Counter{Limit: l, K: 0}, ErrSubBuckets},
		{Counter{Limit: l, K: 3}, ErrSubBuckets}, // 333.3 ms
		{Counter{Limit: l, K: MaxSubBuckets + 1}, ErrSubBuckets},
		{Counter{Limit: window.Limit{Window: time.Second}, K: 1}, window.ErrLimit},
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
		if got := Default(window.Limit{Limit: 1, Window: tt.w}).K; got != tt.want {
			t.Errorf("Default(%v).K = %d, want %d", tt.w, got, tt.want)
		}
	}
}

// FuzzDecideSliding decides one request on arbitrary counts: the estimate
// matches its stats, the decision its estimate, and RetryAfter, ResetAfter
// and Remaining are exact; a denied request is also denied at every
// brute-forced instant before RetryAfter (the first and last 64 ms and 64
// spread between).
func FuzzDecideSliding(f *testing.F) {
	f.Add(uint64(500), uint64(60_000), uint8(1), false, []byte{200, 1, 250, 0}, int64(23*60_000+45_000), uint64(1))
	f.Add(uint64(7), uint64(60_000), uint8(1), false, []byte{5, 0, 3, 0}, int64(18_000), uint64(1))
	f.Add(uint64(4), uint64(10_000), uint8(4), true, []byte{4, 0, 0, 0, 0, 0, 0, 0, 1, 0}, int64(1_700_000_010_000), uint64(1))
	f.Add(uint64(1000), uint64(4_000), uint8(100), false, []byte("some sub-bucket counts of a busy key, and more"), int64(1_700_000_001_234), uint64(3))
	f.Add(uint64(window.MaxLimit), uint64(604_800_000), uint8(64), true, []byte{255, 255, 255, 255}, int64(-7), uint64(window.MaxLimit))
	f.Fuzz(func(t *testing.T, limit, windowMs uint64, k uint8, strict bool, raw []byte, now int64, hits uint64) {
		const maxMs = uint64(window.MaxWindow / time.Millisecond)
		l := window.Limit{Limit: 1 + limit%window.MaxLimit, Window: time.Duration(1000+windowMs%(maxMs-999)) * time.Millisecond}
		s := Counter{Limit: l, K: SubBucketsFor(l.Window, 1+int64(k)%MaxSubBuckets), Strict: strict}
		now %= 1 << 52 // now+RetryAfter cannot overflow
		hits = 1 + hits%l.Limit
		// Two bytes per count, little-endian, scaled so that counts near
		// and above the limit are common; 0xffff saturates.
		c := make([]uint64, s.K+1)
		for i := range c {
			if len(raw) < 2 {
				break
			}
			v := uint64(raw[0]) | uint64(raw[1])<<8
			switch {
			case v == 0xffff:
				c[i] = ^uint64(0)
			default:
				c[i] = window.MulDiv(v, l.Limit, 0x4000) // up to 4x the limit
			}
			raw = raw[2:]
		}
		d := s.Decide(now, c, hits)
		if got, want := d.Estimate, s.Estimate(now, c); got != want {
			t.Fatalf("Estimate = %d, Estimate() = %d", got, want)
		}
		checkStats(t, s, now, c, d)
		if got, want := d.Allowed, d.Estimate <= l.Limit && hits <= l.Limit-d.Estimate; got != want {
			t.Fatalf("Allowed = %v with Estimate %d + %d hits", got, d.Estimate, hits)
		}
		if d.Limit != l.Limit || d.Remaining > l.Limit || (d.Allowed && d.Remaining > l.Limit-hits) {
			t.Fatalf("%d hits: Limit %d Remaining %d, limit %d", hits, d.Limit, d.Remaining, l.Limit)
		}
		if d.ResetAfter < 0 || d.ResetAfter > l.Window+time.Duration(s.SubMs())*time.Millisecond {
			t.Fatalf("ResetAfter %v out of 0..W+S", d.ResetAfter)
		}
		st := &state{s: s, j: d.Bucket, c: c}
		var brute []probe
		if ra := d.RetryAfter.Milliseconds(); !d.Allowed && d.RetryAfter != window.Never {
			for i := int64(0); i < 64 && i < ra; i++ {
				brute = append(brute, probe{st, now + i, hits, false, "before RetryAfter"}, probe{st, now + ra - 1 - i, hits, false, "before RetryAfter"})
				brute = append(brute, probe{st, now + ra*i/64, hits, false, "before RetryAfter"})
			}
		}
		if msg := exact(st, now, hits, d, brute...); msg != "" {
			t.Fatalf("%+v now %d %v hits %d: %s", s, now, c, hits, msg)
		}
	})
}

// sink keeps the compiler from discarding the decisions.
var sink window.Decision

// benchSliding decides allowed requests against counts that hold 350 of a
// limit of 500 per minute, spread over the window.
func benchSliding(b *testing.B, s Counter) {
	b.ReportAllocs()
	c := make([]uint64, s.K+1)
	for i := range c {
		c[i] = 350 / uint64(s.K+1)
	}
	now := int64(1_700_000_000_000)
	for i := 0; b.Loop(); i++ {
		sink = s.Decide(now+int64(i&1023), c, 1)
	}
}

// The CPU per decision of each mode, in one run: the default against the
// two-bucket counter (K = 1) and other K.
func BenchmarkSliding(b *testing.B) {
	l := window.Limit{Limit: 500, Window: time.Minute}
	b.Run("two-bucket", func(b *testing.B) { benchSliding(b, TwoBucket(l)) })
	b.Run("default", func(b *testing.B) { benchSliding(b, Default(l)) })
	b.Run("strict", func(b *testing.B) {
		s := Default(l)
		s.Strict = true
		benchSliding(b, s)
	})
	for _, k := range []int64{10, 20, 50} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) { benchSliding(b, Counter{Limit: l, K: k}) })
	}
}
