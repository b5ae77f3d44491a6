package main

import (
	"strings"
	"testing"
)

// testRule is the bench's default rule: -max-generator-busy 0.7,
// -min-server-busy 0.9.
var testRule = busyRule{MaxGen: 0.7, MinServer: 0.9}

func TestBusyRuleGeneratorBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    busyShares
		want bool
	}{
		// The rows the old rule (generator over 70% busy) refused although
		// the server's core was the one saturated.
		{"wrk busy, trivial server saturated", busyShares{Gen: 0.97, Server: 0.99}, false},
		{"generator over, server at the bound", busyShares{Gen: 0.75, Server: 0.9}, false},
		// Rows the old rule passed and this one refuses too: none. Rows
		// both refuse:
		{"generator over, server idle", busyShares{Gen: 0.98, Server: 0.6}, true},
		{"generator over, server just under", busyShares{Gen: 0.71, Server: 0.89}, true},
		{"generator over, server not measured", busyShares{Gen: 0.8}, true},
		// Rows neither refuses.
		{"generator at the bound", busyShares{Gen: 0.7, Server: 0.5}, false},
		{"both idle", busyShares{Gen: 0.3, Server: 0.4}, false},
		{"not measured", busyShares{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := testRule.generatorBound(tc.b); got != tc.want {
				t.Errorf("generatorBound(%+v) = %v, want %v", tc.b, got, tc.want)
			}
		})
	}
}

func TestBusyRuleRefusalAndUnsteady(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ceiling, node busyShares
		refused       string // "" or a substring of the refusal
		unsteady      string // "" or a substring of the unsteady note
	}{
		{"both saturated", busyShares{0.97, 0.99}, busyShares{0.4, 0.95}, "", ""},
		{"ceiling generator-bound", busyShares{0.97, 0.6}, busyShares{0.4, 0.95}, "ceiling's generator 97% busy > 70% with its server's core 60% busy < 90%", "server's core less busy than 90%: ceiling 60%"},
		{"node generator-bound", busyShares{0.5, 0.95}, busyShares{0.8, 0.5}, "node row's generator 80% busy > 70%", "less busy than 90%: row 50%"},
		{"neither saturated, no generator busy", busyShares{0.5, 0.8}, busyShares{0.4, 0.7}, "", "server's core less busy than 90%: ceiling 80%, row 70%"},
		{"server not measured", busyShares{0.5, 0.95}, busyShares{0.4, 0}, "", "server's core less busy than 90%: row not measured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := testRule.refusal(tc.ceiling, tc.node)
			if (got == "") != (tc.refused == "") || !strings.Contains(got, tc.refused) {
				t.Errorf("refusal(%+v, %+v) = %q, want %q", tc.ceiling, tc.node, got, tc.refused)
			}
			got = testRule.unsteady(tc.ceiling, tc.node)
			if (got == "") != (tc.unsteady == "") || !strings.Contains(got, tc.unsteady) {
				t.Errorf("unsteady(%+v, %+v) = %q, want %q", tc.ceiling, tc.node, got, tc.unsteady)
			}
		})
	}
}

// TestSummarizeServerBusy runs the rule through Summarize: a ceiling
// whose generator was 97% busy beside its saturated server is a ratio, not
// a refusal; the same generator beside a server's core at 80% is refused;
// pairs under the server bound are unsteady, peers' too.
func TestSummarizeServerBusy(t *testing.T) {
	rs := []Result{
		{Workload: "uniform10k", Mode: modeClose, Protocol: protoJSON, Store: "redis", ReqPerSec: 7000, GenBusy: 0.3, ServerBusy: 0.99,
			PairedCeiling: ptr(14000.0), PairedCeilingGenBusy: ptr(0.97), PairedCeilingServerBusy: ptr(0.99)},
		{Workload: "uniform10k", Mode: modeClose, Protocol: protoJSON, Store: "memory", ReqPerSec: 9000, GenBusy: 0.4, ServerBusy: 0.85,
			PairedCeiling: ptr(10000.0), PairedCeilingGenBusy: ptr(0.97), PairedCeilingServerBusy: ptr(0.8)},
		{Workload: "uniform10k", Mode: modeClose, Protocol: protoEnvoy, Store: storePeerRatelimit, ReqPerSec: 3000, GenBusy: 0.2, ServerBusy: 0.7,
			PairedCeiling: ptr(20000.0), PairedCeilingGenBusy: ptr(0.6), PairedCeilingServerBusy: ptr(0.95)},
		{Workload: "uniform10k", Mode: modeClose, Protocol: protoEnvoy, Store: storePeerGubernator, ReqPerSec: 3000, GenBusy: 0.2, ServerBusy: 0.95,
			PairedCeiling: ptr(20000.0), PairedCeilingGenBusy: ptr(0.6), PairedCeilingServerBusy: ptr(0.95)},
	}
	gs := Summarize(rs, testRule)
	if got, want := len(gs), 2; got != want {
		t.Fatalf("Summarize() = %d goals, want %d: %+v", got, want, gs)
	}
	red, mem := gs[0], gs[1]
	if red.Refused != "" || !red.RatioMet() || red.Unsteady != "" {
		t.Errorf("redis goal = %+v, want ratio 0.5 met: its ceiling's server core was saturated", red)
	}
	if red.CeilingGenBusy != 0.97 || red.CeilingServerBusy != 0.99 || red.ServerBusy != 0.99 {
		t.Errorf("redis goal busy shares = %v/%v ceiling, %v node, want 0.97/0.99, 0.99", red.CeilingGenBusy, red.CeilingServerBusy, red.ServerBusy)
	}
	if !strings.Contains(mem.Refused, "ceiling's generator 97% busy") || mem.RatioMet() {
		t.Errorf("memory goal = %+v, want its ratio refused: generator 97%% busy, server's core 80%%", mem)
	}
	summaryContains(t, gs, "99% / 99%", "85% / 80%")

	got := Unsteadies(gs, rs, testRule)
	want := []string{
		"Connect JSON, memory, 10k keys allowed: server's core less busy than 90%: ceiling 80%, row 85%",
		"uniform10k/closed/envoy-rls/" + storePeerRatelimit + ": server's core less busy than 90%: row 70%",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Unsteadies() = %q, want %q", got, want)
	}
}

func TestParseFlagsBusy(t *testing.T) {
	c, err := parseFlags(nil)
	if err != nil {
		t.Fatalf("parseFlags() error = %v", err)
	}
	if c.MaxGenBusy != 0.7 || c.MinServerBusy != 0.9 {
		t.Errorf("parseFlags() busy bounds = %v, %v, want 0.7, 0.9", c.MaxGenBusy, c.MinServerBusy)
	}
	for _, v := range []string{"0", "-0.5", "1.5", "90"} {
		if _, err := parseFlags([]string{"-min-server-busy", v}); err == nil {
			t.Errorf("parseFlags(-min-server-busy %s) error = nil, want one", v)
		}
	}
}
