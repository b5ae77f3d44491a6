package rules_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/window"
)

func TestParseRules(t *testing.T) {
	rs, err := rules.Parse([]byte(`
rules:
  - name: api-per-user
    limit: 100
    window: 1m
  - name: login
    limit: 5
    window: 15m
    algorithm: fixed_window
  - name: burst
    limit: 10
    window: 1s
    algorithm: token_bucket
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []rules.Rule{
		{Name: "api-per-user", Limit: window.Limit{Limit: 100, Window: time.Minute, Algorithm: window.SlidingWindow}},
		{Name: "burst", Limit: window.Limit{Limit: 10, Window: time.Second, Algorithm: window.TokenBucket}},
		{Name: "login", Limit: window.Limit{Limit: 5, Window: 15 * time.Minute, Algorithm: window.FixedWindow}},
	}
	got := rs.All()
	if len(got) != len(want) {
		t.Fatalf("All() = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("All()[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if r, ok := rs.Lookup("login"); !ok || r.Name != "login" {
		t.Errorf("Lookup(login) = %v, %v", r, ok)
	}
	if _, ok := rs.Lookup("nope"); ok {
		t.Errorf("Lookup(nope) found a rule")
	}
}

func TestParseRulesListsEveryError(t *testing.T) {
	_, err := rules.Parse([]byte(`
rules:
  - name: ok
    limit: 1
    window: 1s
  - limit: 0
    window: 500ms
  - name: bad name!
    limit: 10
    window: forever
  - name: ok
    limit: 10
    window: 1m
    algorithm: magic
  - name: week
    limit: 9007199254740993
    window: 169h
  - name: frac
    limit: 1
    window: 1.0005s
`))
	if err == nil {
		t.Fatal("Parse: no error")
	}
	want := strings.Join([]string{
		"line 6: rule 2: name: required",
		"line 6: rule 2: limit: must be from 1 to 2^53, got 0",
		"line 7: rule 2: window: must be from 1s to 168h, got 500ms",
		`line 8: rule 3 (bad name!): name: "bad name!" must be 1 to 128 of a-z, A-Z, 0-9, '_', '.', '-'`,
		`line 10: rule 3 (bad name!): window: "forever" is not a Go duration such as 1s, 1m, 1h`,
		`line 11: rule 4 (ok): name: "ok" is already the name of rule 1 at line 3`,
		`line 14: rule 4 (ok): algorithm: "magic" is not sliding_window, sliding_window_two_bucket, fixed_window, token_bucket or sliding_log`,
		"line 16: rule 5 (week): limit: must be from 1 to 2^53, got 9007199254740993",
		"line 17: rule 5 (week): window: must be from 1s to 168h, got 169h",
		"line 20: rule 6 (frac): window: must be a whole number of milliseconds, got 1.0005s",
	}, "\n")
	if err.Error() != want {
		t.Errorf("Parse error:\n%v\nwant:\n%s", err, want)
	}
}

func TestParseRulesRejectsUnknownFields(t *testing.T) {
	_, err := rules.Parse([]byte("rules:\n  - name: a\n    limit: 1\n    window: 1s\n    windw: 2s\n"))
	if err == nil || !strings.Contains(err.Error(), "windw") {
		t.Errorf("Parse = %v, want an error naming the unknown field", err)
	}
}

func TestLoadRules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - name: a\n    limit: 1\n    window: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rs.Len(), 1; got != want {
		t.Errorf("Len() = %d, want %d", got, want)
	}
	if _, err := rules.Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("Load(missing) = nil error")
	}
	// An empty file is no rules, not an error.
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if rs, err := rules.Load(empty); err != nil || rs.Len() != 0 {
		t.Errorf("Load(empty) = %v, %v, want no rules", rs.Len(), err)
	}
}

func TestNewRules(t *testing.T) {
	_, err := rules.New([]rules.Rule{
		{Name: "a", Limit: window.Limit{Limit: 1, Window: time.Second}},
		{Name: "a", Limit: window.Limit{Limit: 1, Window: time.Second}},
		{Name: "", Limit: window.Limit{Limit: 1, Window: time.Second}},
		{Name: "b", Limit: window.Limit{Limit: 0, Window: time.Second}},
	})
	if err == nil {
		t.Fatal("New: no error")
	}
	for _, want := range []string{"rule 1 (a): duplicate name", "rule 2: name:", "rule 3 (b): window: limit must be"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestParseEnvoyRulesListsEveryError(t *testing.T) {
	_, err := rules.Parse([]byte(`domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: fortnight
      requests_per_unit: 5
  - value: nokey
  - key: user
    rate_limit:
      unit: minute
  - key: plan
    rate_limit:
      unlimited: true
      unit: second
    descriptors:
      - key: tier
        rate_limit:
          unit: month
          requests_per_unit: 1
          algorithm: magic
          bursts: 3
        shadowmode: true
      - key: api
        rate_limit:
          name: a
          replaces:
            - name: a
            - {}
          unit: hour
          requests_per_unit: 1
`))
	if err == nil {
		t.Fatal("Parse: no error")
	}
	want := strings.Join([]string{
		`line 5: domain "shop": descriptors[0].rate_limit.unit: "fortnight" is not second, minute, hour, day, week, month or year`,
		`line 7: domain "shop": descriptors[1].key: required`,
		`line 8: domain "shop": descriptors[2]: duplicate of another descriptor with key "user" and value "" at this level`,
		`line 14: domain "shop": descriptors[3].rate_limit.unit: must not be set when unlimited is true`,
		`line 20: domain "shop": descriptors[3].descriptors[0].rate_limit.algorithm: "magic" is not sliding_window, sliding_window_two_bucket, fixed_window, token_bucket or sliding_log`,
		`line 21: domain "shop": descriptors[3].descriptors[0].rate_limit: unknown field "bursts" (want unit, requests_per_unit, unlimited, name, replaces, algorithm, strict, burst or scope)`,
		`line 22: domain "shop": descriptors[3].descriptors[0]: unknown field "shadowmode" (want key, value, rate_limit, shadow_mode, share_threshold, quota_mode, metadata, detailed_metric, value_to_metric or descriptors)`,
		`line 27: domain "shop": descriptors[3].descriptors[1].rate_limit.replaces[0].name: "a" is this limit's own name`,
		`line 28: domain "shop": descriptors[3].descriptors[1].rate_limit.replaces[1].name: required`,
	}, "\n")
	if err.Error() != want {
		t.Errorf("Parse error:\n%v\nwant:\n%s", err, want)
	}
}

