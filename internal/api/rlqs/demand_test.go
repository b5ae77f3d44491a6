package rlqs

import (
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// TestRefusalsCapped: the refusals a node tells the guard of a key are
// at most ten times the limit's capacity a bucket, whatever its clients
// report,
// and the count starts again with the next bucket; a key no stream holds
// tells nothing.
func TestRefusalsCapped(t *testing.T) {
	d := newDemands()
	lim := window.Limit{Limit: 100, Window: 10 * time.Second}
	at := time.UnixMilli(1_000_000_000_000) // a bucket's start
	if got := d.refusals("k", lim, at, 50); got != 0 {
		t.Errorf("a key no stream holds: %d told, want 0", got)
	}
	d.set("k", false, 0, 1)
	for _, tc := range []struct {
		after        time.Duration
		denied, want uint64
	}{
		{0, 800, 800},
		{time.Second, 500, 200},
		{2 * time.Second, 1 << 40, 0},
		{lim.Window, 30, 30}, // the next bucket
	} {
		if got := d.refusals("k", lim, at.Add(tc.after), tc.denied); got != tc.want {
			t.Errorf("%v in: %d denied told as %d, want %d", tc.after, tc.denied, got, tc.want)
		}
	}
}
