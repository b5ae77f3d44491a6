package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// TestFallbackSmallLimits: a simultaneous burst in every region at a limit
// smaller than the pool, while all but one node of a region decide from
// their fallbacks, admits at most max(1.10 L, L + 1). The stagger took a
// region's nodes to share a store that sees each one's admissions at
// once; on fallbacks each node admitted on its own store, and a region of
// three took three hits of a limit of 1 (3.00 x the limit; 2.00 at a
// limit of 3 with four regions of three). Now a region with a node
// counting apart places each of its nodes in the stagger's rotation.
func TestFallbackSmallLimits(t *testing.T) {
	t.Parallel()
	for _, regions := range []int{3, 4} {
		for _, nodes := range []int{2, 3} {
			for _, lim := range []uint64{1, 2, 3} {
				t.Run(fmt.Sprintf("%d regions of %d nodes, limit %d", regions, nodes, lim), func(t *testing.T) {
					t.Parallel()
					worst := 0.0
					for fbr := range regions {
						for off := int64(100); off < 1000; off += 300 {
							cfg := config{Regions: regions, Nodes: nodes, Delay: 60 * time.Millisecond, Flush: 20 * time.Millisecond,
								Suspicion: 500 * time.Millisecond, Guard: true, Limit: window.Limit{Limit: lim, Window: time.Minute}}
							w := newWorld(cfg, epoch)
							var fs []fallback
							for k := range nodes - 1 {
								fs = append(fs, fallback{Region: fbr, Node: k, FromMs: 19000, ToMs: 40000})
							}
							w.fallbacks(fs, epoch)
							at := epoch + 20000 + off
							for i := range lim * uint64(nodes) {
								for r := range regions {
									w.request(r, at+int64(i)/50, "k")
								}
							}
							w.run(at + 3*cfg.Limit.WindowMs())
							worst = max(worst, w.stats(0).Max)
						}
					}
					bound := max(1.10, float64(lim+1)/float64(lim))
					t.Logf("worst %.3f of the limit over every region on fallbacks and burst phase (bound %.3f)", worst, bound)
					if worst > bound+1e-9 {
						t.Errorf("worst %.3f of the limit in a trailing window, want <= %.3f", worst, bound)
					}
				})
			}
		}
	}
}
