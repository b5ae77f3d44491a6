package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

// TestStoresDecideAsSimulated plays the harness's patterns through the
// real stores at the patterns' instants: the Redis store (its Lua script
// decides and updates the halves) and the in-memory store admit exactly
// the requests that the simulator's window math admits, in every mode, so
// the node figures on Redis and on memory measure the same counter.
func TestStoresDecideAsSimulated(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := region.NewRedis(context.Background(), region.RedisConfig{URL: srv.URL(), Region: "here", Coalesce: region.Coalesce{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	stores := map[string]region.Store{
		"redis":  rs,
		"memory": region.NewMemory(region.MemoryConfig{Region: "here"}),
	}
	scs := []scenario{
		{name: "cold 10x @0.10", rate: 10, phase: 0.1, seed: 1},
		{name: "cold 10x @0.55", rate: 10, phase: 0.55, seed: 1},
		{name: "cold 2x poisson @0.30", rate: 2, poisson: true, phase: 0.3, seed: 2},
		{name: "on/off", rate: 10, onOff: true, seed: 3},
	}
	for _, mode := range []string{"default", "strict", "two-bucket"} {
		c := config{mode: mode, limit: 200, window: 2 * time.Second}
		s, err := c.counter()
		if err != nil {
			t.Fatal(err)
		}
		for i, sc := range scs {
			want, _ := simulate(s, sc, 3)
			w := s.limit.WindowMs()
			start := (1_700_000_000_000/w + 1) * w
			arr := sc.arrivals(s.limit, start, 3)
			for name, st := range stores {
				key := fmt.Sprintf("%s/%d", mode, i)
				var got []int64
				res := make([]region.Result, 1)
				for _, at := range arr {
					q := []region.Request{{Key: key, Limit: s.limit, Hits: 1, Now: time.UnixMilli(at)}}
					if err := st.Check(context.Background(), q, res); err != nil {
						t.Fatalf("%s %s %s: %v", name, mode, sc.name, err)
					}
					if res[0].Allowed {
						got = append(got, at)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s, mode %s, %s: admitted %d, the simulator %d (first difference at %d)", name, mode, sc.name, len(got), len(want), firstDiff(got, want))
				}
			}
		}
	}
	if n := rs.Mismatches(); n != 0 {
		t.Errorf("%d decisions of the Lua script disagreed with the Go math on the same state", n)
	}
}

// firstDiff returns the index of the first element where a and b differ.
func firstDiff(a, b []int64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
