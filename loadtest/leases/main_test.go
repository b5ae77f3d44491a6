package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestRun leases a rule of 100 per 2 s on one in-process node named as
// two regions, at 5x for two windows: the run prints each region's
// figures and passes a bound past its leases' slack, and fails one below
// what was admitted.
func TestRun(t *testing.T) {
	rs, err := rules.New([]rules.Rule{{Name: "leased", Limit: window.Limit{Limit: 100, Window: 2 * time.Second}, Leasable: true}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Rules: rs})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(apitest.Serve(t, h).URL, "http://")
	args := []string{"-targets", "a=" + addr + ";b=" + addr, "-limit", "100", "-window", "2s", "-factor", "5",
		"-envoys", "4", "-interval", "100ms", "-duration", "4s"}
	var out bytes.Buffer
	if err := run(context.Background(), append(args, "-bound", "1.3"), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	for _, want := range []string{"a: offered", "b: offered", "max ", "leases: PASS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, &out)
		}
	}
	out.Reset()
	if err := run(context.Background(), append(args, "-bound", "0.2"), &out); err == nil || !strings.Contains(err.Error(), "past -bound 0.200") {
		t.Errorf("run with a bound below what was admitted: %v, want it refused", err)
	}
}

// TestParse refuses what cannot run.
func TestParse(t *testing.T) {
	for _, args := range [][]string{
		{"-targets", "nothing"},
		{"-envoys", "1"},
		{"-heavy", "1"},
		{"-limit", "0"},
	} {
		if _, err := parse(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parse(%q): no error", args)
		}
	}
}
