package gossip

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

var threeRegions = []string{"ap", "eu", "us"}

// wan sets 60 ms one-way latency between every pair of regions.
func wan(fn *FaultNetwork, regions []string, oneWay time.Duration) {
	for i, a := range regions {
		for _, b := range regions[i+1:] {
			fn.SetLatency(a, b, oneWay)
		}
	}
}

// transitAllowance is what a reconciliation needs on top of "one bucket
// plus one flush" to travel: a TCP dial and a write through the fault
// network (three one-way latencies) plus the merge, with slack for -race.
func transitAllowance(oneWay time.Duration) time.Duration { return 3*oneWay + 250*time.Millisecond }

// load drives hits through the live nodes of h until stop is closed: each
// worker picks a node of its region and a key, at the given interval.
type loadStats struct{ offered, admitted, errors atomic.Int64 }

func (h *harness) load(stop <-chan struct{}, wg *sync.WaitGroup, st *loadStats, regionName string, every time.Duration,
	keys []string, lim window.Limit, seed uint64) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1))
		var mine []*tnode
		for _, tn := range h.nodes {
			if tn.region == regionName {
				mine = append(mine, tn)
			}
		}
		tk := time.NewTicker(every)
		defer tk.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			tn := mine[i%len(mine)]
			if tn.dead {
				tn = mine[(i+1)%len(mine)]
			}
			st.offered.Add(1)
			ok, err := h.hit(tn, keys[rng.IntN(len(keys))], lim)
			if err != nil {
				st.errors.Add(1)
			} else if ok {
				st.admitted.Add(1)
			}
		}
	}()
}

// TestConvergence: three regions of two nodes with 60 ms one-way latency, 5%
// loss, 5% duplication and reordering; after traffic stops, every region's
// vector for every closed bucket is identical (and equals what each region's
// store acknowledged) within one bucket plus one flush (plus transit).
func TestConvergence(t *testing.T) {
	const oneWay = 60 * time.Millisecond
	fn := NewFaultNetwork(1)
	wan(fn, threeRegions, oneWay)
	fn.SetLoss(0.05)
	fn.SetDuplicate(0.05)
	fn.SetReorder(0.2, 30*time.Millisecond)
	h := newHarness(t, fn, threeRegions, 2)

	lim := window.Limit{Limit: 1 << 40, Window: time.Second}
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprintf("tenant-%02d", i))
	}
	bytes0, wire0 := h.sentBytes(), h.wireBytes()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var st loadStats
	for i, r := range threeRegions {
		h.load(stop, &wg, &st, r, 2*time.Millisecond, keys, lim, uint64(i))
	}
	const run = 2500 * time.Millisecond
	time.Sleep(run) // traffic duration, not settling
	close(stop)
	wg.Wait()
	stopped := time.Now()
	bytesRun, wireRun := h.sentBytes()-bytes0, h.wireBytes()-wire0

	want := h.truthVecs(h.held())
	var last string
	took := waitFor(t, 10*time.Second, "all regions agree", func() bool {
		ok, why := h.agree(want)
		if why != last {
			t.Logf("%v: %s", time.Since(stopped).Round(time.Millisecond), why)
		}
		last = why
		return ok
	})
	bound := lim.Window + 20*time.Millisecond + transitAllowance(oneWay)
	t.Logf("convergence: %d hits (%d errors) on %d keys over %v in %d buckets; all regions identical %v after traffic stopped (bound: one bucket + one flush + transit = %v)",
		st.admitted.Load(), st.errors.Load(), len(keys), run, len(want), took.Round(time.Millisecond), bound)
	if took > bound {
		t.Errorf("converged after %v, want <= %v", took, bound)
	}
	perKey := bytesRun / float64(len(keys)) / run.Seconds()
	t.Logf("bandwidth: %.0f replication payload bytes per active key per second (all 6 nodes, flush every 20 ms, %d keys all active); %.0f bytes/key/s on the inter-region wire incl. memberlist",
		perKey, len(keys), float64(wireRun)/float64(len(keys))/run.Seconds())
	if st.errors.Load() != 0 {
		t.Errorf("%d Check errors", st.errors.Load())
	}
	_ = stopped
	_ = context.Background
	_ = region.Total{}
}
