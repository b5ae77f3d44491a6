package rules_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// writeRules replaces path's contents atomically, as editors and
// ConfigMap updates do.
func writeRules(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func ruleFile(limit string) string {
	return "rules:\n  - name: a\n    limit: " + limit + "\n    window: 1m\n"
}

// TestReloaderRun steps Run's ticker on synctest's clock: a change is
// applied once it has held still for one interval, not at the first poll
// that sees it; an invalid change is rejected once, not at every tick;
// a file fixed again is applied.
func TestReloaderRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		path := filepath.Join(t.TempDir(), "r.yaml")
		writeRules(t, path, ruleFile("1"))
		reg := prometheus.NewRegistry()
		rl, err := rules.NewReloader(rules.ReloaderConfig{Path: path, Interval: interval, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		var got atomic.Pointer[rules.Set]
		got.Store(rl.Rules())
		limit := func() uint64 { r, _ := got.Load().Lookup("a"); return r.Limit.Limit }
		reloads := func(applied, rejected int) {
			t.Helper()
			err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP rlcluster_rules_reloads_total Reloads of the rules files, by result: applied, or rejected because the new files are invalid (the rules in use stay).
# TYPE rlcluster_rules_reloads_total counter
rlcluster_rules_reloads_total{result="applied"} %d
rlcluster_rules_reloads_total{result="rejected"} %d
`, applied, rejected)), "rlcluster_rules_reloads_total")
			if err != nil {
				t.Error(err)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go rl.Run(ctx, got.Store)

		// limitAfter lets d pass and returns the limit in use then.
		limitAfter := func(d time.Duration) uint64 {
			time.Sleep(d)
			synctest.Wait()
			return limit()
		}
		for _, step := range []struct {
			what                      string
			limit                     string // written at the start of the step
			after                     time.Duration
			want                      uint64
			wantApplied, wantRejected int
		}{
			// Just after a tick, so that each step below sees whole polls.
			{what: "start", after: interval + time.Millisecond, want: 1},
			{what: "the first poll that sees a change (not yet still)", limit: "2", after: interval, want: 1},
			{what: "the change held still for an interval", after: interval, want: 2, wantApplied: 1},
			{what: "five polls of an invalid change (the rules in use stay)", limit: "-1", after: 5 * interval, want: 2, wantApplied: 1, wantRejected: 1},
			{what: "the fix held still", limit: "3", after: 2 * interval, want: 3, wantApplied: 2, wantRejected: 1},
		} {
			if step.limit != "" {
				writeRules(t, path, ruleFile(step.limit))
			}
			if got := limitAfter(step.after); got != step.want {
				t.Errorf("%s: limit = %d, want %d", step.what, got, step.want)
			}
			reloads(step.wantApplied, step.wantRejected)
		}
	})
}

// TestReloaderRunOff: a negative Interval turns polling off.
func TestReloaderRunOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "r.yaml")
		writeRules(t, path, ruleFile("1"))
		rl, err := rules.NewReloader(rules.ReloaderConfig{Path: path, Interval: -1})
		if err != nil {
			t.Fatal(err)
		}
		rl.Run(t.Context(), func(*rules.Set) { t.Error("apply called with polling off") }) // returns at once
	})
}

// TestReloadNativeAddsFile: a file added to the directory is picked up
// by Run (on synctest's clock: two polls, the second seeing it unchanged).
func TestReloadNativeAddsFile(t *testing.T) {
	synctest.Test(t, testReloadNativeAddsFile)
}

func testReloadNativeAddsFile(t *testing.T) {
	const interval = time.Second
	dir := t.TempDir()
	writeRules(t, filepath.Join(dir, "a.yaml"), "rules:\n  - name: a\n    limit: 1\n    window: 1m\n")
	rl, err := rules.NewReloader(rules.ReloaderConfig{Path: dir, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Pointer[rules.Set]
	got.Store(rl.Rules())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go rl.Run(ctx, got.Store)
	writeRules(t, filepath.Join(dir, "b.yml"), "rules:\n  - name: b\n    limit: 2\n    window: 1m\n    shadow_mode: true\n")
	time.Sleep(2*interval + time.Millisecond)
	synctest.Wait()
	if r, ok := got.Load().Lookup("b"); !ok || !r.Shadow || r.Limit.Limit != 2 {
		t.Errorf("rule b = %+v, want limit 2 in shadow mode", r)
	}
	if _, ok := got.Load().Lookup("a"); !ok {
		t.Error("rule a is gone")
	}
	// A duplicate name across files is rejected; both stay.
	writeRules(t, filepath.Join(dir, "c.yaml"), "rules:\n  - name: a\n    limit: 3\n    window: 1m\n")
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
	writeRules(t, path, "domain: d\ndescriptors:\n  - value: v\n")
	if _, err := rules.NewReloader(rules.ReloaderConfig{Path: path}); err == nil || !strings.Contains(err.Error(), "descriptors[0].key: required") {
		t.Errorf("NewReloader = %v, want the missing key", err)
	}
}
