package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"testing"
)

// TestValidateEnvoyMonth: an envoyproxy/ratelimit configuration with units
// month and year, as ratelimit's own docs write one, loads unchanged in
// rlnode validate.
func TestValidateEnvoyMonth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quota.yaml")
	writeAtomic(t, path, `domain: quota
descriptors:
  - key: api_key
    rate_limit:
      unit: month
      requests_per_unit: 10000
  - key: api_key
    value: enterprise
    rate_limit:
      unit: year
      requests_per_unit: 1000000
`)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"validate", "--rules", path}, env(nil), &out, io.Discard); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if got, want := out.String(), path+": valid: 0 rules, 1 domain (quota: 2 limits)\n"; got != want {
		t.Errorf("validate printed %q, want %q", got, want)
	}
}
