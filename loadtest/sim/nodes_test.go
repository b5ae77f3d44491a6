package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// TestSeveralNodes: regions of two and three nodes, each node with a guard
// of its own and requests spread over them, sharing the region's store.
// Every region at 10x, or a simultaneous burst (on the fixed window too,
// whose bound is per bucket), admits at most 1.05 x the limit in any
// trailing window. A node must count its region's other
// nodes' admissions as fresh as its own: the others cannot have heard of
// them either, and a region that weighs them would take every other
// region for idle and the whole headroom for itself.
func TestSeveralNodes(t *testing.T) {
	t.Parallel()
	for _, nodes := range []int{2, 3} {
		for _, sc := range []scenario{
			{Name: "all 10x", Regions: 3, Delay: 60 * time.Millisecond, Window: time.Second, Limit: 30, run: steady(10, 5, 0, 1, 2)},
			{Name: "all 10x", Regions: 3, Delay: 60 * time.Millisecond, Window: 10 * time.Second, Limit: 100, run: steady(10, 5, 0, 1, 2)},
			{Name: "burst", Regions: 3, Delay: 60 * time.Millisecond, Window: 10 * time.Second, Limit: 100, run: burst},
			{Name: "fixed, burst", Regions: 3, Delay: 60 * time.Millisecond, Window: 10 * time.Second, Limit: 100, run: burst, Algorithm: window.FixedWindow},
		} {
			sc.Nodes = nodes
			t.Run(fmt.Sprintf("%s/%d nodes/%d per %v", sc.Name, nodes, sc.Limit, sc.Window), func(t *testing.T) {
				t.Parallel()
				r := runScenario(sc)
				t.Logf("max %.3f of the limit with the guard, %.3f without", r.On.Max, r.Off.Max)
				if r.On.Max > 1.05 {
					t.Errorf("max %.3f of the limit in a trailing window, want <= 1.05", r.On.Max)
				}
			})
		}
	}
}
