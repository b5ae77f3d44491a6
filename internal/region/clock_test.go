package region_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestRedisServerClock: with ServerClock, nodes whose clocks are skewed
// by less than a window count in the bucket of Redis's TIME, all in one
// hash; a clock off by more than a window falls back to its own instant;
// without ServerClock the request's instant decides, as before.
func TestRedisServerClock(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	open := func(server bool) *region.Redis {
		s, err := region.NewRedis(ctx, region.RedisConfig{URL: srv.URL(), Region: "eu", ServerClock: server,
			Coalesce: region.Coalesce{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	shared, own := open(true), open(false)
	w := 10 * time.Second
	lim := window.Limit{Limit: 1000, Window: w}
	redisBucket := func() int64 {
		tm, err := shared.Client().Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return window.Bucket(tm.UnixMilli(), w)
	}
	// Retry a round that straddles a bucket boundary of Redis's clock.
	for try := 0; ; try++ {
		before := redisBucket()
		var got []int64
		for _, skew := range []time.Duration{-4 * time.Second, 0, 4 * time.Second, 9 * time.Second} {
			r, err := check(t, shared, region.Request{Key: "sk", Limit: lim, Hits: 1, Now: time.Now().Add(skew)})
			if err != nil || !r.Allowed {
				t.Fatalf("Check(skew %v) = %+v, %v", skew, r.Decision, err)
			}
			got = append(got, r.Bucket)
		}
		if after := redisBucket(); after != before {
			if try < 5 {
				continue
			}
			t.Fatalf("Redis's bucket kept moving")
		}
		for i, b := range got {
			if b != before {
				t.Errorf("decision %d: bucket %d, want Redis's %d", i, b, before)
			}
		}
		if n := bucketCount(t, shared, "sk", w, before); n < uint64(len(got)) {
			t.Errorf("Redis's bucket %d holds %d, want at least %d (one hash for every skewed node)", before, n, len(got))
		}
		break
	}
	// One call of several decisions (the batch script): every decision
	// in Redis's bucket, and at the one instant of the call's single TIME.
	for try := 0; ; try++ {
		before := redisBucket()
		skews := []time.Duration{-4 * time.Second, 0, 4 * time.Second, 9 * time.Second}
		reqs := make([]region.Request, len(skews))
		for i, skew := range skews {
			reqs[i] = region.Request{Key: fmt.Sprintf("batch%d", i), Limit: lim, Hits: 1, Now: time.Now().Add(skew)}
		}
		res := make([]region.Result, len(reqs))
		if err := shared.Check(ctx, reqs, res); err != nil {
			t.Fatalf("Check(%d requests) error = %v", len(reqs), err)
		}
		if after := redisBucket(); after != before {
			if try < 5 {
				continue
			}
			t.Fatalf("Redis's bucket kept moving")
		}
		for i, r := range res {
			if !r.Allowed || r.Bucket != before {
				t.Errorf("batch decision %d: allowed %v, bucket %d; want allowed in Redis's %d", i, r.Allowed, r.Bucket, before)
			}
			if got, want := r.ElapsedMs, res[0].ElapsedMs; got != want {
				t.Errorf("batch decision %d: elapsed %d ms, want %d (one TIME per call)", i, got, want)
			}
		}
		break
	}
	// Off by more than a window: the node's own instant.
	far := time.Now().Add(5 * w)
	if r, err := check(t, shared, region.Request{Key: "far", Limit: lim, Hits: 1, Now: far}); err != nil || r.Bucket != window.Bucket(far.UnixMilli(), w) {
		t.Errorf("Check 5 windows ahead: bucket %d, %v; want the node's own %d", r.Bucket, err, window.Bucket(far.UnixMilli(), w))
	}
	// Without ServerClock: the request's instant, a fixed one.
	if r, err := check(t, own, region.Request{Key: "fixed", Limit: lim, Hits: 1, Now: t0}); err != nil || r.Bucket != window.Bucket(t0.UnixMilli(), w) {
		t.Errorf("Check at t0 without ServerClock: bucket %d, %v; want %d", r.Bucket, err, window.Bucket(t0.UnixMilli(), w))
	}
}

func bucketCount(t *testing.T, s region.Store, key string, w time.Duration, b int64) uint64 {
	t.Helper()
	vs, err := s.Vectors(context.Background(), []region.BucketRef{{Key: key, Window: w, Bucket: b}})
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, tt := range vs[0] {
		n += tt.Count
	}
	return n
}

// TestRedisEpochAndRestore: the epoch marker is created once and read
// back; after a restart without data it is new again; Restore merges the
// store's own region's total (by max), which Merge ignores.
func TestRedisEpochAndRestore(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s, err := region.NewRedis(ctx, region.RedisConfig{URL: srv.URL(), Region: "eu"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e1, fresh, err := s.Epoch(ctx)
	if err != nil || !fresh || e1 == "" {
		t.Fatalf("first Epoch = %q, %v, %v; want a new marker", e1, fresh, err)
	}
	if e, fresh, err := s.Epoch(ctx); err != nil || fresh || e != e1 {
		t.Fatalf("second Epoch = %q, %v, %v; want %q, not fresh", e, fresh, err, e1)
	}
	srv.Restart(t)
	var e2 string
	for range 50 { // the pool's old connections fail once
		if e2, fresh, err = s.Epoch(ctx); err == nil {
			break
		}
	}
	if err != nil || !fresh || e2 == e1 {
		t.Fatalf("Epoch after a restart = %q, %v, %v; want a new marker", e2, fresh, err)
	}
	w := time.Minute
	b := window.Bucket(window.Ms(t0), w)
	own := []region.Total{{Key: "k", Window: w, Bucket: b, Region: "eu", Count: 5}}
	if err := s.Merge(ctx, own); err != nil {
		t.Fatal(err)
	}
	if n := bucketCount(t, s, "k", w, b); n != 0 {
		t.Errorf("Merge of the own region's total: holds %d, want 0 (ignored)", n)
	}
	for _, c := range []uint64{5, 3} {
		if err := s.Restore(ctx, []region.Total{{Key: "k", Window: w, Bucket: b, Region: "eu", Count: c}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := bucketCount(t, s, "k", w, b); n != 5 {
		t.Errorf("after Restore of 5 then 3: holds %d, want 5 (max)", n)
	}
}
