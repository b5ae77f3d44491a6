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

		// Just after a tick, so that each step below sees exactly one poll.
		time.Sleep(interval + time.Millisecond)
		writeRules(t, path, ruleFile("2"))
		time.Sleep(interval)
		synctest.Wait()
		if got, want := limit(), uint64(1); got != want {
			t.Errorf("limit after the first poll that sees the change = %d, want %d (not yet still for an interval)", got, want)
		}
		time.Sleep(interval)
		synctest.Wait()
		if got, want := limit(), uint64(2); got != want {
			t.Errorf("limit after the change held still = %d, want %d", got, want)
		}
		reloads(1, 0)

		writeRules(t, path, ruleFile("-1"))
		time.Sleep(5 * interval)
		synctest.Wait()
		if got, want := limit(), uint64(2); got != want {
			t.Errorf("limit after an invalid change = %d, want %d (the rules in use stay)", got, want)
		}
		reloads(1, 1)

		writeRules(t, path, ruleFile("3"))
		time.Sleep(2 * interval)
		synctest.Wait()
		if got, want := limit(), uint64(3); got != want {
			t.Errorf("limit after the fix = %d, want %d", got, want)
		}
		reloads(2, 1)
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
