// Package storetest is the contract test suite of [region.Store]: every
// implementation (in memory, Redis, Redis Cluster, and any wrapper such as
// a replicating store) must pass RunStoreTests. It also opens stacks for
// tests (Open) and gives a store that is down (Down).
package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
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

// localAndFar counts local hits at t0 under a two-bucket limit of 100 per
// minute and merges far hits from region "far" into the same bucket; it
// returns the window, the bucket and the limit.
func localAndFar(t *testing.T, s region.Store, key string, local, far uint64) (time.Duration, int64, window.Limit) {
	t.Helper()
	w := time.Minute
	b := window.Bucket(window.Ms(t0), w)
	l := window.Limit{Limit: 100, Window: w, Algorithm: window.SlidingWindowTwoBucket}
	Check(t, s, region.Request{Key: key, Limit: l, Hits: local, Now: t0})
	merge(t, s, region.Total{Key: key, Window: w, Bucket: b, Region: "far", Count: far})
	return w, b, l
}

func testMerge(t *testing.T, s region.Store, key string) {
	w, b, l := localAndFar(t, s, key, 2, 5)
	merge(t, s, region.Total{Key: key, Window: w, Bucket: b, Region: "far", Count: 3})   // stale: ignored
	merge(t, s, region.Total{Key: key, Window: w, Bucket: b, Region: "here", Count: 50}) // local: ignored
	want := []region.Total{
		{Key: key, Window: w, Bucket: b, Region: "far", Count: 5},
		{Key: key, Window: w, Bucket: b, Region: "here", Count: 2},
	}
	if got := vector(t, s, key, w, b); !reflect.DeepEqual(got, want) {
		t.Errorf("vector = %+v, want %+v", got, want)
	}
	merge(t, s, region.Total{Key: key, Window: w, Bucket: b, Region: "far", Count: 9})
	r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: t0})
	if got, want := r.Estimate, uint64(11); got != want {
		t.Errorf("Estimate after merge = %d, want %d", got, want)
	}
	if got, want := r.Local, uint64(3); got != want {
		t.Errorf("Local = %d, want %d (merges never touch the local count)", got, want)
	}
}

func testMergeOrderFree(t *testing.T, s region.Store, key string) {
	w := 10 * time.Second
	b := window.Bucket(window.Ms(t0), w)
	// The truth: each remote region's totals only grow; deliveries carry
	// snapshots of them, duplicated, reordered and partly lost.
	var deliveries []region.Total
	final := map[string]uint64{}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, reg := range []string{"r1", "r2", "r3"} {
		var n uint64
		for i := 0; i < 20; i++ {
			n += uint64(rng.IntN(5))
			for bb := b - 1; bb <= b; bb++ {
				deliveries = append(deliveries, region.Total{Key: key, Window: w, Bucket: bb, Region: reg, Count: n})
			}
		}
		final[reg] = n
	}
	var vectors [][]region.Total
	for run := 0; run < 3; run++ {
		k := fmt.Sprintf("%s/run%d", key, run)
		d := slices.Clone(deliveries)
		for i := range d {
			d[i].Key = k
		}
		rng.Shuffle(len(d), func(i, j int) { d[i], d[j] = d[j], d[i] })
		d = append(d, d[:len(d)/2]...) // duplicates
		// Batches of random sizes, each merged twice.
		for len(d) > 0 {
			n := min(len(d), 1+rng.IntN(17))
			merge(t, s, d[:n]...)
			merge(t, s, d[:n]...)
			d = d[n:]
		}
		// The final totals always arrive (reconciliation); earlier ones may not.
		for reg, n := range final {
			merge(t, s, region.Total{Key: k, Window: w, Bucket: b, Region: reg, Count: n},
				region.Total{Key: k, Window: w, Bucket: b - 1, Region: reg, Count: n})
		}
		v := vector(t, s, k, w, b)
		for i := range v {
			v[i].Key = key
			if got, want := v[i].Count, final[v[i].Region]; got != want {
				t.Errorf("run %d: region %s count = %d, want %d", run, v[i].Region, got, want)
			}
		}
		if len(v) != 3 {
			t.Errorf("run %d: vector has %d regions, want 3", run, len(v))
		}
		vectors = append(vectors, v)
	}
	for i := 1; i < len(vectors); i++ {
		if !reflect.DeepEqual(vectors[i], vectors[0]) {
			t.Errorf("run %d vector %+v differs from run 0 %+v", i, vectors[i], vectors[0])
		}
	}
}

