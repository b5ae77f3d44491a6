package client_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/client"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// leaseNode serves a node (real clock, in-memory store) with a leasable
// rule "leased" and a rule "checked" that is not, both 50 a minute, and
// counts the Check calls and Lease streams that reach it.
type leaseNode struct {
	URL            string
	checks, leases atomic.Int64
}

func startLeaseNode(t *testing.T) *leaseNode {
	t.Helper()
	rs, err := rules.New([]rules.Rule{
		{Name: "leased", Limit: window.Limit{Limit: 50, Window: time.Minute}, Leasable: true},
		{Name: "checked", Limit: window.Limit{Limit: 50, Window: time.Minute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Rules: rs})
	if err != nil {
		t.Fatal(err)
	}
	n := &leaseNode{}
	n.URL = apitest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case ratelimitv1connect.RateLimitServiceCheckProcedure:
			n.checks.Add(1)
		case ratelimitv1connect.RateLimitServiceLeaseProcedure:
			n.leases.Add(1)
		}
		h.ServeHTTP(w, r)
	})).URL
	return n
}

// leaseClient is a client of n whose leases report every 100 ms, closed
// when t ends.
func leaseClient(t *testing.T, n *leaseNode, opts ...client.Option) *client.Client {
	t.Helper()
	c := newClient(t, n.URL, append([]client.Option{client.WithLeaseInterval(100 * time.Millisecond)}, opts...)...)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLimiterLeases: a limiter of a leasable rule decides its first
// requests with Check, then, once the node's grant arrives, in the
// process (no more Checks) and never more than the limit; Reserve holds
// a token of the grant; one stream carries every limiter of a client.
func TestLimiterLeases(t *testing.T) {
	for _, p := range protocols(t) {
		t.Run(p.name, func(t *testing.T) {
			n := startLeaseNode(t)
			c := leaseClient(t, n, p.opts...)
			l, err := c.Limiter("leased", "alice")
			if err != nil {
				t.Fatal(err)
			}
			if !l.Allow() {
				t.Fatal("the first request was denied")
			}
			deadline := time.Now().Add(10 * time.Second)
			for !l.Reserve().OK() {
				if time.Now().After(deadline) {
					t.Fatal("no grant within 10 s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			checks := n.checks.Load()
			allowed := 2 // the first request and the reservation
			for range 200 {
				if l.Allow() {
					allowed++
				}
			}
			if got := n.checks.Load() - checks; got != 0 {
				t.Errorf("%d Checks reached the node while a grant held", got)
			}
			if allowed > 50 || allowed < 2 {
				t.Errorf("admitted %d of 202 under a limit of 50 a minute", allowed)
			}
			if _, err := c.Limiter("leased", "bob"); err != nil {
				t.Fatal(err)
			}
			if got := n.leases.Load(); got != 1 {
				t.Errorf("%d Lease streams, want the client's one", got)
			}
		})
	}
}

// TestLimiterNotLeasable: a rule the node will not lease is decided with
// Check, request by request, and its limit holds.
func TestLimiterNotLeasable(t *testing.T) {
	n := startLeaseNode(t)
	c := leaseClient(t, n)
	l, err := c.Limiter("checked", "alice")
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for range 60 {
		if l.Allow() {
			allowed++
		}
		time.Sleep(5 * time.Millisecond) // past three reporting intervals
	}
	if allowed != 50 {
		t.Errorf("admitted %d of 60 under a limit of 50 a minute, want 50", allowed)
	}
	if got := n.checks.Load(); got != 60 {
		t.Errorf("%d Checks for 60 requests, want one each", got)
	}
	if l.Reserve().OK() {
		t.Error("reserved a token of a rule the node does not lease")
	}
}

// TestLimiterWait: Wait returns at once while the grant has tokens, waits
// for the next fill when it has none, and returns the context's error
// when the context ends first.
func TestLimiterWait(t *testing.T) {
	n := startLeaseNode(t)
	c := leaseClient(t, n)
	l, err := c.Limiter("leased", "carol")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for !l.Reserve().OK() {
		if ctx.Err() != nil {
			t.Fatal("no grant within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for l.Allow() { // empty the grant's bucket
	}
	short, cancelShort := context.WithTimeout(ctx, time.Millisecond)
	defer cancelShort()
	if err := l.Wait(short); err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("Wait with an empty bucket and 1 ms: %v, want the deadline", err)
	}
	start := time.Now()
	if err := l.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if waited := time.Since(start); waited < 10*time.Millisecond {
		t.Errorf("Wait returned after %v with the bucket empty, want it to wait for a fill", waited)
	}
}

// TestLimiterArguments: a limiter needs a rule and a key.
func TestLimiterArguments(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1")
	if _, err := c.Limiter("", "k"); err == nil {
		t.Error("Limiter without a rule: no error")
	}
	if _, err := c.Limiter("r", ""); err == nil {
		t.Error("Limiter without a key: no error")
	}
	if _, err := client.New("http://127.0.0.1:1", client.WithLeaseInterval(time.Millisecond)); err == nil {
		t.Error("WithLeaseInterval(1ms): no error")
	}
}
