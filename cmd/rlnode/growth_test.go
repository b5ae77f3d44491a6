package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

// TestGrowthBounded: what caller keys can make a node and its Redis hold
// is bounded and shown. --max-inline-window and --max-inline-limit refuse
// longer windows and larger limits (a week-long window kept each key in
// Redis for two weeks), a token's max-window= and max-limit= bound its
// holder further, /metrics shows Redis's key count and memory as keys
// arrive, and --max-keys defaults to what fits --memory-budget.
func TestGrowthBounded(t *testing.T) {
	srv := redistest.Start(t)
	const (
		ops    = "ops-token-0123456789ab"
		tenant = "tenant-token-012345678"
	)
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte(ops+"\n"+tenant+" inline=yes prefixes=t/ max-window=1m max-limit=100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL(), "--max-inline-window", "1h",
		"--max-inline-limit", "1000", "--auth-token-file", tokFile}, env(nil))
	check := n.base + "/ratelimit.v1.RateLimitService/Check"
	for _, tc := range []struct {
		tok, body string
		code      int
		want      string
	}{
		{ops, `{"key":"a","limit":{"limit":10,"window":"604800s"}}`, http.StatusBadRequest, "limit.window: 168h0m0s is more than the maximum of 1h0m0s"},
		{ops, `{"key":"a","limit":{"limit":1001,"window":"60s"}}`, http.StatusBadRequest, "limit.limit: 1001 is more than the maximum of 1000"},
		{ops, `{"key":"a","limit":{"limit":1000,"window":"3600s"}}`, http.StatusOK, `"allowed":true`},
		{tenant, `{"key":"t/a","limit":{"limit":10,"window":"120s"}}`, http.StatusForbidden, "limit.window: this token may not ask for a window longer than 1m0s"},
		{tenant, `{"key":"t/a","limit":{"limit":101,"window":"60s"}}`, http.StatusForbidden, "limit.limit: this token may not ask for a limit over 100"},
		{tenant, `{"key":"t/a","limit":{"limit":100,"window":"60s"}}`, http.StatusOK, `"allowed":true`},
	} {
		code, body := postAs(t, check, tc.tok, tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("Check %s = %d %s, want %d %q", tc.body, code, body, tc.code, tc.want)
		}
	}

	// Redis's keys and memory, on each scrape.
	before := scrapeMetrics(t, n.base)
	var b strings.Builder
	b.WriteString(`{"checks":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"key":"flood-%06d","limit":{"limit":100,"window":"3600s"}}`, i)
	}
	b.WriteString(`]}`)
	if code, body := postAs(t, n.base+"/ratelimit.v1.RateLimitService/CheckBatch", ops, b.String()); code != http.StatusOK {
		t.Fatalf("CheckBatch: %d %.300s", code, body)
	}
	after := scrapeMetrics(t, n.base)
	if after["rlcluster_redis_info_up"] != 1 {
		t.Fatalf("rlcluster_redis_info_up = %v, want 1", after["rlcluster_redis_info_up"])
	}
	if got := after["rlcluster_redis_keys"] - before["rlcluster_redis_keys"]; got < 1000 {
		t.Errorf("rlcluster_redis_keys rose by %v after 1000 new keys, want at least 1000", got)
	}
	if got := after["rlcluster_redis_used_memory_bytes"] - before["rlcluster_redis_used_memory_bytes"]; got <= 0 {
		t.Errorf("rlcluster_redis_used_memory_bytes rose by %v after 1000 new keys, want more", got)
	}

	// --max-keys follows --memory-budget unless it is given.
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want int
	}{
		{nil, nil, 1024 << 20 / memoryKeyBytes},
		{[]string{"--memory-budget", "256"}, nil, 256 << 20 / memoryKeyBytes},
		{[]string{"--memory-budget", "256", "--max-keys", "7"}, nil, 7},
		{[]string{"--memory-budget", "256"}, map[string]string{"RLNODE_MAX_KEYS": "9"}, 9},
		{nil, map[string]string{"RLNODE_MEMORY_BUDGET": "2048"}, 2048 << 20 / memoryKeyBytes},
	} {
		c, err := parseConfig(tc.args, env(tc.env), io.Discard, io.Discard)
		if err != nil || c.MaxKeys != tc.want {
			t.Errorf("parseConfig(%q, %v): MaxKeys %d, %v; want %d", tc.args, tc.env, c.MaxKeys, err, tc.want)
		}
	}
	checkRefused(t, []refusal{
		{[]string{"--memory-budget", "0"}, "--memory-budget: 0, want 1 to"},
		{[]string{"--max-inline-limit", "0"}, "--max-inline-limit: 0, want at least 1"},
	})
}

// scrapeMetrics returns the unlabelled series of the node's /metrics.
func scrapeMetrics(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out
}
