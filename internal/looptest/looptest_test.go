package looptest_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/looptest"
	"github.com/rlcluster/rlcluster/internal/polltest"
)

// TestStart: every worker runs with its own index and counts its calls
// from 0, and no call starts after stop returns.
func TestStart(t *testing.T) {
	t.Parallel()
	const n = 3
	var calls [n]atomic.Int64
	stop := looptest.Start(t, n, func(w, i int) {
		if got, want := int64(i), calls[w].Add(1)-1; got != want {
			t.Errorf("worker %d: call i = %d, want %d", w, got, want)
		}
	})
	polltest.Until(t, 10*time.Second, "every worker to run 100 times", func() bool {
		for w := range n {
			if calls[w].Load() < 100 {
				return false
			}
		}
		return true
	})
	stop()
	var after [n]int64
	for w := range n {
		after[w] = calls[w].Load()
	}
	time.Sleep(20 * time.Millisecond)
	for w := range n {
		if got, want := calls[w].Load(), after[w]; got != want {
			t.Errorf("worker %d: %d calls after stop returned, want %d", w, got, want)
		}
	}
	stop() // a second stop is harmless
}
