package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

func TestParseWrk(t *testing.T) {
	o, err := parseWrk("Running 1s test\nRLBENCH 1000 2000000 0 1 0 4 0 150 900 1200 5000\n")
	if err != nil {
		t.Fatalf("parseWrk() error = %v", err)
	}
	if o.Requests != 996 || o.Errors != 5 || o.Elapsed != 2*time.Second {
		t.Errorf("parseWrk() = %+v, want 996 answered requests (4 non-2xx), 5 errors over 2s", o)
	}
	if o.Latencies.P50 != 150*time.Microsecond || o.Latencies.P99 != 1200*time.Microsecond || o.Latencies.Max != 5*time.Millisecond {
		t.Errorf("parseWrk() latencies = %+v, want p50 150us, p99 1.2ms, max 5ms", o.Latencies)
	}
	if o.FirstErr == nil || !strings.Contains(o.FirstErr.Error(), "4 non-2xx") {
		t.Errorf("parseWrk() first error = %v, want the counts", o.FirstErr)
	}
	for _, bad := range []string{"", "RLBENCH 1 2 3", "RLBENCH 1 0 0 0 0 0 0 1 1 1 1", "RLBENCH x 1 0 0 0 0 0 1 1 1 1"} {
		if _, err := parseWrk(bad); err == nil {
			t.Errorf("parseWrk(%q) = nil error, want one", bad)
		}
	}
}

func TestParseDecisions(t *testing.T) {
	m := `# HELP rlcluster_decisions_total ...
rlcluster_decisions_total{outcome="allowed",rule="inline"} 1.5e+06
rlcluster_decisions_total{outcome="allowed",rule="r"} 7
rlcluster_decisions_total{outcome="denied",rule="inline"} 30
rlcluster_decisions_total{outcome="error",rule="inline"} 2
rlcluster_decisions_totally{outcome="denied"} 9
`
	if a, d := parseDecisions(m); a != 1_500_007 || d != 30 {
		t.Errorf("parseDecisions() = %d, %d, want 1500007 allowed, 30 denied", a, d)
	}
	g := "# TYPE go_memstats_mallocs_total counter\ngo_memstats_mallocs_total 1.234e+06\ngo_memstats_mallocs_total_other 5\n"
	if got := metricValue(g, "go_memstats_mallocs_total"); got != 1_234_000 {
		t.Errorf("metricValue() = %v, want 1.234e6", got)
	}
	if got := metricValue(g, "go_memstats_alloc_bytes_total"); got != 0 {
		t.Errorf("metricValue(absent) = %v, want 0", got)
	}
}

// TestWrkAgainstCeiling drives the trivial handler with wrk for a second,
// through the script the bench writes, bounded to 2,000 requests.
func TestWrkAgainstCeiling(t *testing.T) {
	if testing.Short() {
		t.Skip("drives load for a second")
	}
	bin := redistest.Bin(t, "wrk")
	base := ceilingServer(t)
	o, err := runWrk(context.Background(), bin, nil, t.TempDir(), base, testUniform(), protoJSON, 4, time.Second, 2000)
	if err != nil {
		t.Fatalf("runWrk() error = %v", err)
	}
	if o.Requests == 0 || o.Requests > 2000 || o.Errors != 0 {
		t.Errorf("runWrk() = %+v (%v), want 1 to 2000 requests and no errors", o.Outcome, o.FirstErr)
	}
	if o.CPU <= 0 || o.Latencies.P50 <= 0 || o.Latencies.P99 < o.Latencies.P50 {
		t.Errorf("runWrk() = %+v, want wrk's CPU time and ordered latencies", o)
	}
}

// TestWrkProtoBodies drives a recording server with wrk through the
// script of a protobuf row: every request carries one of the workload's
// protobuf bodies, byte for byte, as application/proto.
func TestWrkProtoBodies(t *testing.T) {
	bin := redistest.Bin(t, "wrk")
	w := testUniform()
	want := map[string]bool{}
	for _, b := range w.proto {
		want[string(b)] = true
	}
	var mu sync.Mutex
	var n, bad int
	var firstBad string
	srv := apitest.Serve(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		mu.Lock()
		n++
		if ct := r.Header.Get("Content-Type"); err != nil || ct != "application/proto" || !want[string(body)] {
			if bad++; bad == 1 {
				firstBad = fmt.Sprintf("%s %q (%v)", ct, body, err)
			}
		}
		mu.Unlock()
		_, _ = rw.Write(ceilingProto)
	}))
	o, err := runWrk(context.Background(), bin, nil, t.TempDir(), srv.URL, w, protoBinary, 4, time.Second, 500)
	if err != nil {
		t.Fatalf("runWrk() error = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if o.Requests == 0 || o.Errors != 0 || n == 0 {
		t.Fatalf("runWrk() = %+v (%v), server saw %d requests; want some and no errors", o.Outcome, o.FirstErr, n)
	}
	if bad > 0 {
		t.Errorf("%d of %d requests were not a workload body as application/proto; first: %s", bad, n, firstBad)
	}
}
