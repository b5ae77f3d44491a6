package rules_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/window"
)

func TestParseScope(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want rules.Scope
		err  bool
	}{
		{"", rules.ScopeGlobal, false},
		{"global", rules.ScopeGlobal, false},
		{"region", rules.ScopeRegion, false},
		{"Region", 0, true},
		{"regional", 0, true},
		{"SCOPE_REGION", 0, true},
	} {
		got, err := rules.ParseScope(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseScope(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
	if got, want := rules.ScopeRegion.String(), "region"; got != want {
		t.Errorf("ScopeRegion.String() = %q, want %q", got, want)
	}
}

func TestRegionLocal(t *testing.T) {
	for _, tc := range []struct {
		a     window.Algorithm
		s     rules.Scope
		local bool
	}{
		{window.SlidingWindow, rules.ScopeGlobal, false},
		{window.FixedWindow, rules.ScopeGlobal, false},
		{window.TokenBucket, rules.ScopeGlobal, true},
		{window.SlidingLog, rules.ScopeGlobal, true},
		{window.TokenBucket, rules.ScopeRegion, false},
		{window.SlidingWindow, rules.ScopeRegion, false},
	} {
		if got := rules.RegionLocal(tc.a, tc.s); got != tc.local {
			t.Errorf("RegionLocal(%v, %v) = %v, want %v", tc.a, tc.s, got, tc.local)
		}
	}
}

// TestRulesScope: both formats carry a scope (global by default), and a
// region-local algorithm with global scope loads with a warning that says
// where it is.
func TestRulesScope(t *testing.T) {
	dir := t.TempDir()
	native := filepath.Join(dir, "a.yaml")
	envoy := filepath.Join(dir, "b.yaml")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(native, `rules:
  - name: api
    limit: 100
    window: 1m
  - name: per-region
    limit: 100
    window: 1m
    scope: region
  - name: burst
    limit: 10
    window: 1s
    algorithm: token_bucket
  - name: burst-here
    limit: 10
    window: 1s
    algorithm: token_bucket
    scope: region
  - name: log
    limit: 10
    window: 1s
    algorithm: sliding_log
    scope: global
`)
	write(envoy, `domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 10
      scope: region
  - key: ip
    rate_limit:
      unit: second
      requests_per_unit: 10
      algorithm: token_bucket
  - key: plan
    rate_limit:
      unlimited: true
      algorithm: token_bucket
`)
	rs, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]rules.Scope{"api": rules.ScopeGlobal, "per-region": rules.ScopeRegion, "burst": rules.ScopeGlobal, "burst-here": rules.ScopeRegion, "log": rules.ScopeGlobal} {
		if r, ok := rs.Lookup(name); !ok || r.Scope != want {
			t.Errorf("Lookup(%s) = %+v, %v; want scope %v", name, r, ok, want)
		}
	}
	d := rs.Domain("shop")
	if l := d.Match([]rules.Entry{{Key: "user", Value: "x"}}); l == nil || l.Scope != rules.ScopeRegion {
		t.Errorf("shop user limit = %+v, want scope region", l)
	}
	if l := d.Match([]rules.Entry{{Key: "ip", Value: "x"}}); l == nil || l.Scope != rules.ScopeGlobal {
		t.Errorf("shop ip limit = %+v, want scope global", l)
	}
	want := []string{
		native + `:12: rule 3 (burst): algorithm: token_bucket is region-local and scope is global: accepted while the cluster has one region, refused (invalid_argument) while it has more; set scope: region for one limit per region, or use sliding_window or fixed_window for one global limit`,
		native + `:22: rule 5 (log): scope: sliding_log is region-local and scope is global: accepted while the cluster has one region, refused (invalid_argument) while it has more; set scope: region for one limit per region, or use sliding_window or fixed_window for one global limit`,
		envoy + `:12: domain "shop": descriptors[1].rate_limit.algorithm: token_bucket is region-local and scope is global: accepted while the cluster has one region, refused (invalid_argument) while it has more; set scope: region for one limit per region, or use sliding_window or fixed_window for one global limit`,
	}
	if got := rs.Warnings(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Warnings() =\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRulesScopeErrors: an unknown scope is an error at its file:line, in
// both formats.
func TestRulesScopeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"native unknown", "rules:\n  - name: a\n    limit: 5\n    window: 1m\n    scope: regional\n",
			`5: rule 1 (a): scope: "regional" is not global or region`},
		{"native proto name", "rules:\n  - name: a\n    limit: 5\n    window: 1m\n    scope: SCOPE_REGION\n",
			`5: rule 1 (a): scope: "SCOPE_REGION" is not global or region`},
		{"native wrong type", "rules:\n  - name: a\n    limit: 5\n    window: 1m\n    scope: [region]\n",
			`5: rule 1 (a): scope: must be a single value, got a list`},
		{"envoy unknown", "domain: mail\ndescriptors:\n  - key: to\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      scope: world\n",
			`7: domain "mail": descriptors[0].rate_limit.scope: "world" is not global or region`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := rules.Load(path)
			if want := path + ":" + tc.want; err == nil || err.Error() != want {
				t.Errorf("Load error:\n%v\nwant:\n%s", err, want)
			}
		})
	}
	// Parse, without a file, says the line.
	if _, err := rules.Parse([]byte("rules:\n  - {name: a, limit: 1, window: 1s, scope: everywhere}\n")); err == nil ||
		err.Error() != `line 2: rule 1 (a): scope: "everywhere" is not global or region` {
		t.Errorf("Parse error = %v", err)
	}
}
