// Package porttest finds loopback TCP ports for tests: a free one for a
// server the test starts, and an address nothing listens on, for a test of
// what a client does when its peer is down.
package porttest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
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

// Steady returns a loopback TCP port that was free a moment ago and lies
// below the kernel's ephemeral range, for a server a test stops and starts
// again on the same port: while it is down, a port of the ephemeral range
// can be taken by any socket's own end (a client's, even one connecting to
// that very port, which then connects to itself) or by a listener on port
// 0, and the server cannot come back. Where the range cannot be read or
// leaves no room below it, it returns [Free]'s.
func Steady(tb testing.TB) int {
	tb.Helper()
	lo := ephemeralLow()
	const from = 10000
	if lo < from+1000 {
		return Free(tb)
	}
	for range 100 {
		port := from + rand.IntN(lo-from)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			_ = l.Close()
			return port
		}
	}
	return Free(tb)
}

// ephemeralLow returns the low end of the kernel's ephemeral port range,
// or 0 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}
