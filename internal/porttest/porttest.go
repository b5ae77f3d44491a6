// Package porttest finds loopback TCP ports for tests: a free one for a
// server the test starts, and an address nothing listens on, for a test of
// what a client does when its peer is down.
package porttest

import (
	"fmt"
	"net"
	"testing"
)

// Free returns a loopback TCP port that was free a moment ago.
func Free(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ClosedAddr returns a loopback host:port nothing listens on (a port that
// was free a moment ago).
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Free(tb))
}
