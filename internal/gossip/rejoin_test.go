package gossip

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestSimBriefHealStaysSilent: ap and us, cut from each other past the
// suspicion timeout, hear each other again for an instant shorter than
// the rejoin hold, and are cut again. ap heard us within that instant but
// never after the hold, so us may never have re-sent the totals it
// admitted while silent: it stays silent in ap's view (charged), instead
// of turning alive when the hold ends and staying so, weighed by its
// counts from before the cut, until the suspicion timeout.
func TestSimBriefHealStaysSilent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, threeRegions, 1, 60*time.Millisecond)
		defer s.close()
		time.Sleep(time.Second) // let the start-up's rejoin sends pass
		ap := s.nodes["ap-0"]
		s.fn.Partition("ap", "us")
		time.Sleep(3 * time.Second) // past the suspicion timeout
		if v := ap.GuardView(time.Now()); slices.Contains(v.Alive, "us") {
			t.Fatalf("us alive in ap's view %v after 3 s cut off", v.Alive)
		}
		s.fn.Heal("ap", "us")
		time.Sleep(120 * time.Millisecond) // a heartbeat, less than the hold
		s.fn.Partition("ap", "us")
		heard := false
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			v := ap.GuardView(time.Now())
			if age, ok := v.Ages["us"]; ok && age < time.Second {
				heard = true
			}
			if slices.Contains(v.Alive, "us") {
				t.Fatalf("us alive in ap's view %v, heard %v ago, after a heal of 120 ms", v.Alive, v.Ages["us"])
			}
		}
		if !heard {
			t.Fatal("ap never heard us during the heal: the test shows nothing")
		}
	})
}
