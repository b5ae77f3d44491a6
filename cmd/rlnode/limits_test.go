package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLimitFlags: the bounds on input come from flags or RLNODE_ variables,
// bad values are refused, -help documents them, and a running node applies
// them with invalid_argument errors naming the field.
func TestLimitFlags(t *testing.T) {
	c, err := parseConfig([]string{"--max-batch", "7"}, env(map[string]string{
		"RLNODE_MAX_BATCH": "9", "RLNODE_MAX_REQUEST_BYTES": "4096", "RLNODE_MAX_HITS": "50",
		"RLNODE_MAX_WINDOW": "1h", "RLNODE_MAX_LOG_LIMIT": "77", "RLNODE_MAX_RULES": "3",
		"RLNODE_ON_STORE_FAILURE": "closed", "RLNODE_STORE_TIMEOUT": "20ms",
	}), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxBatch != 7 || c.MaxRequestBytes != 4096 || c.MaxHits != 50 || c.MaxWindow != time.Hour || c.MaxLogLimit != 77 ||
		c.MaxRules != 3 || c.OnStoreFailure != "closed" || c.StoreTimeout != 20*time.Millisecond {
		t.Errorf("parseConfig = %+v", c)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-batch", "0"}, "--max-batch: 0, want at least 1"},
		{[]string{"--max-key-bytes", "4096"}, "--max-key-bytes: 4096, want at most 3964 (counter keys, namespace prefix included, must fit the 4096 bytes replication carries)"},
		{[]string{"--max-request-bytes", "10"}, "--max-request-bytes: 10, want at least 64"},
		{[]string{"--max-hits", "0"}, "--max-hits: 0, want at least 1"},
		{[]string{"--max-window", "200h"}, "--max-window: 200h0m0s, want 1s to 168h"},
		{[]string{"--max-log-limit", "0"}, "--max-log-limit: 0, want at least 1"},
		{[]string{"--max-rules", "0"}, "--max-rules: 0, want at least 1"},
		{[]string{"--on-store-failure", "maybe"}, `--on-store-failure: "maybe" is not local, open or closed`},
		{[]string{"--store-timeout", "0s"}, "--store-timeout: 0s, want 1ms to 1m"},
	} {
		if _, err := parseConfig(tc.args, env(nil), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	// Too many rules stop the node.
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	writeFile(t, rules, "rules:\n  - name: a\n    limit: 1\n    window: 1s\n  - name: b\n    limit: 1\n    window: 1s\n")
	err = run(context.Background(), []string{"--listen", "127.0.0.1:0", "--rules", rules, "--max-rules", "1"}, env(nil), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "2 limits (rules and envoy descriptors), more than the maximum of 1 (--max-rules)") {
		t.Errorf("run with 2 rules and --max-rules 1 = %v, want the rules refused", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	base, done, logs := start(t, ctx, []string{"--listen", "127.0.0.1:0", "--max-key-bytes", "4", "--max-batch", "2", "--max-hits", "3"}, env(nil))
	defer func() { cancel(); wait(t, done, logs) }()
	for _, tc := range []struct {
		method, body, want string
	}{
		{"Check", `{"key":"12345","limit":{"limit":10,"window":"60s"}}`, "key: 5 bytes, more than the maximum of 4"},
		{"Check", `{"key":"a","hits":4,"limit":{"limit":10,"window":"60s"}}`, "hits: 4 is more than the maximum of 3"},
		{"CheckBatch", `{"checks":[{"key":"a"},{"key":"b"},{"key":"c"}]}`, "checks: 3 checks, more than the maximum of 2"},
	} {
		code, body := post(t, base+"/ratelimit.v1.RateLimitService/"+tc.method, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, `"code":"invalid_argument"`) || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s = %d %s, want 400 invalid_argument %q", tc.method, tc.body, code, body, tc.want)
		}
	}
}
