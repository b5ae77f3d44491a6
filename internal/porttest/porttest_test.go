package porttest

import (
	"fmt"
	"net"
	"testing"
)

// TestSteady: the port is free and, where the kernel says, below its
// ephemeral range.
func TestSteady(t *testing.T) {
	lo := ephemeralLow()
	for range 20 {
		p := Steady(t)
		if lo >= 11000 && p >= lo {
			t.Errorf("Steady() = %d, in the ephemeral range from %d", p, lo)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		_ = l.Close()
	}
}
