package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// cutSets are network faults other than one region cut off alone: a split
// into two groups of two, and single cut links, which leave a region that
// hears both sides.
var cutSets = []struct {
	name    string
	regions int
	cut     func(a, b int) bool
}{
	{"2|2 of 4", 4, func(a, b int) bool { return (a < 2) != (b < 2) }},
	{"1|3 of 4", 4, func(a, b int) bool { return (a == 0) != (b == 0) }},
	{"1|2 of 3", 3, func(a, b int) bool { return (a == 0) != (b == 0) }},
	{"link 0-2 of 3", 3, func(a, b int) bool { return (a == 0 && b == 2) || (a == 2 && b == 0) }},
	{"2|1|1 of 4", 4, func(a, b int) bool { return a != b && (a >= 2 || b >= 2) }},
}

// TestAnySplit: with every region offered 10x the limit's rate and the
// network cut as each fault says for two windows of 10 s, the pool admits
// at most (1 + 1/R) x the limit in any trailing window, during the fault
// and after it heals, whatever the shape of the split, and with a cut
// link that leaves one region hearing both sides.
func TestAnySplit(t *testing.T) {
	t.Parallel()
	for _, c := range cutSets {
		w := 10 * time.Second
		t.Run(fmt.Sprintf("%s/%v", c.name, w), func(t *testing.T) {
			t.Parallel()
			cfg := config{Regions: c.regions, Delay: 60 * time.Millisecond, Flush: 20 * time.Millisecond,
				Suspicion: 500 * time.Millisecond, Guard: true, Limit: window.Limit{Limit: 100, Window: w}}
			wd := newWorld(cfg, epoch)
			wm := w.Milliseconds()
			start := epoch + wm/7
			from, to := start+2*wm, start+4*wm
			wd.cfg.Cut = func(a, b int, now int64) bool { return now >= from && now < to && c.cut(a, b) }
			all := make([]int, c.regions)
			for i := range all {
				all[i] = i
			}
			steadyFrom := steady(10, 6, all...)(wd)
			st := wd.stats(steadyFrom)
			bound := 1 + 1/float64(c.regions)
			t.Logf("%s, %v: max %.3f (bound %.3f), steady min %.3f", c.name, w, st.Max, bound, st.SteadyMin)
			if st.Max > bound+1e-9 {
				t.Errorf("max %.3f of the limit in a trailing window, want <= %.3f", st.Max, bound)
			}
		})
	}
}
