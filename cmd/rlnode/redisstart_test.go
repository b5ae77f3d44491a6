package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

// TestRunRedisDownAtStart: a node started while its Redis is down serves
// under the failure policy (local), says so once in its own log format,
// is not ready until Redis first answers, and then moves to Redis and
// counts there.
func TestRunRedisDownAtStart(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	base, done, logs := start(t, ctx, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL(), "--log-level", "debug"}, env(nil))
	defer func() { cancel(); wait(t, done, logs) }()

	check := base + "/ratelimit.v1.RateLimitService/Check"
	req := `{"key":"down-at-start","limit":{"limit":100,"window":"3600s"}}`
	if code, body := post(t, check, req); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Fatalf("Check with Redis down at start: %d %s, want allowed by the local policy", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not reached since start") {
		t.Errorf("/readyz with Redis down at start = %d %q, want 503 saying Redis was not reached", code, body)
	}
	l := logs.String()
	if n := strings.Count(l, "unreachable at start"); n != 1 {
		t.Errorf("logs say %d times that Redis is unreachable at start, want once:\n%s", n, l)
	}
	for _, line := range strings.Split(strings.TrimSpace(l), "\n") {
		if !strings.HasPrefix(line, "time=") {
			t.Errorf("log line not in the node's format: %q", line)
		}
	}
	if !strings.Contains(l, "component=redis") {
		t.Errorf("go-redis's own lines do not reach the node's logger:\n%s", l)
	}

	srv.Restart(t)
	waitUntil(t, 20*time.Second, "/readyz to say the node decides with Redis", func() bool {
		code, body := get(t, base+"/readyz")
		return code == http.StatusOK && body == "ok (store: primary)\n"
	})
	if code, body := post(t, check, req); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Fatalf("Check once Redis answers: %d %s", code, body)
	}
	// Another node on the same Redis sees the count: it is in Redis.
	other, otherDone, otherLogs := start(t, ctx, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL()}, env(nil))
	defer func() { cancel(); wait(t, otherDone, otherLogs) }()
	if got := regionCounts(peek(t, other, req))["local"]; got != "1" {
		t.Errorf("Redis's count of region local = %q, want 1 (the Check made once Redis answered)", got)
	}
}

// TestRunRedisPasswordFile: --redis-password-file authenticates without a
// password in the URL or on the command line, and the password is never
// logged.
func TestRunRedisPasswordFile(t *testing.T) {
	const pass = "file-pass-Secr3t"
	srv := redistest.Start(t, "--requirepass", pass)
	file := filepath.Join(t.TempDir(), "redis-pass")
	if err := os.WriteFile(file, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	base, done, logs := start(t, ctx, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL()},
		env(map[string]string{"RLNODE_REDIS_PASSWORD_FILE": file}))
	if code, body := get(t, base+"/readyz"); code != http.StatusOK || body != "ok (store: primary)\n" {
		t.Errorf("/readyz = %d %q, want the node on Redis", code, body)
	}
	if code, body := post(t, base+"/ratelimit.v1.RateLimitService/Check", `{"key":"pw","limit":{"limit":1,"window":"60s"}}`); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("Check: %d %s", code, body)
	}
	cancel()
	wait(t, done, logs)
	if strings.Contains(logs.String(), pass) {
		t.Errorf("logs show the password:\n%s", logs)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--redis-password-file", file}, "--redis-password-file: needs --redis-url"},
		{[]string{"--redis-url", srv.URL(), "--redis-password-file", file + ".missing"}, "read --redis-password-file"},
	} {
		if _, err := parseConfig(tc.args, env(nil), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
