package api_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/forwardauth"
	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// namespaceRules are a native rule "api" (2 per minute) and the Envoy
// domain "internal" (azure: 100 per minute).
func namespaceRules(t *testing.T) *rules.Set {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "native.yaml"), "rules:\n  - name: api\n    limit: 2\n    window: 1m\n")
	b, err := os.ReadFile("testdata/envoyproxy/internal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "internal.yaml"), string(b))
	rs, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestNamespacesCannotBeCrossed is the attack of spending another entry
// point's counter by choosing a key: inline keys shaped like a rule's,
// forward-auth's or Envoy's counter keys (in the old and the new layout),
// and Connect rule keys shaped like a forward-auth key, spend nothing of
// those counters.
func TestNamespacesCannotBeCrossed(t *testing.T) {
	s := newServer(t, api.Config{Rules: namespaceRules(t), Check: forwardauth.Config{DefaultRule: "api"}})
	ctx := context.Background()
	c := s.client(t, true, connect.WithGRPC())
	huge := inline(1<<40, time.Minute)

	// The attacks: each spends 2^39 hits, or all of rule api, under a key
	// that names another namespace's counter.
	for _, key := range []string{
		"api:alice", "r:api:alice", // rule api, key alice
		"api:x-forwarded-for=203.0.113.7", "f:api:x-forwarded-for=203.0.113.7", // /check/api for 203.0.113.7
		"rls/internal/azure=a", "e:internal/azure=a", // Envoy's internal domain, azure=a
	} {
		resp, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: key, Hits: 1 << 39, Limit: huge}))
		if err != nil || !resp.Msg.Allowed {
			t.Fatalf("inline Check(%q) = %v, %v; want allowed", key, resp, err)
		}
	}
	for range 2 {
		resp, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "x-forwarded-for=203.0.113.7", Rule: "api"}))
		if err != nil || !resp.Msg.Allowed {
			t.Fatalf("Check(api, x-forwarded-for=...) = %v, %v; want allowed", resp, err)
		}
	}

	// Every victim still has its whole limit.
	resp, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "alice", Rule: "api"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Msg.Remaining, uint64(1); !resp.Msg.Allowed || got != want {
		t.Errorf("rule api, alice: allowed %v remaining %d, want true %d", resp.Msg.Allowed, got, want)
	}
	status, h, body := fwdAuth(t, s.URL+"/check", map[string]string{"X-Forwarded-For": "203.0.113.7"})
	if got := h.Get("RateLimit"); status != 200 || !strings.HasPrefix(got, `"api";r=1;`) {
		t.Errorf("/check for 203.0.113.7: %d %s RateLimit %q, want 200 with r=1", status, body, got)
	}
	call(t, s.rlsClient(t), rlsReq("internal", desc("azure", "a")), ok, st{ok, 100, mnt, 99})
}
