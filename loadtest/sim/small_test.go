package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// TestSmallLimits: a simultaneous burst in every region, at limits smaller
// than the number of regions (a login's 3 or 5 per minute), admits at
// most max(1.10 x the limit, the limit + 1) in any trailing window: a
// region's share of such a limit holds no whole hit, so the regions take
// turns at probing the full limit instead of each taking one. And it
// admits the whole limit: the burst comes 300 ms into a stagger slot,
// when every region has been heard since the slot began (a burst at a
// slot's first instant is refused until then, and this one is not
// retried).
func TestSmallLimits(t *testing.T) {
	t.Parallel()
	for _, regions := range []int{3, 10} {
		for _, lim := range []uint64{1, 2, 3, 5} {
			t.Run(fmt.Sprintf("%d regions, limit %d", regions, lim), func(t *testing.T) {
				t.Parallel()
				cfg := config{Regions: regions, Delay: 60 * time.Millisecond, Flush: 20 * time.Millisecond,
					Suspicion: 500 * time.Millisecond, Guard: true, Limit: window.Limit{Limit: lim, Window: time.Minute}}
				w := newWorld(cfg, epoch)
				at := epoch + cfg.Limit.WindowMs()/3 + 300
				for i := range lim {
					for r := range regions {
						w.request(r, at+int64(i)/50, "k")
					}
				}
				w.run(at + 3*cfg.Limit.WindowMs())
				st := w.stats(0)
				bound := max(1.10, float64(lim+1)/float64(lim))
				t.Logf("max %.3f of the limit (bound %.3f), %d admitted", st.Max, bound, st.Admitted)
				if st.Max > bound+1e-9 {
					t.Errorf("max %.3f of the limit in a trailing window, want <= %.3f", st.Max, bound)
				}
				if st.Admitted < int(lim) {
					t.Errorf("admitted %d of a burst of %d x %d, want at least the limit", st.Admitted, regions, lim)
				}
			})
		}
	}
}

// TestLateBurst: two regions that never saw the key burst at the same
// instant into a window that other regions have nearly filled. A node
// has no answer for the key yet, so its quota is a share of the limit,
// not of the headroom: its first request must be a probe that the store
// admits only within its share of the headroom it reads. Otherwise each
// node takes a hit of the little that is left (12 of 10 here, two
// regions of two nodes), and at most max(1.05 x the limit, the limit +
// 1) in any trailing window.
func TestLateBurst(t *testing.T) {
	t.Parallel()
	for _, lim := range []uint64{10, 30, 100} {
		t.Run(fmt.Sprint(lim), func(t *testing.T) {
			t.Parallel()
			cfg := config{Regions: 4, Nodes: 2, Delay: 100 * time.Millisecond, Flush: 20 * time.Millisecond,
				Suspicion: 500 * time.Millisecond, Guard: true, Limit: window.Limit{Limit: lim, Window: 10 * time.Second}}
			w := newWorld(cfg, epoch)
			start := epoch + 1000
			for i := range lim - 2 {
				w.request(0, start+int64(i)*100, "k")
			}
			late := start + 5000
			for i := range lim {
				for _, r := range []int{2, 3} {
					w.request(r, late+int64(i)/50, "k")
				}
			}
			w.run(late + 3*cfg.Limit.WindowMs())
			st := w.stats(0)
			bound := max(1.05, float64(lim+1)/float64(lim))
			t.Logf("max %.3f of the limit (bound %.3f)", st.Max, bound)
			if st.Max > bound+1e-9 {
				t.Errorf("max %.3f of the limit in a trailing window, want <= %.3f", st.Max, bound)
			}
		})
	}
}
