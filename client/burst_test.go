package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/client"
)

// TestLimitBurst: an inline token bucket with Burst admits the burst at
// once from a real node, and the next hit waits for the refill.
func TestLimitBurst(t *testing.T) {
	n := startTestNode(t, nil)
	c := newClient(t, n.URL)
	p := client.Limit{Limit: 5, Window: time.Second, Algorithm: client.TokenBucket, Burst: 20}
	d, err := c.CheckN(context.Background(), "burst", 20, p)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("CheckN(20) = %+v, %v; want allowed, 0 remaining", d, err)
	}
	d, err = c.Check(context.Background(), "burst", p)
	if err != nil || d.Allowed || d.RetryAfter != 200*time.Millisecond {
		t.Errorf("Check after the burst = allowed %v retry %v, %v; want denied, 200ms", d.Allowed, d.RetryAfter, err)
	}
}
