// Package looptest keeps load running in tests: n workers each call a
// function over and over until the test stops them, as a test of an outage
// or a restart needs while it breaks what the load goes to.
package looptest

import (
	"sync"
	"testing"
)

// Start starts n workers; worker w calls f(w, i) for i = 0, 1, 2, ... until
// stop is called. stop waits for each worker's current call to return; it
// may be called more than once, and t's cleanup calls it, so that no worker
// outlives a test that fails before it stops them.
func Start(t testing.TB, n int, f func(w, i int)) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				f(w, i)
			}
		})
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return stop
}