func TestParseRulesFormats(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"both formats", "rules: []\ndomain: d\n", "line 1: a file holds native rules or one envoy domain, not both (put them in separate files)"},
		{"no domain", "descriptors:\n  - key: a\n", "line 1: domain: required"},
		{"unknown top-level field", "domain: d\nlimits: []\n", `line 2: unknown field "limits" (want rules, or domain and descriptors)`},
		{"bad yaml", "domain: [\n", "line 1: not valid YAML: did not find expected node content"},
		{"wrong type", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: lots\n", `line 6: domain "d": descriptors[0].rate_limit.requests_per_unit: must be a whole number, got "lots"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rules.Parse([]byte(tc.yaml)); err == nil || err.Error() != tc.want {
				t.Errorf("Parse = %v, want %q", err, tc.want)
			}
		})
	}
	// The configuration of envoyproxy/ratelimit's Example 4 that does not
	// match a two-entry descriptor loads.
	rs, err := rules.Parse([]byte("domain: example4\ndescriptors:\n  - key: key\n    value: value\n    rate_limit:\n      requests_per_unit: 300\n      unit: second\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rs.Summary(), "0 rules, 1 domain (example4: 1 limit)"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}

func TestLoadRulesDirectoryPrefixesFiles(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"a.yaml":       "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yaml":       "domain: d\ndescriptors: []\n",
		"c.yml":        "rules:\n  - name: x\n    limit: 0\n    window: 1m\n",
		".hidden.yaml": "not: [valid",
		"notes.txt":    "not yaml at all: [",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := rules.Load(dir)
	if err == nil {
		t.Fatal("Load: no error")
	}
	for _, want := range []string{
		filepath.Join(dir, "b.yaml") + `:1: domain "d": duplicate of the domain in ` + filepath.Join(dir, "a.yaml"),
		filepath.Join(dir, "c.yml") + ":3: rule 1 (x): limit: must be from 1 to 2^53, got 0",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if got, want := strings.Count(err.Error(), "\n")+1, 2; got != want {
		t.Errorf("error has %d lines, want %d:\n%v", got, want, err)
	}
}

// TestLoadMessages: each problem in a rules file is told as
// file:line: which rule or descriptor, which field, in the file's words:
// never a Go type, never a package's prefix.
func TestLoadMessages(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // after "<file>:"
	}{
		{"misspelled field", "rules:\n  - name: login\n    limit: 5\n    window: 1m\n    algoritm: sliding_log\n",
			[]string{`5: rule 1 (login): unknown field "algoritm" (want name, limit, window, calendar, time_zone, algorithm, strict, burst, shadow_mode, scope or leasable)`}},
		{"unknown algorithm", "rules:\n  - name: a\n    limit: 5\n    window: 1m\n  - name: b\n    limit: 5\n    window: 1m\n    algorithm: leaky\n",
			[]string{`8: rule 2 (b): algorithm: "leaky" is not sliding_window, sliding_window_two_bucket, fixed_window, token_bucket or sliding_log`}},
		{"wrong types", "rules:\n  - name: a\n    limit: five\n    window: [1m]\n    shadow_mode: maybe\n",
			[]string{
				`3: rule 1 (a): limit: must be a whole number, got "five"`,
				`4: rule 1 (a): window: must be a single value, got a list`,
				`5: rule 1 (a): shadow_mode: must be true or false, got "maybe"`,
			}},
		{"missing fields", "rules:\n  - name: a\n",
			[]string{"2: rule 1 (a): limit: required (1 to 2^53)", "2: rule 1 (a): window: required (a Go duration such as 1s, 1m, 1h), or a calendar (minute, hour, day, week, month or year)"}},
		{"not a list", "rules:\n  name: a\n", []string{"2: rules: must be a list of rules"}},
		{"rule not a mapping", "rules:\n  - a\n", []string{
			"2: rule 1: must be a mapping of name, limit, window, calendar, time_zone, algorithm, strict, burst, shadow_mode, scope or leasable",
			"2: rule 1: name: required",
			"2: rule 1: limit: required (1 to 2^53)",
			"2: rule 1: window: required (a Go duration such as 1s, 1m, 1h), or a calendar (minute, hour, day, week, month or year)",
		}},
		{"duplicate", "rules:\n  - {name: a, limit: 1, window: 1s}\n  - {name: a, limit: 1, window: 1s}\n",
			[]string{`3: rule 2 (a): name: "a" is already the name of rule 1 at FILE:2`}},
		{"not YAML", "rules:\n  - name: [\n", []string{"2: not valid YAML: did not find expected node content"}},
		{"envoy unknown algorithm", "domain: mail\ndescriptors:\n  - key: to\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      algorithm: leaky\n",
			[]string{`7: domain "mail": descriptors[0].rate_limit.algorithm: "leaky" is not sliding_window, sliding_window_two_bucket, fixed_window, token_bucket or sliding_log`}},
		{"envoy misspelled field", "domain: mail\ndescriptors:\n  - key: to\n    ratelimit: {unit: day, requests_per_unit: 5}\n",
			[]string{`4: domain "mail": descriptors[0]: unknown field "ratelimit" (want key, value, rate_limit, shadow_mode, share_threshold, quota_mode, metadata, detailed_metric, value_to_metric or descriptors)`}},
		{"envoy wrong types", "domain: mail\ndescriptors:\n  - key: to\n    rate_limit:\n      unit: day\n      requests_per_unit: -1\n    descriptors: {key: x}\n",
			[]string{
				`6: domain "mail": descriptors[0].rate_limit.requests_per_unit: must be a whole number, got "-1"`,
				`7: domain "mail": descriptors[0].descriptors: must be a list of descriptors, got a mapping`,
			}},
		{"envoy descriptors not a list", "domain: mail\ndescriptors: 3\n", []string{"2: descriptors: must be a list of descriptors"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			want := make([]string, len(tc.want))
			for i, w := range tc.want {
				want[i] = path + ":" + strings.ReplaceAll(w, "FILE", path)
			}
			_, err := rules.Load(path)
			if err == nil || err.Error() != strings.Join(want, "\n") {
				t.Errorf("Load error:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
			}
		})
	}
}

// FuzzParseRules checks that the rules loader never panics on any bytes,
// in either format, and that whatever it accepts is a set of valid,
// uniquely named rules that a lookup finds, with a summary.
func FuzzParseRules(f *testing.F) {
	files, _ := filepath.Glob("../testdata/envoyproxy*/*.yaml")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"rules:\n  - name: api-per-user\n    limit: 100\n    window: 1m\n",
		"rules:\n  - name: login\n    limit: 5\n    window: 15m\n    algorithm: fixed_window\n  - name: b\n    limit: 9007199254740992\n    window: 168h\n    algorithm: token_bucket\n",
		"rules:\n  - name: a\n    limit: 0\n    window: 999ms\n  - name: a\n    limit: 1\n    window: 1s\n    extra: 1\n",
		"rules: &a [*a, *a]\n",
		"rules:\n  - name: a\n    limit: 1\n    window: 1s\n    shadow_mode: true\n",
		"{}",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := rules.Parse(b)
		if err != nil {
			if rs != nil {
				t.Fatalf("Parse returned rules and an error: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, r := range rs.All() {
			if seen[r.Name] {
				t.Fatalf("duplicate rule %q accepted", r.Name)
			}
			seen[r.Name] = true
			if err := r.Limit.Validate(); err != nil {
				t.Fatalf("rule %q accepted with an invalid limit %+v: %v", r.Name, r.Limit, err)
			}
			if got, ok := rs.Lookup(r.Name); !ok || got != r {
				t.Fatalf("Lookup(%q) = %+v, %v; want %+v", r.Name, got, ok, r)
			}
		}
		if rs.Len() != len(seen) {
			t.Fatalf("Len() = %d, want %d", rs.Len(), len(seen))
		}
		if rs.Summary() == "" {
			t.Fatal("Summary() is empty")
		}
	})
}

// TestMatchSet: entries without an order match in the order of the
// domain's tree, trying another entry first where the first leads
// nowhere, and come back in that order; a shared wildcard rewrites its
// entry as Match does.
func TestMatchSet(t *testing.T) {
	rs, err := rules.Parse([]byte(`domain: d
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: path
        value: /api*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	dom := rs.Domain("d")
	for _, tc := range []struct {
		entries []rules.Entry
		limit   uint64
		order   string
	}{
		{[]rules.Entry{{Key: "path", Value: "/x"}}, 1, "path=/x"},
		{[]rules.Entry{{Key: "tenant", Value: "a"}}, 2, "tenant=a"},
		// path first leads to a leaf with an entry left: tenant first.
		{[]rules.Entry{{Key: "path", Value: "/api/v1"}, {Key: "tenant", Value: "a"}}, 3, "tenant=a path=/api*(shared)"},
		{[]rules.Entry{{Key: "path", Value: "/other"}, {Key: "tenant", Value: "a"}}, 0, ""},
		{[]rules.Entry{{Key: "user", Value: "a"}}, 0, ""},
	} {
		l, ordered := dom.MatchSet(tc.entries)
		var got uint64
		if l != nil {
			got = l.Limit.Limit
		}
		var parts []string
		for _, e := range ordered {
			p := e.Key + "=" + e.Value
			if e.Shared {
				p += "(shared)"
			}
			parts = append(parts, p)
		}
		if got != tc.limit || strings.Join(parts, " ") != tc.order {
			t.Errorf("MatchSet(%v) = limit %d, order %q; want %d, %q", tc.entries, got, strings.Join(parts, " "), tc.limit, tc.order)
		}
	}
}
