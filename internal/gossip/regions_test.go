package gossip

import (
	"context"
	"testing"
	"time"
)

// TestRegions: a node counts the distinct regions of the members that have
// not left, its own included; a failed member still counts.
func TestRegions(t *testing.T) {
	a := startNode(t, "a1", "eu", nil)
	if got, want := a.Regions(), 1; got != want {
		t.Errorf("alone: Regions() = %d, want %d", got, want)
	}
	b := startNode(t, "b1", "us", nil, a.Addr())
	startNode(t, "c2", "eu", nil, a.Addr())
	startNode(t, "d3", "ap", nil, a.Addr())
	waitFor(t, 10*time.Second, "four members", func() bool { return len(a.Members()) == 4 })
	if got, want := a.Regions(), 3; got != want {
		t.Errorf("eu, us, eu, ap: Regions() = %d, want %d", got, want)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	state := waitGone(t, a, "b1")
	// A leave that reaches a before its metadata update is recorded as a
	// failure (see TestJoinRetriesAndCloseLeaves): a failed region counts.
	if got, want := a.Regions(), map[string]int{"left": 2, "dead": 3}[state]; got != want {
		t.Errorf("after b (us) %s: Regions() = %d, want %d", state, got, want)
	}
}
