package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunCheckFlags runs a node with the check endpoint's flags and drives
// it as a proxy's forward-auth would.
func TestRunCheckFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, "rules:\n  - name: per-key\n    limit: 1\n    window: 168h\n")
	n := startNode(t, []string{
		"--listen=127.0.0.1:0", "--rules", path,
		"--check-path", "/auth", "--check-default-rule", "per-key", "--legacy-headers",
	}, env(map[string]string{
		"RLNODE_CHECK_KEY_HEADERS": "X-Api-Key, X-Forwarded-For",
		"RLNODE_CHECK_DENY_STATUS": "403",
	}))
	for i, want := range []int{http.StatusOK, http.StatusForbidden} {
		req, err := http.NewRequest(http.MethodGet, n.base+"/auth", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Api-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("request %d: status %d, want %d: %s", i+1, resp.StatusCode, want, b)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"per-key";q=1;w=604800` {
			t.Errorf("request %d: RateLimit-Policy = %q", i+1, got)
		}
		if got := resp.Header.Get("X-RateLimit-Limit"); got != "1" {
			t.Errorf("request %d: X-RateLimit-Limit = %q, want 1 (--legacy-headers)", i+1, got)
		}
	}
	n.stop()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--check-deny-status", "500"}, "--check-deny-status: 500, want 429 or 403"},
		{[]string{"--check-path", "check"}, `--check-path: "check" must start with '/'`},
		{[]string{"--check-default-rule", "no spaces"}, `--check-default-rule: "no spaces" must be 1 to 128`},
		{[]string{"--check-key-headers", "X-A,Bad Header"}, `Check.KeyHeaders[1]: "Bad Header" is not a header name`},
	} {
		err := run(context.Background(), append([]string{"--listen=127.0.0.1:0"}, tc.args...), env(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
