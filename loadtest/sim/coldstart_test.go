package main

import (
	"testing"
	"time"
)

// TestColdStart: every region of a pool starts the same load on a key at
// once, none of them having decided it before, and the pool stays within
// the bound in every trailing window. A node whose share of the limit
// holds less than a hit asks in the stagger; asked against the limit less
// its base alone, it took hits of the other regions' pending shares that
// its store could not see yet: five regions of two nodes 30 ms apart,
// each at 3x a limit of 30 per 1 s, admitted 39 in a window.
func TestColdStart(t *testing.T) {
	t.Parallel()
	worst, bad, n := 0.0, 0, 0
	for _, regions := range []int{3, 5} {
		for _, nodes := range []int{1, 2, 3} {
			for _, d := range []time.Duration{30 * time.Millisecond, 60 * time.Millisecond, 100 * time.Millisecond} {
				for _, limit := range []uint64{30, 100} {
					for _, rate := range []float64{3, 10} {
						for seed := uint64(1); seed <= 3; seed++ {
							rates := make([]float64, regions)
							for i := range rates {
								rates[i] = rate
							}
							s := schedule{Seed: seed, Regions: regions, Nodes: nodes, Delay: d, Window: time.Second, Limit: limit, Strict: seed == 2, Windows: 2,
								Phases: []phase{{FromMs: 0, ToMs: 2000, Rate: rates, Burst: make([]bool, regions), Poisson: seed != 3}}}
							o := runSchedule(s)
							n++
							worst = max(worst, o.Worst)
							if o.Worst > 1 {
								bad++
								t.Errorf("%d regions x %d nodes, %v apart, %vx a limit of %d per 1s (arrivals %d): %d in a trailing window ending %d ms in, %.3f of the bound",
									regions, nodes, d, rate, limit, seed, o.Count, o.AtMs, o.Worst)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d runs: worst trailing window %.3f of the bound, %d over it", n, worst, bad)
}
