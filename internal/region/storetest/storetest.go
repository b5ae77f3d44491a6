// Package storetest is the contract test suite of [region.Store]: every
// implementation (in memory, Redis, Redis Cluster, and any wrapper such as
// a replicating store) must pass RunStoreTests. It also opens stacks for
// tests (Open) and gives a store that is down (Down).
package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// NewStore returns a store whose local region is named region. Stores made
// for one test may share their backing data with stores of other tests:
// every case uses keys of its own.
type NewStore func(t *testing.T, region string) region.Store

// t0 is the start of a minute, and of a 7-day bucket, far from any edge.
var t0 = time.UnixMilli(window.Bucket(1_760_000_000_000, 7*24*time.Hour) * (7 * 24 * time.Hour).Milliseconds())

// RunStoreTests runs the contract suite against stores made by newStore.
func RunStoreTests(t *testing.T, newStore NewStore) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, s region.Store, key string)
	}{
		{"SeedExamples", testSeedExamples},
		{"FixedWindow", testFixedWindow},
		{"RetryAfterIsExact", testRetryAfterIsExact},
		{"PeekConsumesNothing", testPeek},
		{"OldBucketsExpire", testExpiry},
		{"BatchInOrder", testBatchInOrder},
		{"MergeIsMaxMerge", testMerge},
		{"MergeOrderFreeAndIdempotent", testMergeOrderFree},
		{"RegionsInResults", testRegions},
		{"Vectors", testVectors},
		{"AwkwardKeys", testAwkwardKeys},
		{"BigNumbers", testBigNumbers},
		{"ConcurrentNeverOverAdmits", testConcurrent},
		{"TrailsDecideAsWindow", testTrails},
		{"TrailsReplicate", testTrailsMerge},
		{"TokenBucketBurst", testTokenBucketBurst},
		{"Calendar", testCalendar},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t, "here")
			key := fmt.Sprintf("storetest/%s/%d", t.Name(), rand.Uint64())
			c.fn(t, s, key)
		})
	}
	t.Run("Algorithms", func(t *testing.T) {
		for _, l := range algorithms {
			name := l.Algorithm.String()
			if l.Strict {
				name += "_strict"
			}
			t.Run(name, func(t *testing.T) {
				s := newStore(t, "here")
				testAlgorithm(t, s, fmt.Sprintf("storetest/%s/%d", t.Name(), rand.Uint64()), l)
			})
		}
	})
}

// algorithms are the limits' algorithms every store runs: each algorithm,
// and the default sliding window also strict.
var algorithms = []window.Limit{
	{Algorithm: window.SlidingWindow}, {Algorithm: window.SlidingWindow, Strict: true},
	{Algorithm: window.SlidingWindowTwoBucket}, {Algorithm: window.FixedWindow},
	{Algorithm: window.TokenBucket}, {Algorithm: window.SlidingLog},
}

// Check runs one request and returns its result, failing t on error.
func Check(t *testing.T, s region.Store, q region.Request) region.Result {
	t.Helper()
	res := make([]region.Result, 1)
	if err := s.Check(context.Background(), []region.Request{q}, res); err != nil {
		t.Fatalf("Check(%q, hits %d at %v): %v", q.Key, q.Hits, q.Now.UnixMilli(), err)
	}
	return res[0]
}

func merge(t *testing.T, s region.Store, totals ...region.Total) {
	t.Helper()
	if err := s.Merge(context.Background(), totals); err != nil {
		t.Fatalf("Merge: %v", err)
	}
}

func vector(t testing.TB, s region.Store, key string, w time.Duration, b int64) []region.Total {
	t.Helper()
	v, err := s.Vectors(context.Background(), []region.BucketRef{{Key: key, Window: w, Bucket: b}})
	if err != nil {
		t.Fatalf("Vectors: %v", err)
	}
	return v[0]
}

// RegionCounts returns the count of each region in s's bucket b of key's
// window w, failing t on error.
func RegionCounts(t testing.TB, s region.Store, key string, w time.Duration, b int64) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, tt := range vector(t, s, key, w, b) {
		out[tt.Region] = tt.Count
	}
	return out
}

