package main

import (
	"testing"
	"time"
)

// TestStaleHeadroom: three regions 100 ms apart, each offered three times
// a limit of 30 per 1 s, on both counters, over many arrival patterns,
// stay within the bound in every trailing window. A node whose horizon
// starts before its first store answer admits from the headroom the last
// answer read; that read lacked the others' admissions of the horizon
// before it (held pending then), and once they had arrived a fresh read
// would hold them but the stale one did not: every region's first
// request of a horizon took a hit of them, 32 in a window of 30.
func TestStaleHeadroom(t *testing.T) {
	t.Parallel()
	worst, bad := 0.0, 0
	for seed := uint64(1); seed <= 40; seed++ {
		for _, strict := range []bool{false, true} {
			for _, poisson := range []bool{false, true} {
				s := schedule{Seed: seed, Regions: 3, Nodes: 1, Delay: 100 * time.Millisecond, Window: time.Second, Limit: 30, Strict: strict, Windows: 6,
					Phases: []phase{{FromMs: 0, ToMs: 6000, Rate: []float64{3, 3, 3}, Burst: make([]bool, 3), Poisson: poisson}}}
				o := runSchedule(s)
				worst = max(worst, o.Worst)
				if o.Worst > 1 {
					bad++
					t.Errorf("arrivals %d, strict %v, Poisson %v: %d in a trailing window ending %d ms in, %.3f of the bound",
						seed, strict, poisson, o.Count, o.AtMs, o.Worst)
				}
			}
		}
	}
	t.Logf("160 runs: worst trailing window %.3f of the bound, %d over it", worst, bad)
}
