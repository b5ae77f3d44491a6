package main

import (
	"testing"
	"time"
)

// TestRefillUnheard: a region that keeps its window full goes on
// refilling what slides out of it after a split, until it can tell that
// it is unheard (a quarter of the bucket on 1 s windows), and the other
// side's stores hold none of those hits. Charged only its share less what
// this side still held of it, one region cut off at 3x a limit of 300
// per 1 s while the other side started at 10x reached 474 in a window
// against a bound of 400: the other side now also charges it what left
// its window while it could not tell.
func TestRefillUnheard(t *testing.T) {
	t.Parallel()
	worst := 0.0
	for seed := uint64(1); seed <= 10; seed++ {
		for _, nodes := range []int{1, 3} {
			s := schedule{Seed: seed, Regions: 3, Nodes: nodes, Delay: 60 * time.Millisecond, Window: time.Second, Limit: 300, Windows: 6,
				Phases: []phase{
					{FromMs: 0, ToMs: 2576, Rate: []float64{0, 3, 0}, Burst: make([]bool, 3), Poisson: seed%2 == 0},
					{FromMs: 2576, ToMs: 3182, Rate: []float64{10, 0.5, 0}, Burst: make([]bool, 3), Poisson: seed%2 == 0},
					{FromMs: 3182, ToMs: 6000, Rate: []float64{0, 3, 0.1}, Burst: make([]bool, 3), Poisson: seed%2 == 0},
				},
				Faults: []fault{{FromMs: 2166, ToMs: 3233, Group: []int{0, 1, 0}}}}
			o := runSchedule(s)
			worst = max(worst, o.Worst)
			if o.Worst > 1 {
				t.Errorf("arrivals %d, %d nodes per region: %d in a trailing window ending %d ms in, %.3f of the bound (in the split: %v)",
					seed, nodes, o.Count, o.AtMs, o.Worst, o.InFault)
			}
		}
	}
	t.Logf("20 runs: worst trailing window %.3f of the bound", worst)
}
