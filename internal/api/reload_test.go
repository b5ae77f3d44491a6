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
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// waitFor polls cond every few milliseconds until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

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

// writeFile replaces path's contents atomically, as editors and
// ConfigMap updates do.
func writeFile(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestReloadEnvoyExample edits envoyproxy/ratelimit's README example under
// a running server: the edit takes effect without a restart, an invalid
// edit is rejected and counted while the old rules stay, and requests
// sent all along never fail.
func TestReloadEnvoyExample(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "messaging.yaml")
	copyFile(t, "testdata/envoyproxy/messaging.yaml", path)
	reg := prometheus.NewRegistry()
	rl, err := rules.NewReloader(rules.ReloaderConfig{Path: dir, Interval: 10 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, api.Config{Rules: rl.Rules(), Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { rl.Run(ctx, s.API.SetRules) })

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
	waitFor(t, "the edit to apply", func() bool {
		r, err := c.ShouldRateLimit(ctx, marketing("2"))
		return err == nil && r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 2
	})
	// Counts carry over: number 1 has spent 1 of the new 2.
	call(t, c, marketing("1"), ok, st{ok, 2, day, 0})
	call(t, c, marketing("1"), over, st{over, 2, day, 0})

	// An invalid edit: rejected, counted, and the rules in use stay.
	writeFile(t, path, strings.Replace(string(b), "unit: day", "unit: fortnight", 1))
	waitFor(t, "the rejection to be counted", func() bool { return reloads(reg, 1, 1) == nil })
	call(t, c, marketing("3"), ok, st{ok, 2, day, 1})
	if got := rl.Reload(s.API.SetRules); got == nil || !strings.Contains(got.Error(), `"fortnight" is not second, minute, hour, day or week`) {
		t.Errorf("Reload() = %v, want the unit error", got)
	}

	// Fixed again: applied.
	writeFile(t, path, string(b))
	waitFor(t, "the fixed file to apply", func() bool {
		r, err := c.ShouldRateLimit(ctx, marketing("4"))
		return err == nil && r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 5
	})
	if err := reloads(reg, 2, 2); err != nil {
		t.Error(err)
	}
	cancel()
	wg.Wait()
	if sent.Load() == 0 || failed.Load() != 0 {
		t.Errorf("background requests: %d sent, %d failed; want some sent, none failed", sent.Load(), failed.Load())
	}
}

// TestReloadNativeAddsFile: a file added to the directory is picked up.
func TestReloadNativeAddsFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "rules:\n  - name: a\n    limit: 1\n    window: 1m\n")
	rl, err := rules.NewReloader(rules.ReloaderConfig{Path: dir, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Pointer[rules.Set]
	got.Store(rl.Rules())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rl.Run(ctx, got.Store); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	writeFile(t, filepath.Join(dir, "b.yml"), "rules:\n  - name: b\n    limit: 2\n    window: 1m\n    shadow_mode: true\n")
	waitFor(t, "b to appear", func() bool { _, ok := got.Load().Lookup("b"); return ok })
	if r, _ := got.Load().Lookup("b"); !r.Shadow || r.Limit.Limit != 2 {
		t.Errorf("rule b = %+v, want limit 2 in shadow mode", r)
	}
	if _, ok := got.Load().Lookup("a"); !ok {
		t.Error("rule a is gone")
	}
	// A duplicate name across files is rejected; both stay.
	writeFile(t, filepath.Join(dir, "c.yaml"), "rules:\n  - name: a\n    limit: 3\n    window: 1m\n")
	err = rl.Reload(got.Store)
	if err == nil || !strings.Contains(err.Error(), "c.yaml:2: rule 1 (a): name: \"a\" is already the name of rule 1 at "+filepath.Join(dir, "a.yaml")+":2") {
		t.Errorf("Reload = %v, want the duplicate named", err)
	}
	if r, _ := got.Load().Lookup("a"); r.Limit.Limit != 1 {
		t.Errorf("rule a = %+v after a rejected reload, want limit 1", r)
	}
}

func TestNewReloaderRejectsInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.yaml")
	writeFile(t, path, "domain: d\ndescriptors:\n  - value: v\n")
	if _, err := rules.NewReloader(rules.ReloaderConfig{Path: path}); err == nil || !strings.Contains(err.Error(), "descriptors[0].key: required") {
		t.Errorf("NewReloader = %v, want the missing key", err)
	}
}
