package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestStoresDecideAsSimulated plays the harness's arrivals through the
// real stores at their instants: the Redis store (its Lua script decides
// and updates the trails) and the in-memory store take exactly the
// decisions that the simulator's window math takes, in every mode a node
// runs, so the node figures on Redis and on memory measure the same
// counter.
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
	// 200 per 2 s keeps an exact trail, 6000 per 1 s a coarse one.
	for _, mode := range []string{modeDefault, modeTwoBucket} {
		cnt, err := newCounter(mode, 0, window.Limit{Limit: 200, Window: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		coarse, err := newCounter(mode, 0, window.Limit{Limit: 6000, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		cells := []cell{
			{cnt: cnt, shape: shapeEven, rate: 10, hits: 1, windows: 3, runs: []runSpec{{phase: 0.1, seed: 1}, {phase: 0.55, seed: 1}}},
			{cnt: cnt, shape: shapePoisson, rate: 2, hits: 3, windows: 3, runs: []runSpec{{phase: 0.3, seed: 2}}},
			{cnt: cnt, shape: shapeBunched, rate: 0.9, hits: 1, windows: 3, runs: []runSpec{{phase: 0.7, seed: 3}}},
			{cnt: cnt, shape: shapeOnOff, rate: 10, hits: 2, windows: 3, runs: []runSpec{{seed: 3}}},
			{cnt: coarse, shape: shapePoisson, rate: 2, hits: 20, windows: 3, runs: []runSpec{{phase: 0.4, seed: 4}}},
			{cnt: coarse, shape: shapeOnOff, rate: 10, hits: 50, windows: 3, runs: []runSpec{{seed: 5}}},
		}
		for i, cl := range cells {
			w := cl.cnt.limit.WindowMs()
			start := (1_700_000_000_000/w + 1) * w
			for j, r := range cl.runs {
				arr := cl.arrivals(r, start)
				want := simulate(cl.cnt, arr)
				for name, st := range stores {
					key := fmt.Sprintf("%s/%d/%d", mode, i, j)
					got := make([]decision, 0, len(arr))
					res := make([]region.Result, 1)
					for _, a := range arr {
						q := []region.Request{{Key: key, Limit: cl.cnt.limit, Hits: a.hits, Now: time.UnixMilli(a.at)}}
						if err := st.Check(context.Background(), q, res); err != nil {
							t.Fatalf("%s %s %s: %v", name, mode, cl.runName(r), err)
						}
						got = append(got, decision{a.at, a.hits, res[0].Allowed})
					}
					if !slices.Equal(got, want) {
						t.Errorf("%s, mode %s, %s %gx: decisions differ from the simulator's first at %d of %d", name, mode, cl.runName(r), cl.rate, firstDiff(got, want), len(want))
					}
				}
			}
		}
	}
	if n := rs.Mismatches(); n != 0 {
		t.Errorf("%d decisions of the Lua script disagreed with the Go math on the same state", n)
	}
}

// firstDiff returns the index of the first element where a and b differ.
func firstDiff[T comparable](a, b []T) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
