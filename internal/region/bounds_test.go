package region_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// boundStores are the stores whose bounds on remote input are tested.
func boundStores(t *testing.T) map[string]func(t *testing.T) region.Store {
	srv := redistest.Start(t)
	return map[string]func(t *testing.T) region.Store{
		"memory": func(t *testing.T) region.Store { return region.NewMemory(region.MemoryConfig{Region: "here"}) },
		"redis":  func(t *testing.T) region.Store { return newRedisStore(t, srv.URL(), "here", region.Coalesce{}) },
		"denycache/memory": func(t *testing.T) region.Store {
			m := region.NewMemory(region.MemoryConfig{Region: "here"})
			return denyOverMemory{region.NewDenyCache(m, region.DenyCacheConfig{}), m}
		},
	}
}

// denyOverMemory is a deny cache with a handle on the memory store behind
// it, whose counters the tests read.
type denyOverMemory struct {
	*region.DenyCache
	m *region.Memory
}

// TestSumsSaturate: remote counts whose sum passes 2^64 deny; they do not
// wrap around to a small sum that admits.
func TestSumsSaturate(t *testing.T) {
	for name, mk := range boundStores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			l := window.Limit{Limit: 10, Window: time.Minute}
			now := time.UnixMilli(1_760_000_010_000)
			b := window.Bucket(window.Ms(now), l.Window)
			half := uint64(1) << 63
			if err := s.Merge(context.Background(), []region.Total{
				{Key: "sat", Window: l.Window, Bucket: b, Region: "a", Count: half},
				{Key: "sat", Window: l.Window, Bucket: b, Region: "b", Count: half},
				{Key: "sat", Window: l.Window, Bucket: b - 1, Region: "a", Count: half},
				{Key: "sat", Window: l.Window, Bucket: b - 1, Region: "b", Count: half + 5},
			}); err != nil {
				t.Fatal(err)
			}
			for range 2 { // twice: the deny cache answers the second
				if r := storetest.Check(t, s, region.Request{Key: "sat", Limit: l, Hits: 1, Now: now}); r.Allowed {
					t.Errorf("allowed with per-region counts %v, want denied (their sum saturates)", r.Regions)
				}
			}
		})
	}
}

// TestMergeBoundsRegions: made-up regions beyond MaxRegionsPerBucket are
// dropped and counted; the local region still counts.
func TestMergeBoundsRegions(t *testing.T) {
	const extra = 100
	for name, mk := range boundStores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			l := window.Limit{Limit: 1 << 40, Window: time.Minute}
			now := time.UnixMilli(1_760_000_010_000)
			b := window.Bucket(window.Ms(now), l.Window)
			totals := make([]region.Total, region.MaxRegionsPerBucket+extra)
			for i := range totals {
				totals[i] = region.Total{Key: "many", Window: l.Window, Bucket: b, Region: fmt.Sprintf("fake%05d", i), Count: 1}
			}
			if err := s.Merge(context.Background(), totals); err != nil {
				t.Fatal(err)
			}
			r := storetest.Check(t, s, region.Request{Key: "many", Limit: l, Hits: 1, Now: now})
			if got, want := len(r.Regions), region.MaxRegionsPerBucket+1; got != want {
				t.Errorf("regions in the decision = %d, want %d (the bound, plus the local region)", got, want)
			}
			if r.Local != 1 {
				t.Errorf("local count = %d, want 1: the local region counts in a full bucket", r.Local)
			}
			var dropped uint64
			switch s := s.(type) {
			case *region.Memory:
				dropped = s.Stats().RegionsDropped
			case *region.Redis:
				dropped = s.Stats().RegionsDropped
			case denyOverMemory:
				dropped = s.m.Stats().RegionsDropped
			}
			if dropped != extra {
				t.Errorf("RegionsDropped = %d, want %d", dropped, extra)
			}
		})
	}
}

