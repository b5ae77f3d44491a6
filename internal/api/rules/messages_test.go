package rules_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// TestLoadMessages: each problem in a rules file is told as
// file:line: which rule or descriptor, which field, in the file's words:
// never a Go type, never a package's prefix.
func TestLoadMessages(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // after "<file>:"
	}{
		{"misspelled field", "rules:\n  - name: login\n    limit: 5\n    window: 1m\n    algoritm: sliding_log\n",
			[]string{`5: rule 1 (login): unknown field "algoritm" (want name, limit, window, algorithm, strict, shadow_mode or scope)`}},
		{"unknown algorithm", "rules:\n  - name: a\n    limit: 5\n    window: 1m\n  - name: b\n    limit: 5\n    window: 1m\n    algorithm: leaky\n",
			[]string{`8: rule 2 (b): algorithm: "leaky" is not sliding_window, sliding_window_two_bucket, fixed_window, token_bucket or sliding_log`}},
		{"wrong types", "rules:\n  - name: a\n    limit: five\n    window: [1m]\n    shadow_mode: maybe\n",
			[]string{
				`3: rule 1 (a): limit: must be a whole number, got "five"`,
				`4: rule 1 (a): window: must be a single value, got a list`,
				`5: rule 1 (a): shadow_mode: must be true or false, got "maybe"`,
			}},
		{"missing fields", "rules:\n  - name: a\n",
			[]string{"2: rule 1 (a): limit: required (1 to 2^53)", "2: rule 1 (a): window: required (a Go duration such as 1s, 1m, 1h)"}},
		{"not a list", "rules:\n  name: a\n", []string{"2: rules: must be a list of rules"}},
		{"rule not a mapping", "rules:\n  - a\n", []string{
			"2: rule 1: must be a mapping of name, limit, window, algorithm, strict, shadow_mode or scope",
			"2: rule 1: name: required",
			"2: rule 1: limit: required (1 to 2^53)",
			"2: rule 1: window: required (a Go duration such as 1s, 1m, 1h)",
		}},
		{"duplicate", "rules:\n  - {name: a, limit: 1, window: 1s}\n  - {name: a, limit: 1, window: 1s}\n",
			[]string{`3: rule 2 (a): name: "a" is already the name of rule 1 at FILE:2`}},
		{"not YAML", "rules:\n  - name: [\n", []string{"2: not valid YAML: did not find expected node content"}},
		{"envoy unknown algorithm", "domain: mail\ndescriptors:\n  - key: to\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      algorithm: leaky\n",
			[]string{`7: domain "mail": descriptors[0].rate_limit.algorithm: "leaky" is not sliding_window, sliding_window_two_bucket, fixed_window, token_bucket or sliding_log`}},
		{"envoy misspelled field", "domain: mail\ndescriptors:\n  - key: to\n    ratelimit: {unit: day, requests_per_unit: 5}\n",
			[]string{`4: domain "mail": descriptors[0]: unknown field "ratelimit" (want key, value, rate_limit, shadow_mode, detailed_metric, value_to_metric or descriptors)`}},
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
