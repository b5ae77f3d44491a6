package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlcluster/rlcluster/internal/api/apitest"
)

// TestResetCommand: `rlnode reset KEY --rule R` clears KEY's count under R
// on a running node, which then admits KEY again.
func TestResetCommand(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  - name: login\n    limit: 1\n    window: 15m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, []string{"--listen", "127.0.0.1:0", "--rules", rules}, env(nil))
	check := func() string {
		_, b := apitest.Post(t, n.base+"/ratelimit.v1.RateLimitService/Check", `{"key":"alice","rule":"login"}`, nil)
		return b
	}
	if b := check(); !strings.Contains(b, `"allowed":true`) {
		t.Fatalf("first check: %s", b)
	}
	if b := check(); !strings.Contains(b, `"allowed":false`) {
		t.Fatalf("second check: %s, want denied", b)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"reset", "alice", "--rule", "login", "--addr", n.base}, env(nil), &out, &errOut); err != nil {
		t.Fatalf("rlnode reset: %v\n%s", err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "reset alice at ") {
		t.Errorf("rlnode reset printed %q, want \"reset alice at <instant>\"", out.String())
	}
	if b := check(); !strings.Contains(b, `"allowed":true`) {
		t.Errorf("check after the reset: %s, want allowed", b)
	}
	if !strings.Contains(n.logs.String(), `msg=reset by="anonymous from 127.0.0.1:`) || !strings.Contains(n.logs.String(), "key=r:login:alice") {
		t.Errorf("the node's log does not say who reset which key:\n%s", n.logs.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reset", "--rule", "login"}, "KEY is required"},
		{[]string{"reset", "alice"}, "--rule NAME or --inline is required"},
		{[]string{"reset", "alice", "--rule", "nope", "--addr", n.base}, `unknown rule "nope"`},
	} {
		if err := run(context.Background(), tc.args, env(nil), &out, &errOut); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rlnode %v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