// TestFullBucketKeepsLargest: zero counts take no slot in a bucket, and
// a bucket that made-up regions filled still takes a real region's larger
// count, in place of the smallest: its sum never drops a count that is
// larger than one it keeps.
func TestFullBucketKeepsLargest(t *testing.T) {
	for name, mk := range boundStores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			l := window.Limit{Limit: 1 << 40, Window: time.Minute}
			now := time.UnixMilli(1_760_000_010_000)
			b := window.Bucket(window.Ms(now), l.Window)
			fill := func(count uint64) {
				t.Helper()
				totals := make([]region.Total, region.MaxRegionsPerBucket)
				for i := range totals {
					totals[i] = region.Total{Key: "full", Window: l.Window, Bucket: b, Region: fmt.Sprintf("fake%05d", i), Count: count}
				}
				if err := s.Merge(context.Background(), totals); err != nil {
					t.Fatal(err)
				}
			}
			fill(0)
			if r := storetest.Check(t, s, region.Request{Key: "full", Limit: l, Hits: 1, Now: now}); len(r.Regions) != 1 {
				t.Fatalf("after %d zero counts the bucket holds %d regions, want the local one alone", region.MaxRegionsPerBucket, len(r.Regions))
			}
			fill(1)
			if err := s.Merge(context.Background(), []region.Total{
				{Key: "full", Window: l.Window, Bucket: b, Region: "real", Count: 50},
				{Key: "full", Window: l.Window, Bucket: b, Region: "late", Count: 1},
				{Key: "full", Window: l.Window, Bucket: b, Region: "zero", Count: 0},
			}); err != nil {
				t.Fatal(err)
			}
			r := storetest.Check(t, s, region.Request{Key: "full", Limit: l, Hits: 1, Now: now})
			counts := map[string]uint64{}
			var sum uint64
			for _, c := range r.Regions {
				counts[c.Region] = c.Current
				sum += c.Current
			}
			if counts["real"] != 50 {
				t.Errorf("real region's count = %d in a bucket full of made-up ones, want 50", counts["real"])
			}
			if _, ok := counts["late"]; ok {
				t.Errorf("a count no larger than every count kept took a slot")
			}
			if _, ok := counts["zero"]; ok {
				t.Errorf("a zero count took a slot")
			}
			// The local region took its slot with the first check's hit:
			// 255 made-up regions filled the bucket, and real replaced one.
			if got, want := len(r.Regions), region.MaxRegionsPerBucket; got != want {
				t.Errorf("regions in the decision = %d, want %d", got, want)
			}
			if got, want := sum, uint64(50+region.MaxRegionsPerBucket-2+2); got != want {
				t.Errorf("sum = %d, want %d (50, 254 made-up ones and the local 2)", got, want)
			}
		})
	}
}

// TestMemoryLogBytesBounded: sliding logs fill to MaxLogBytes and no
// further; least recently used keys go. Unbounded, the 6,000 calls of 100
// admitted requests below hold about 10 MB (600,000 entries of 16 bytes,
// plus slice growth). Each key's log holds at most 100 entries, so that a
// decision, which reads its whole log, stays cheap under -race.
func TestMemoryLogBytesBounded(t *testing.T) {
	const maxBytes = 1 << 20
	m := region.NewMemory(region.MemoryConfig{Region: "here", MaxLogBytes: maxBytes})
	l := window.Limit{Limit: 100, Window: time.Hour, Algorithm: window.SlidingLog}
	now := time.UnixMilli(1_760_000_010_000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	reqs := make([]region.Request, 100)
	res := make([]region.Result, len(reqs))
	for call := range 6000 {
		for i := range reqs {
			reqs[i] = region.Request{Key: fmt.Sprintf("log%d", call), Limit: l, Hits: 1, Now: now.Add(time.Duration(call) * time.Millisecond)}
		}
		if err := m.Check(context.Background(), reqs, res); err != nil {
			t.Fatal(err)
		}
		if !res[len(res)-1].Allowed {
			t.Fatalf("call %d: the 100th request to a fresh key was denied", call)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := m.Stats()
	if st.LogBytes > maxBytes || st.LogBytes <= 0 {
		t.Errorf("LogBytes = %d, want 1 to %d", st.LogBytes, maxBytes)
	}
	if st.Evictions == 0 {
		t.Errorf("Evictions = 0, want the least recently used logs evicted")
	}
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %d bytes; logs hold %d bytes in %d keys", grew, st.LogBytes, st.Keys)
	if grew > 4<<20 {
		t.Errorf("heap grew by %d bytes, want at most 4 MiB with MaxLogBytes %d", grew, maxBytes)
	}
}