// counts sums the per-region counts of a result.
func counts(res region.Result) window.Counts {
	var c window.Counts
	for _, rc := range res.Regions {
		c.Cur += rc.Current
		c.Prev += rc.Previous
	}
	return c
}

func sameDecision(t *testing.T, what string, got, want window.Decision) {
	t.Helper()
	if got != want {
		t.Errorf("%s: decision\n got  %+v\n want %+v", what, got, want)
	}
}

func testSeedExamples(t *testing.T, s region.Store, key string) {
	minute := window.Limit{Limit: 500, Window: time.Minute, Algorithm: window.SlidingWindowTwoBucket}
	tests := []struct {
		name      string
		limit     uint64
		prev, cur uint64
		at        time.Duration // into the current minute
		wantEst   uint64
		wantAllow []bool // consecutive 1-hit requests at the same instant
		wantLocal uint64 // after the first request
	}{
		{"500/min at :45", 500, 400, 250, 45 * time.Second, 350, []bool{true}, 251},
		{"100/min at :40", 100, 90, 50, 40 * time.Second, 80, []bool{true}, 51},
		{"7/min at 30%", 7, 5, 3, 18 * time.Second, 6, []bool{true, false}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := key + "/" + tt.name
			l := minute
			l.Limit = tt.limit
			prevAt := t0.Add(-time.Minute + time.Second)
			if r := Check(t, s, region.Request{Key: k, Limit: l, Hits: tt.prev, Now: prevAt}); !r.Allowed {
				t.Fatalf("seeding previous bucket with %d: denied", tt.prev)
			}
			now := t0.Add(tt.at)
			if r := Check(t, s, region.Request{Key: k, Limit: l, Hits: tt.cur, Now: now}); !r.Allowed {
				t.Fatalf("seeding current bucket with %d: denied (%+v)", tt.cur, r.Decision)
			}
			c := window.Counts{Prev: tt.prev, Cur: tt.cur}
			for i, wantAllow := range tt.wantAllow {
				r := Check(t, s, region.Request{Key: k, Limit: l, Hits: 1, Now: now})
				want := l.DecideCounter(window.Ms(now), c, 1)
				sameDecision(t, fmt.Sprintf("request %d", i), r.Decision, want)
				if got := r.Allowed; got != wantAllow {
					t.Errorf("request %d: Allowed = %v, want %v", i, got, wantAllow)
				}
				if i == 0 {
					if got, want := r.Estimate, tt.wantEst; got != want {
						t.Errorf("Estimate = %d, want %d", got, want)
					}
					if got, want := r.Local, tt.wantLocal; got != want {
						t.Errorf("Local = %d, want %d", got, want)
					}
				}
				if r.Allowed {
					c.Cur++
				}
			}
		})
	}
}

func testFixedWindow(t *testing.T, s region.Store, key string) {
	l := window.Limit{Limit: 3, Window: 10 * time.Second, Algorithm: window.FixedWindow}
	steps := []struct {
		at    time.Duration
		allow bool
	}{
		{-time.Second, true}, {-time.Second, true}, {-time.Second, true}, {-time.Second, false},
		// A new bucket: the previous one does not count.
		{0, true}, {time.Second, true}, {9 * time.Second, true}, {9*time.Second + 999*time.Millisecond, false},
	}
	for i, st := range steps {
		r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: t0.Add(st.at)})
		if r.Allowed != st.allow {
			t.Errorf("step %d at %v: Allowed = %v, want %v", i, st.at, r.Allowed, st.allow)
		}
	}
	r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: t0.Add(5 * time.Second)})
	if got, want := r.RetryAfter, 5*time.Second; got != want {
		t.Errorf("RetryAfter = %v, want %v", got, want)
	}
}

