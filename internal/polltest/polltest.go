// Package polltest waits, in tests, for a condition that other goroutines
// make true: it polls every 10 ms up to a deadline. Inside a testing/synctest
// bubble its sleeps advance the bubble's fake clock, so the same helper
// serves real-time and deterministic tests.
package polltest

import (
	"testing"
	"time"
)

// Interval is how often Until and Poll test their condition.
const Interval = 10 * time.Millisecond

// Until polls cond until it holds and returns how long that took; after
// timeout it fails t, naming what it waited for.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	took, ok := Poll(timeout, cond)
	if !ok {
		t.Fatalf("timed out after %v waiting until %s", timeout, what)
	}
	return took
}

// Poll polls cond until it holds (ok) or timeout passes, and returns how
// long it polled: the form of Until for a test that carries on either way.
func Poll(timeout time.Duration, cond func() bool) (took time.Duration, ok bool) {
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			return time.Since(start), false
		}
		time.Sleep(Interval)
	}
	return time.Since(start), true
}
