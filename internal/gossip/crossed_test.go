package gossip

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestSimCutLink: ap and us cannot reach each other while eu hears both,
// for 15 s, with every region at ten times a limit of 1000 per 10 s
// between them. Each of ap and us takes eu for alive and the other for
// silent, so each would admit the limit less the other's share alone
// (1.122 x the limit here, and up to 2 x in other runs). Each tells the
// others which region it does not hear (KindUnheard), so every view is
// crossed and every region keeps to its share: the pool admits at most
// 1.05 x the limit in any trailing window, within the bound without a
// fault, and each region's view is crossed within the suspicion timeout
// and a few heartbeats of the cut.
func TestSimCutLink(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, threeRegions, 1, 60*time.Millisecond)
		defer s.close()
		time.Sleep(time.Second) // let the start-up's rejoin sends pass
		lim := window.Limit{Limit: 1000, Window: 10 * time.Second}
		guards := map[string]*guard.Guard{}
		for _, r := range threeRegions {
			guards[r] = guard.New(guard.Config{})
		}
		var at []time.Time
		var cutAt, healAt time.Time
		crossed := map[string]time.Duration{}
		start := time.Now()
		for i := 0; time.Since(start) < 22*time.Second; i++ {
			el := time.Since(start)
			if cutAt.IsZero() && el >= 2*time.Second {
				s.fn.Partition("ap", "us")
				cutAt = time.Now()
			}
			if healAt.IsZero() && el >= 17*time.Second {
				s.fn.Heal("ap", "us")
				healAt = time.Now()
			}
			r := threeRegions[i%3]
			n := s.nodes[r+"-0"]
			if !cutAt.IsZero() && healAt.IsZero() {
				if _, ok := crossed[r]; !ok {
					if v := n.GuardView(time.Now()); v.Crossed() {
						crossed[r] = time.Since(cutAt)
					}
				}
			}
			if s.simGuardHit(n, guards[r], "k", lim) {
				at = append(at, time.Now())
			}
			time.Sleep(time.Millisecond) // 1000 a second: 10x the limit's rate
		}
		got := maxTrailing(at, at, lim.Window, time.Time{})
		bound := lim.Limit + lim.Limit/20
		t.Logf("cut link ap-us for 15 s: %d in the worst trailing window (bound %d, limit %d); crossed after %v", got, bound, lim.Limit, crossed)
		if got > int(bound) {
			t.Errorf("%d admitted in a trailing window of %v, want at most 1.05 x %d = %d", got, lim.Window, lim.Limit, bound)
		}
		for _, r := range threeRegions {
			d, ok := crossed[r]
			if !ok || d > 2*time.Second {
				t.Errorf("%s: view crossed after %v (seen: %v), want within 2 s of the cut", r, d, ok)
			}
		}
	})
}