// testAlgorithm drives each algorithm to its limit and checks that the
// request denied is allowed exactly at RetryAfter, not a millisecond before.
func testAlgorithm(t *testing.T, s region.Store, key string, l window.Limit) {
	a := l.Algorithm
	l.Limit, l.Window = 5, 10*time.Second
	now := t0.Add(3 * time.Second)
	allowed := 0
	for i := 0; i < 7; i++ {
		r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: now})
		if r.Allowed {
			allowed++
			if r.RetryAfter != 0 {
				t.Errorf("allowed request %d: RetryAfter = %v, want 0", i, r.RetryAfter)
			}
		} else if r.RetryAfter <= 0 {
			t.Errorf("denied request %d: RetryAfter = %v, want > 0", i, r.RetryAfter)
		}
		if r.Limit != 5 {
			t.Errorf("Limit = %d, want 5", r.Limit)
		}
	}
	if allowed != 5 {
		t.Fatalf("%v: allowed %d of 7 at one instant, want 5", a, allowed)
	}
	r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: now, Peek: true})
	if r.Allowed || r.Remaining != 0 {
		t.Fatalf("peek after the limit: Allowed %v Remaining %d, want false 0", r.Allowed, r.Remaining)
	}
	retry := now.Add(r.RetryAfter)
	if before := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: retry.Add(-time.Millisecond), Peek: true}); before.Allowed {
		t.Errorf("%v: allowed 1ms before RetryAfter (%v)", a, r.RetryAfter)
	}
	if at := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: retry}); !at.Allowed {
		t.Errorf("%v: denied at RetryAfter (%v): %+v", a, r.RetryAfter, at.Decision)
	}
	// After two windows with no traffic everything is available again.
	later := now.Add(20*time.Second + r.RetryAfter)
	if r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 5, Now: later}); !r.Allowed {
		t.Errorf("%v: full limit denied two windows later: %+v", a, r.Decision)
	}
}

// testTokenBucketBurst: a token bucket of 5 per 10 s with a burst of 12
// admits 12 hits at one instant, then one every 2 s; one request may take
// the whole burst.
func testTokenBucketBurst(t *testing.T, s region.Store, key string) {
	l := window.Limit{Limit: 5, Window: 10 * time.Second, Algorithm: window.TokenBucket, Burst: 12}
	now := t0.Add(3 * time.Second)
	for i := range 12 {
		if r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: now}); !r.Allowed || r.Remaining != uint64(11-i) {
			t.Fatalf("hit %d: Allowed %v Remaining %d, want true %d", i+1, r.Allowed, r.Remaining, 11-i)
		}
	}
	r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: now})
	if r.Allowed || r.RetryAfter != 2*time.Second || r.ResetAfter != 24*time.Second {
		t.Errorf("hit 13: Allowed %v RetryAfter %v ResetAfter %v, want false 2s 24s", r.Allowed, r.RetryAfter, r.ResetAfter)
	}
	if r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: now.Add(2 * time.Second)}); !r.Allowed {
		t.Errorf("hit 13 at RetryAfter: denied: %+v", r.Decision)
	}
	if r := Check(t, s, region.Request{Key: key + "/whole", Limit: l, Hits: 12, Now: now}); !r.Allowed || r.Remaining != 0 {
		t.Errorf("12 hits at once: Allowed %v Remaining %d, want true 0", r.Allowed, r.Remaining)
	}
}

func testRetryAfterIsExact(t *testing.T, s region.Store, key string) {
	l := window.Limit{Limit: 10, Window: time.Minute, Algorithm: window.SlidingWindowTwoBucket}
	Check(t, s, region.Request{Key: key, Limit: l, Hits: 10, Now: t0.Add(-30 * time.Second)})
	now := t0.Add(5 * time.Second)
	Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: now})
	r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 5, Now: now})
	want := l.DecideCounter(window.Ms(now), window.Counts{Prev: 10, Cur: 1}, 5)
	sameDecision(t, "denied", r.Decision, want)
	if r.Allowed {
		t.Fatalf("Allowed, want denied")
	}
	if got := Check(t, s, region.Request{Key: key, Limit: l, Hits: 5, Now: now.Add(r.RetryAfter - time.Millisecond), Peek: true}); got.Allowed {
		t.Errorf("allowed 1ms before RetryAfter")
	}
	if got := Check(t, s, region.Request{Key: key, Limit: l, Hits: 5, Now: now.Add(r.RetryAfter), Peek: true}); !got.Allowed {
		t.Errorf("denied at RetryAfter %v", r.RetryAfter)
	}
}

