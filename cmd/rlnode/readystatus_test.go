package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/porttest"
)

// TestStatusSaysWhyNotReady: when /readyz answers 503, /status.json (and
// the page drawn from it) says why, in /readyz's words: a region cut off
// from the others, a store that has not answered.
func TestStatusSaysWhyNotReady(t *testing.T) {
	for _, tc := range []struct {
		name, want, end string
		args            []string
	}{
		{"no other region", "gossip: no other region reachable (none seen in 1s; seeds ", "): check --join and --gossip-key",
			[]string{"--region=us", "--gossip-addr=127.0.0.1:0", "--join", porttest.ClosedAddr(t), "--gossip-join-timeout=1s"}},
		{"redis down, closed", "store: ", "connection refused",
			[]string{"--redis-url", "redis://" + porttest.ClosedAddr(t), "--on-store-failure=closed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			base, done, logs := start(t, ctx, append([]string{"--listen=127.0.0.1:0"}, tc.args...), env(nil))
			var ready string
			polltest.Until(t, 15*time.Second, "/readyz 503", func() bool {
				code, body := get(t, base+"/readyz")
				ready = body
				return code == http.StatusServiceUnavailable
			})
			code, body := get(t, base+"/status.json")
			var st struct {
				Ready    bool   `json:"ready"`
				NotReady string `json:"not_ready"`
			}
			if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
				t.Fatalf("/status.json = %d %v: %s", code, err, body)
			}
			if st.Ready || !strings.HasPrefix(st.NotReady, tc.want) || !strings.HasSuffix(st.NotReady, tc.end) {
				t.Errorf("/status.json ready=%v not_ready=%q, want false and %q...%q", st.Ready, st.NotReady, tc.want, tc.end)
			}
			if got := strings.TrimSpace(strings.TrimPrefix(ready, "not ready: ")); !strings.HasPrefix(got, tc.want) {
				t.Errorf("/readyz = %q, want %q...", ready, tc.want)
			}
			cancel()
			wait(t, done, logs)
		})
	}
}