func testRegions(t *testing.T, s region.Store, key string) {
	w := time.Minute
	b := window.Bucket(window.Ms(t0), w)
	l := window.Limit{Limit: 100, Window: w, Algorithm: window.SlidingWindowTwoBucket}
	merge(t, s,
		region.Total{Key: key, Window: w, Bucket: b, Region: "b-far", Count: 7},
		region.Total{Key: key, Window: w, Bucket: b - 1, Region: "b-far", Count: 20},
		region.Total{Key: key, Window: w, Bucket: b - 1, Region: "a-near", Count: 40},
	)
	now := t0.Add(30 * time.Second)
	r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 2, Now: now})
	want := []region.RegionCount{
		{Region: "a-near", Current: 0, Previous: 40},
		{Region: "b-far", Current: 7, Previous: 20},
		{Region: "here", Current: 2, Previous: 0},
	}
	if !reflect.DeepEqual(r.Regions, want) {
		t.Errorf("Regions = %+v, want %+v", r.Regions, want)
	}
	sameDecision(t, "with remote counts", r.Decision, l.DecideCounter(window.Ms(now), window.Counts{Prev: 60, Cur: 7}, 2))
	if got, want := r.Local, uint64(2); got != want {
		t.Errorf("Local = %d, want %d", got, want)
	}
	// A fresh key lists the local region alone.
	r = Check(t, s, region.Request{Key: key + "/fresh", Limit: l, Hits: 1, Now: now, Peek: true})
	if want := []region.RegionCount{{Region: "here"}}; !reflect.DeepEqual(r.Regions, want) {
		t.Errorf("fresh key Regions = %+v, want %+v", r.Regions, want)
	}
}

