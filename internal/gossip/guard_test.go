package gossip

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// guardHit decides one hit as the decision path does: the guard, the
// store against the limit the guard returns, the guard's record, and the
// replication of an admitted total.
func guardHit(tn *tnode, g *guard.Guard, key string, lim window.Limit) bool {
	now := tn.now()
	v := tn.node.GuardView(now)
	ok, sl, _ := g.Admit(now, key, lim.Limit, 1, &v)
	if !ok {
		return false
	}
	l := lim
	l.Limit = sl
	res := make([]region.Result, 1)
	if err := tn.store.Check(context.Background(), []region.Request{{Key: key, Limit: l, Hits: 1, Now: now}}, res); err != nil {
		return false
	}
	g.Done(now, key, lim.Limit, 1, &v, &res[0])
	if res[0].Allowed {
		tn.node.Dirty(region.Total{Key: key, Window: lim.Window, Bucket: res[0].Bucket, Count: res[0].Local})
	}
	return res[0].Allowed
}

// Three regions 60 ms apart (one-way) over real sockets: 100 requests
// released at the same instant in each region for a limit of 100 per 10 s
// admit at most 110 with the guard, and about 300 without.
func TestGuardBurst(t *testing.T) {
	fn := NewFaultNetwork(1)
	wan(fn, threeRegions, 60*time.Millisecond)
	h := newHarness(t, fn, threeRegions, 1)
	waitFor(t, 10*time.Second, "every region alive in every guard view with a measured delay", func() bool {
		for _, tn := range h.nodes {
			v := tn.node.GuardView(tn.now())
			if len(v.Alive) != 3 || v.Horizon < 80*time.Millisecond {
				return false
			}
		}
		return true
	})
	lim := window.Limit{Limit: 100, Window: 10 * time.Second}
	burst := func(key string, guarded bool) int64 {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, tn := range h.nodes {
			g := guard.New(guard.Config{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 100 {
					var ok bool
					if guarded {
						ok = guardHit(tn, g, key, lim)
					} else {
						ok, _ = h.hit(tn, key, lim)
					}
					if ok {
						admitted.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		return admitted.Load()
	}
	if got := burst("unguarded", false); got < 250 {
		t.Errorf("without the guard: %d admitted, want about 300 (the burst must beat replication)", got)
	}
	got := burst("guarded", true)
	if got > 110 || got < 90 {
		t.Errorf("with the guard: %d admitted, want 90 to 110", got)
	}
	t.Logf("burst of 3 x 100 against 100: %d admitted with the guard", got)
}
