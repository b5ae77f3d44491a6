package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// TestJoinBurst: a node joins a region's one or two, and a burst of the
// limit comes in every region 50 ms later, before the region's other
// nodes can know of the new one. They split the region's quota among the
// nodes they know, each taking a whole part, so without a hold the new
// node's part came on top: up to 1.50 x the limit with one node joining
// one, 1.33 with one joining two. The new node's guard refuses while its join
// may be unknown (guard.JoinHold), and the pool keeps to max(1.05 L,
// L + 1).
func TestJoinBurst(t *testing.T) {
	t.Parallel()
	for _, nodes := range []int{1, 2} {
		for _, lim := range []uint64{10, 100, 1000} {
			t.Run(fmt.Sprintf("%d nodes, limit %d", nodes, lim), func(t *testing.T) {
				t.Parallel()
				cfg := config{Regions: 3, Nodes: nodes, Delay: 60 * time.Millisecond, Flush: 20 * time.Millisecond,
					Suspicion: 500 * time.Millisecond, Guard: true, Limit: window.Limit{Limit: lim, Window: 10 * time.Second}}
				w := newWorld(cfg, epoch)
				start := epoch + 1000
				w.members([]memberChange{{Region: 0}, {Region: 1}, {Region: 2}}, start)
				for i := range lim {
					for r := range 3 {
						w.request(r, start+50+int64(i)/50, "k")
					}
				}
				w.run(start + 3*cfg.Limit.WindowMs())
				st := w.stats(0)
				bound := max(1.05, float64(lim+1)/float64(lim))
				t.Logf("max %.3f of the limit (bound %.3f), %d admitted", st.Max, bound, st.Admitted)
				if st.Max > bound+1e-9 {
					t.Errorf("max %.3f of the limit in a trailing window, want <= %.3f", st.Max, bound)
				}
				if st.Admitted < int(lim)/2 {
					t.Errorf("admitted %d of a burst of 3 x %d, want at least half the limit", st.Admitted, lim)
				}
			})
		}
	}
}
