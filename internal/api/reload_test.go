package api_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// reloads compares rlcluster_rules_reloads_total in reg with the counts
// given.
func reloads(reg prometheus.Gatherer, applied, rejected int) error {
	return testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP rlcluster_rules_reloads_total Reloads of the rules files, by result: applied, or rejected because the new files are invalid (the rules in use stay).
# TYPE rlcluster_rules_reloads_total counter
rlcluster_rules_reloads_total{result="applied"} %d
rlcluster_rules_reloads_total{result="rejected"} %d
`, applied, rejected)), "rlcluster_rules_reloads_total")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, string(b))
}

// writeFile replaces path's contents. The tests here reload after writing,
// so no poller sees a file half-written (rules' tests write atomically).
func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReloadEnvoyExample edits envoyproxy/ratelimit's README example under
// a running server and reloads it (as SIGHUP does; when Run's polling
// reloads is tested in rules' TestReloaderRun): the edit takes effect
// without a restart, an invalid edit is rejected and counted while the old
// rules stay, and requests sent all along never fail.
func TestReloadEnvoyExample(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "messaging.yaml")
	copyFile(t, "testdata/envoyproxy/messaging.yaml", path)
	reg := prometheus.NewRegistry()
	rl, err := rules.NewReloader(rules.ReloaderConfig{Path: dir, Interval: -1, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, api.Config{Rules: rl.Rules(), Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	// Requests all along: every one must get an answer.
	var sent, failed atomic.Int64
	c := s.rlsClient(t)
	wg.Go(func() {
		for ctx.Err() == nil {
			_, err := c.ShouldRateLimit(ctx, rlsReq("messaging", desc("to_number", "background")))
			sent.Add(1)
			if err != nil && ctx.Err() == nil {
				failed.Add(1)
				t.Errorf("ShouldRateLimit during reloads: %v", err)
			}
		}
	})

	marketing := func(n string) *rlsv3.RateLimitRequest {
		return rlsReq("messaging", desc("message_type", "marketing", "to_number", n))
	}
	call(t, c, marketing("1"), ok, st{ok, 5, day, 4})

	b, _ := os.ReadFile(path)
	writeFile(t, path, strings.Replace(string(b), "requests_per_unit: 5", "requests_per_unit: 2", 1))
	if err := rl.Reload(s.API.SetRules); err != nil {
		t.Fatalf("Reload() = %v", err)
	}
	call(t, c, marketing("2"), ok, st{ok, 2, day, 1})
	// Counts carry over: number 1 has spent 1 of the new 2.
	call(t, c, marketing("1"), ok, st{ok, 2, day, 0})
	call(t, c, marketing("1"), over, st{over, 2, day, 0})

	// An invalid edit: rejected, counted, and the rules in use stay.
	writeFile(t, path, strings.Replace(string(b), "unit: day", "unit: fortnight", 1))
	if got := rl.Reload(s.API.SetRules); got == nil || !strings.Contains(got.Error(), `"fortnight" is not second, minute, hour, day, week, month or year`) {
		t.Errorf("Reload() = %v, want the unit error", got)
	}
	if err := reloads(reg, 1, 1); err != nil {
		t.Error(err)
	}
	call(t, c, marketing("3"), ok, st{ok, 2, day, 1})

	// Fixed again: applied.
	writeFile(t, path, string(b))
	if err := rl.Reload(s.API.SetRules); err != nil {
		t.Fatalf("Reload() = %v", err)
	}
	call(t, c, marketing("4"), ok, st{ok, 5, day, 4})
	if err := reloads(reg, 2, 1); err != nil {
		t.Error(err)
	}
	cancel()
	wg.Wait()
	if sent.Load() == 0 || failed.Load() != 0 {
		t.Errorf("background requests: %d sent, %d failed; want some sent, none failed", sent.Load(), failed.Load())
	}
}
