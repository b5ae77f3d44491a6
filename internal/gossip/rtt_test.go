package gossip

import (
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
)

// TestRTTHigh: the horizon's one-way delay comes from the largest of a
// region's last rttSamples round trips, so that one fast ping does not
// shorten it, and a slow one stops counting once rttSamples newer ones
// have come.
func TestRTTHigh(t *testing.T) {
	var r *rtts
	if got := r.high(); got != 0 {
		t.Errorf("no samples: high = %v, want 0", got)
	}
	if got := oneWay(r); got != guard.JoinOneWay {
		t.Errorf("no samples: one-way %v, want the longest allowed for, %v", got, guard.JoinOneWay)
	}
	if got := oneWay(&rtts{}); got != guard.JoinOneWay {
		t.Errorf("no samples: one-way %v, want the longest allowed for, %v", got, guard.JoinOneWay)
	}
	r = &rtts{}
	r.add(120 * time.Millisecond)
	r.add(40 * time.Millisecond) // a fast ping
	if got := r.high(); got != 120*time.Millisecond {
		t.Errorf("after 120 ms and 40 ms: high = %v, want 120ms", got)
	}
	if got := oneWay(r); got != 60*time.Millisecond {
		t.Errorf("after 120 ms and 40 ms: one-way %v, want 60ms", got)
	}
	for range rttSamples - 1 {
		r.add(60 * time.Millisecond)
	}
	if got := r.high(); got != 60*time.Millisecond {
		t.Errorf("after %d newer samples of 60 ms: high = %v, want 60ms", rttSamples-1, got)
	}
}

// TestGuardViewUnmeasured: a region alive in the guard's view with no
// round trip measured to it yet counts in the horizon as the longest
// one-way delay allowed for, not as none; once a round trip is measured,
// as half of it.
func TestGuardViewUnmeasured(t *testing.T) {
	n := receiver(t, "b", nil)
	for _, r := range []string{"a", "c", "ap", "eu", "us"} {
		m := n.members[testSender(r).Node]
		// Heard for longer than the rejoin hold, within the suspicion
		// timeout each time.
		for _, ago := range []time.Duration{900, 450, 0} {
			n.heardFrom(m, t0.Add(-ago*time.Millisecond))
		}
	}
	base := n.cfg.FlushInterval + max(n.cfg.GuardMargin, 0)
	v := n.GuardView(t0)
	if len(v.Alive) != 6 {
		t.Fatalf("alive %v, want every region", v.Alive)
	}
	if want := base + guard.JoinOneWay; v.Horizon != want {
		t.Errorf("no round trip measured: horizon %v, want %v", v.Horizon, want)
	}
	for _, r := range []string{"a", "c", "ap", "eu", "us"} {
		n.noteRTT(r, 120*time.Millisecond)
	}
	if v, want := n.GuardView(t0), base+60*time.Millisecond; v.Horizon != want {
		t.Errorf("every region measured at 120 ms: horizon %v, want %v", v.Horizon, want)
	}
}