func testVectors(t *testing.T, s region.Store, key string) {
	w, b, _ := localAndFar(t, s, key, 4, 6)
	refs := []region.BucketRef{
		{Key: key, Window: w, Bucket: b},
		{Key: key, Window: w, Bucket: b - 1},
		{Key: key + "/none", Window: w, Bucket: b},
		{Key: key, Window: 2 * w, Bucket: b},
	}
	got, err := s.Vectors(context.Background(), refs)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]region.Total{
		{{Key: key, Window: w, Bucket: b, Region: "far", Count: 6}, {Key: key, Window: w, Bucket: b, Region: "here", Count: 4}},
		nil, nil, nil,
	}
	if len(got) != len(want) {
		t.Fatalf("Vectors returned %d vectors, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("vector %d = %+v, want %+v", i, got[i], want[i])
		}
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

// testTrails drives the default sliding window, exact and coarse, with
// local requests and remote regions' trails merged in, and checks every
// decision against window.Limit.DecideTrails on a model of the state: the
// store (the Redis script included) decides exactly as the pure math. Some
// limits are near 2^53 with 7-day windows, for the script's exact
// arithmetic.
func testTrails(t *testing.T, s region.Store, key string) {
	rng := rand.New(rand.NewPCG(3, 4))
	for run := range 8 {
		l := window.Limit{Limit: 50, Window: 10*time.Second + time.Duration(run)*time.Millisecond, Strict: run%2 == 1}
		big := run >= 6
		if big {
			l.Limit, l.Window = window.MaxLimit-uint64(rng.IntN(1000)), window.MaxWindow
		}
		k := fmt.Sprintf("%s/%d", key, run)
		wMs := l.WindowMs()
		regions := []string{"here", "r1", "r2"}
		state := map[int64][]window.Trail{} // bucket -> per region
		at := func(b int64) []window.Trail {
			if state[b] == nil {
				state[b] = make([]window.Trail, len(regions))
			}
			return state[b]
		}
		nowMs := window.Bucket(window.Ms(t0), l.Window)*wMs + rng.Int64N(wMs)
		for i := range 300 {
			nowMs += rng.Int64N(wMs / 20)
			b := window.Bucket(nowMs, l.Window)
			e := nowMs - b*wMs
			if r := 1 + rng.IntN(2); rng.IntN(3) == 0 {
				// A remote region's hits, reported.
				hits := 1 + rng.Uint64N(3)
				if big {
					hits = rng.Uint64N(l.Limit / 4)
				}
				if at(b)[r].Count()+hits > l.Limit {
					continue // a region admits at most the limit in a bucket
				}
				at(b)[r].Add(e, wMs, hits, false)
				h := at(b)[r]
				merge(t, s, region.Total{Key: k, Window: l.Window, Bucket: b, Region: regions[r], Count: h.Count(), Trail: h})
				continue
			}
			hits := 1 + rng.Uint64N(3)
			if big && i%5 == 0 {
				hits = rng.Uint64N(l.Limit/8) + 1
			}
			want := l.DecideTrails(nowMs, at(b-1), at(b), 0, hits)
			got := Check(t, s, region.Request{Key: k, Limit: l, Hits: hits, Now: time.UnixMilli(nowMs)})
			sameDecision(t, fmt.Sprintf("run %d step %d", run, i), got.Decision, want)
			if got.Allowed {
				at(b)[0].Add(e, wMs, hits, l.Exact())
			}
			if got.Decision != want {
				return
			}
		}
	}
}

// testTrailsMerge replicates trails: snapshots of remote regions' trails,
// duplicated, reordered and partly lost, merge to the latest ones, which
// Vectors returns (coarse) with the counts; the local region's trail comes
// from its decisions.
func testTrailsMerge(t *testing.T, s region.Store, key string) {
	w := 10 * time.Second
	wMs := w.Milliseconds()
	b := window.Bucket(window.Ms(t0), w)
	rng := rand.New(rand.NewPCG(5, 6))
	var deliveries []region.Total
	final := map[string]window.Trail{}
	for _, reg := range []string{"r1", "r2"} {
		var h window.Trail
		e := int64(0)
		for range 30 {
			e += rng.Int64N(wMs / 20)
			if e >= wMs {
				break
			}
			h.Add(e, wMs, 1+rng.Uint64N(4), false)
			deliveries = append(deliveries, region.Total{Key: key, Window: w, Bucket: b, Region: reg, Count: h.Count(), Trail: h})
		}
		final[reg] = h
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	deliveries = append(deliveries, deliveries[:len(deliveries)/2]...)
	for len(deliveries) > 0 {
		n := min(len(deliveries), 1+rng.IntN(7))
		merge(t, s, deliveries[:n]...)
		deliveries = deliveries[n:]
	}
	for reg, h := range final {
		merge(t, s, region.Total{Key: key, Window: w, Bucket: b, Region: reg, Count: h.Count(), Trail: h})
	}
	// Invalid trails are merged as counts alone.
	bad := window.Trail{{At: 7, Cum: 1}, {At: 3, Cum: 2}}
	merge(t, s, region.Total{Key: key, Window: w, Bucket: b, Region: "r3", Count: 2, Trail: bad})
	l := window.Limit{Limit: 1000, Window: w}
	var here window.Trail
	for _, e := range []int64{100, 200, 6000} {
		Check(t, s, region.Request{Key: key, Limit: l, Hits: 2, Now: time.UnixMilli(b*wMs + e)})
		here.Add(e, wMs, 2, false)
	}
	want := []region.Total{
		{Key: key, Window: w, Bucket: b, Region: "here", Count: 6, Trail: here},
		{Key: key, Window: w, Bucket: b, Region: "r1", Count: final["r1"].Count(), Trail: final["r1"]},
		{Key: key, Window: w, Bucket: b, Region: "r2", Count: final["r2"].Count(), Trail: final["r2"]},
		{Key: key, Window: w, Bucket: b, Region: "r3", Count: 2},
	}
	if got := vector(t, s, key, w, b); !reflect.DeepEqual(got, want) {
		t.Errorf("vector\n got  %+v\n want %+v", got, want)
	}
}
