package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

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
