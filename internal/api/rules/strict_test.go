package rules_test

import (
	"strings"
	"testing"

	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/window"
)

// The sliding window's modes in both rule formats: strict and the
// two-bucket counter by name; strict with another algorithm is an error
// that names the field.
func TestStrictAndTwoBucket(t *testing.T) {
	set, err := rules.Parse([]byte("rules:\n" +
		"  - {name: a, limit: 5, window: 1m, strict: true}\n" +
		"  - {name: b, limit: 5, window: 1m, algorithm: sliding_window_two_bucket}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := set.Lookup("a"); !r.Limit.Strict || r.Limit.Algorithm != window.SlidingWindow {
		t.Errorf("rule a = %+v, want a strict sliding window", r.Limit)
	}
	if r, _ := set.Lookup("b"); r.Limit.Strict || r.Limit.Algorithm != window.SlidingWindowTwoBucket {
		t.Errorf("rule b = %+v, want the two-bucket counter", r.Limit)
	}
	for _, tc := range []struct{ in, want string }{
		{"rules:\n  - {name: a, limit: 5, window: 1m, algorithm: fixed_window, strict: true}\n",
			"rule 1 (a): strict: applies to sliding_window only, not fixed_window"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket, strict: true}\n",
			`domain "d": descriptors[0].rate_limit.strict: applies to sliding_window only, not token_bucket`},
	} {
		_, err := rules.Parse([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
	if _, err := rules.Parse([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, strict: true}\n")); err != nil {
		t.Errorf("Envoy format with strict: %v", err)
	}
}
