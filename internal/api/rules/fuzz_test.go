package rules_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// FuzzParseRules checks that the rules loader never panics on any bytes,
// in either format, and that whatever it accepts is a set of valid,
// uniquely named rules that a lookup finds, with a summary.
func FuzzParseRules(f *testing.F) {
	files, _ := filepath.Glob("../testdata/envoyproxy/*.yaml")
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
