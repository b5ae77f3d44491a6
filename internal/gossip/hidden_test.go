package gossip

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// simGuardHit decides hits of key on node n at the bubble's now as the
// decision path does: the guard, the store against the limit the guard
// returns, the guard's record, and the replication of an admitted total.
func (s *sim) simGuardHit(n *Node, g *guard.Guard, key string, lim window.Limit) bool {
	s.t.Helper()
	now := time.Now()
	v := n.GuardView(now)
	ok, sl, _ := g.Admit(now, key, lim, 1, &v)
	if !ok {
		return false
	}
	l := lim
	l.Limit = sl
	res := make([]region.Result, 1)
	if err := s.stores[n.Region()].Check(context.Background(), []region.Request{{Key: key, Limit: l, Hits: 1, Now: now}}, res); err != nil {
		s.t.Fatal(err)
	}
	g.Done(now, key, lim, 1, &v, &res[0])
	if res[0].Allowed {
		n.Dirty(region.Total{Key: key, Window: lim.Window, Bucket: res[0].Bucket, Count: res[0].Local, Trail: res[0].LocalTrail,
			Limit: lim.Limit, Estimate: res[0].Estimate + 1})
	}
	return res[0].Allowed
}

// largestHidden is the most hits one replica can admit in one decision
// and still hold unsent: the largest h with h below its own allowance.
func largestHidden(limit uint64, replicas int) uint64 {
	var best uint64
	for h := uint64(1); h <= limit; h++ {
		if h < allowance(limit, h, replicas) {
			best = h
		}
	}
	return best
}

// TestSimHiddenByUrgency: every region admits the most hits it may hold
// unsent for a key and goes quiet; then one region bursts at ten times
// the limit's rate. It cannot see the others' hits, so its guard sees
// them idle, and it may take what they hold on top of the limit. The
// urgency allowance's global budget bounds that: the pool admits at most
// 1.05 x the limit in any trailing window. On the bubble's exact clock,
// three regions 60 ms apart, a limit of 1000 per 1 s.
func TestSimHiddenByUrgency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, threeRegions, 1, 60*time.Millisecond)
		defer s.close()
		time.Sleep(time.Second) // let the start-up's rejoin sends pass
		lim := window.Limit{Limit: 1000, Window: time.Second}
		// Start just after a bucket boundary, so the whole test fits two
		// buckets' windows.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
		hidden := largestHidden(lim.Limit, 3)
		var at []time.Time
		for _, r := range []string{"ap", "us", "eu"} {
			s.hitN(s.nodes[r+"-0"], "k", lim, hidden)
			for range hidden {
				at = append(at, time.Now())
			}
		}
		time.Sleep(200 * time.Millisecond) // quiet
		eu := s.nodes["eu-0"]
		g := guard.New(guard.Config{})
		end := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(end) {
			if s.simGuardHit(eu, g, "k", lim) {
				at = append(at, time.Now())
			}
			time.Sleep(100 * time.Microsecond) // 10x the limit's rate
		}
		got := maxTrailing(at, at, lim.Window, time.Time{})
		t.Logf("%d hits held unsent per region, then a burst in eu: %d in the worst trailing window, limit %d", hidden, got, lim.Limit)
		if float64(got) > 1.05*float64(lim.Limit) {
			t.Errorf("%d admitted in a trailing window of %v, want at most 1.05 x %d", got, lim.Window, lim.Limit)
		}
	})
}
