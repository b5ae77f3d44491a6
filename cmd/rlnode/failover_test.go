package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunRedisOutage runs a node on Redis, kills Redis and restarts it: the
// node keeps answering under each --on-store-failure policy, /readyz, the
// logs and the metrics say which mode it is in, and it returns to Redis.
func TestRunRedisOutage(t *testing.T) {
	for _, c := range []struct {
		policy     string
		allowed    bool
		readyWhile int
	}{
		{"local", true, http.StatusOK},
		{"open", true, http.StatusOK},
		{"closed", false, http.StatusServiceUnavailable},
	} {
		t.Run(c.policy, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx, cancel := context.WithCancel(context.Background())
			base, done, logs := start(t, ctx, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL(),
				"--on-store-failure", c.policy, "--store-timeout", "50ms"}, env(nil))
			defer func() { cancel(); wait(t, done, logs) }()
			check := base + "/ratelimit.v1.RateLimitService/Check"
			req := `{"key":"outage","limit":{"limit":1000,"window":"60s"}}`
			if code, body := post(t, check, req); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
				t.Fatalf("healthy Check: %d %s", code, body)
			}
			if code, body := get(t, base+"/readyz"); code != http.StatusOK || body != "ok (store: primary)\n" {
				t.Errorf("healthy /readyz = %d %q, want 200 \"ok (store: primary)\"", code, body)
			}

			srv.Stop()
			for i := range 10 {
				start := time.Now()
				code, body := post(t, check, req)
				if code != http.StatusOK || strings.Contains(body, `"allowed":true`) != c.allowed {
					t.Errorf("Check %d with Redis dead: %d %s, want 200 and allowed %v", i, code, body, c.allowed)
				}
				t.Logf("Check %d with Redis dead: %v", i, time.Since(start).Round(time.Microsecond))
			}
			code, body := get(t, base+"/readyz")
			if code != c.readyWhile || !strings.Contains(body, "fallback "+c.policy) || !strings.Contains(body, "unavailable since") {
				t.Errorf("/readyz with Redis dead = %d %q, want %d naming fallback %s", code, body, c.readyWhile, c.policy)
			}
			t.Logf("/readyz with Redis dead: %d %s", code, strings.TrimSpace(body))
			_, metrics := get(t, base+"/metrics")
			for _, want := range []string{`rlcluster_store_mode{mode="` + c.policy + `"} 1`, `rlcluster_store_mode{mode="primary"} 0`,
				"rlcluster_store_transitions_total 1"} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			if n := strings.Count(logs.String(), "primary unavailable"); n != 1 {
				t.Errorf("logs hold %d lines about the outage, want 1 (one per transition):\n%s", n, logs)
			}

			srv.Restart(t)
			deadline := time.Now().Add(20 * time.Second)
			for {
				code, body := get(t, base+"/readyz")
				if code == http.StatusOK && body == "ok (store: primary)\n" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/readyz = %d %q 20s after Redis restarted, want back on primary", code, body)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if code, body := post(t, check, req); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
				t.Errorf("Check after recovery: %d %s", code, body)
			}
			if !strings.Contains(logs.String(), "primary answers again") {
				t.Errorf("logs lack the recovery:\n%s", logs)
			}
		})
	}
}