func testPeek(t *testing.T, s region.Store, key string) {
	for _, a := range []window.Algorithm{window.SlidingWindow, window.FixedWindow, window.TokenBucket, window.SlidingLog} {
		k := key + "/" + a.String()
		l := window.Limit{Limit: 3, Window: time.Minute, Algorithm: a}
		for i := 0; i < 10; i++ {
			r := Check(t, s, region.Request{Key: k, Limit: l, Hits: 2, Now: t0, Peek: true})
			if !r.Allowed {
				t.Fatalf("%v: peek %d denied", a, i)
			}
			if r.Local != 0 {
				t.Errorf("%v: peek %d: Local = %d, want 0", a, i, r.Local)
			}
		}
		if r := Check(t, s, region.Request{Key: k, Limit: l, Hits: 3, Now: t0}); !r.Allowed {
			t.Errorf("%v: full limit denied after peeks", a)
		}
		if r := Check(t, s, region.Request{Key: k, Limit: l, Hits: 1, Now: t0, Peek: true}); r.Allowed {
			t.Errorf("%v: peek allowed past the limit", a)
		}
	}
	if v := vector(t, s, key+"/"+window.SlidingWindow.String(), time.Minute, window.Bucket(window.Ms(t0), time.Minute)); len(v) != 1 || v[0].Count != 3 {
		t.Errorf("vector after peeks and one check of 3 = %+v, want one total of 3", v)
	}
}

func testExpiry(t *testing.T, s region.Store, key string) {
	l := window.Limit{Limit: 4, Window: time.Second, Algorithm: window.SlidingWindowTwoBucket}
	Check(t, s, region.Request{Key: key, Limit: l, Hits: 4, Now: t0})
	// The next bucket still sees it as the previous one.
	r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: t0.Add(time.Second), Peek: true})
	if r.Allowed || r.Estimate != 4 {
		t.Errorf("next bucket: Allowed %v Estimate %d, want false 4", r.Allowed, r.Estimate)
	}
	// Two buckets later it no longer counts.
	r = Check(t, s, region.Request{Key: key, Limit: l, Hits: 4, Now: t0.Add(2 * time.Second)})
	if !r.Allowed || r.Estimate != 0 {
		t.Errorf("two buckets later: Allowed %v Estimate %d, want true 0", r.Allowed, r.Estimate)
	}
	for _, rc := range r.Regions {
		if rc.Previous != 0 {
			t.Errorf("two buckets later: region %q Previous = %d, want 0", rc.Region, rc.Previous)
		}
	}
}

func testBatchInOrder(t *testing.T, s region.Store, key string) {
	l := window.Limit{Limit: 3, Window: time.Minute}
	reqs := make([]region.Request, 5)
	for i := range reqs {
		reqs[i] = region.Request{Key: key, Limit: l, Hits: 1, Now: t0}
	}
	reqs[2] = region.Request{Key: key + "/other", Limit: l, Hits: 3, Now: t0}
	res := make([]region.Result, len(reqs))
	if err := s.Check(context.Background(), reqs, res); err != nil {
		t.Fatal(err)
	}
	want := []bool{true, true, true, true, false}
	for i := range res {
		if res[i].Allowed != want[i] {
			t.Errorf("request %d: Allowed = %v, want %v", i, res[i].Allowed, want[i])
		}
	}
	if got, want := res[3].Local, uint64(3); got != want {
		t.Errorf("request 3: Local = %d, want %d", got, want)
	}
}

func testAwkwardKeys(t *testing.T, s region.Store, key string) {
	keys := []string{"{", "}", "{}", "a}b", "a%7Db", "a%b", "a%25b", "a:b", "a:1:2", "ключ-🔑", "\x00\xff", strings.Repeat("k", 1024), strings.Repeat("}", 1024)}
	l := window.Limit{Limit: 2, Window: time.Minute}
	for i, k := range keys {
		k = key + k
		r := Check(t, s, region.Request{Key: k, Limit: l, Hits: 1, Now: t0})
		if !r.Allowed || r.Local != 1 {
			t.Errorf("key %d %q: first request Allowed %v Local %d, want true 1 (collides with an earlier key?)", i, k, r.Allowed, r.Local)
		}
		b := window.Bucket(window.Ms(t0), time.Minute)
		merge(t, s, region.Total{Key: k, Window: time.Minute, Bucket: b, Region: "far", Count: 1})
		if v := vector(t, s, k, time.Minute, b); len(v) != 2 || v[0].Key != k {
			t.Errorf("key %d %q: vector %+v, want far and here", i, k, v)
		}
		if r := Check(t, s, region.Request{Key: k, Limit: l, Hits: 1, Now: t0}); r.Allowed {
			t.Errorf("key %d %q: allowed over the limit", i, k)
		}
	}
}

