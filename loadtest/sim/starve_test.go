package main

import (
	"fmt"
	"testing"
	"time"
)

// TestNoneStarved: three regions 60 ms apart offered 10x a limit of tens
// evenly, a third each, for 12 windows. Shares that weighed only what
// each region admitted left a region that fell behind (or started later)
// its floor share, which holds less than a hit at such limits, while the
// others kept the window full: 94, 0 and 0 admitted at 10 per 1 s with
// a 300 ms head start, 74, 216 and 1 at 30 per 10 s, 919, 20 and 35 at
// 100 per 10 s on three nodes a region. Weighing what each region was
// refused too (its demand) gives every region at least half of an even
// third, from the third window on.
func TestNoneStarved(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		limit  uint64
		window time.Duration
		lead   time.Duration
		nodes  int
	}{
		{10, time.Second, 0, 1},
		{10, time.Second, 300 * time.Millisecond, 1},
		{30, 10 * time.Second, 0, 1},
		{100, 10 * time.Second, 0, 3},
	} {
		t.Run(fmt.Sprintf("%d per %v, lead %v, %d nodes", c.limit, c.window, c.lead, c.nodes), func(t *testing.T) {
			t.Parallel()
			sc := evenScenario(60*time.Millisecond, c.limit)
			sc.Window, sc.Nodes = c.window, c.nodes
			sc.run = steadyLead(10, 12, c.lead, 0, 1, 2)
			_, st := runWorld(sc, true)
			var sum int
			for _, n := range st.PerRegion {
				sum += n
			}
			t.Logf("per region %v; trailing window at admissions: median %.3f, max %.3f", st.PerRegion, st.Median, st.Max)
			for r, n := range st.PerRegion {
				if 6*n < sum {
					t.Errorf("region %d admitted %d of %d (per region %v), want at least half of a third", r, n, sum, st.PerRegion)
				}
			}
			if st.Max > 1.05 {
				t.Errorf("trailing window at admissions reached %.3f of the limit, want at most 1.05", st.Max)
			}
		})
	}
}