// testBigNumbers checks decisions at the edges of exact arithmetic: limits
// near 2^53, windows of 7 days, remote counts whose sums pass 2^53, and hits
// that land exactly on the limit.
func testBigNumbers(t *testing.T, s region.Store, key string) {
	const w = 7 * 24 * time.Hour
	wMs := w.Milliseconds()
	rng := rand.New(rand.NewPCG(7, 53))
	b := window.Bucket(window.Ms(t0), w)
	for i := 0; i < 40; i++ {
		k := fmt.Sprintf("%s/%d", key, i)
		limit := uint64(window.MaxLimit) - rng.Uint64N(1000)
		if i%4 == 3 {
			limit = 1 + rng.Uint64N(window.MaxLimit)
		}
		l := window.Limit{Limit: limit, Window: w, Algorithm: window.SlidingWindowTwoBucket}
		var totals []region.Total
		var prev, cur uint64
		nRegions := 1 + rng.IntN(3)
		for r := 0; r < nRegions; r++ {
			p := rng.Uint64N(limit + 1)
			c := rng.Uint64N(limit/4 + 1)
			if i%5 == 0 {
				p = limit - rng.Uint64N(3) // sums over regions pass 2^53
			}
			prev += p
			cur += c
			reg := fmt.Sprintf("r%d", r)
			totals = append(totals,
				region.Total{Key: k, Window: w, Bucket: b - 1, Region: reg, Count: p},
				region.Total{Key: k, Window: w, Bucket: b, Region: reg, Count: c})
		}
		merge(t, s, totals...)
		for j := 0; j < 8; j++ {
			e := rng.Int64N(wMs)
			if j == 0 {
				e = 1
			} else if j == 1 {
				e = wMs - 1
			}
			nowMs := b*wMs + e
			now := time.UnixMilli(nowMs)
			c := window.Counts{Prev: prev, Cur: cur}
			est := l.Estimate(nowMs, c)
			hitsList := []uint64{1, limit}
			if est < limit {
				hitsList = append(hitsList, limit-est, limit-est+1)
			}
			for _, hits := range hitsList {
				if hits < 1 || hits > limit {
					continue
				}
				want := l.DecideCounter(nowMs, c, hits)
				r := Check(t, s, region.Request{Key: k, Limit: l, Hits: hits, Now: now, Peek: true})
				if r.Decision != want {
					t.Errorf("limit %d prev %d cur %d e %d hits %d:\n got  %+v\n want %+v", limit, prev, cur, e, hits, r.Decision, want)
				}
				if got := counts(r); got != c {
					t.Errorf("counts = %+v, want %+v", got, c)
				}
			}
		}
	}
}

func testConcurrent(t *testing.T, s region.Store, key string) {
	for i, l := range algorithms {
		a := l.Algorithm
		l.Limit, l.Window = 100, time.Minute
		k := fmt.Sprintf("%s/%s/%d", key, a, i)
		var allowed, errs atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reqs := []region.Request{{Key: k, Limit: l, Hits: 1, Now: t0.Add(time.Second)}}
				res := make([]region.Result, 1)
				for i := 0; i < 5; i++ {
					if err := s.Check(context.Background(), reqs, res); err != nil {
						errs.Add(1)
						return
					}
					if res[0].Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if errs.Load() != 0 {
			t.Fatalf("%v: %d goroutines failed", a, errs.Load())
		}
		if got, want := allowed.Load(), int64(100); got != want {
			t.Errorf("%v: 64 goroutines x 5 requests admitted %d, want exactly %d", a, got, want)
		}
	}
}
