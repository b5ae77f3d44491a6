package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region/redistest"

	"github.com/rlcluster/rlcluster/loadtest/internal/rlbuild"
)

// TestShortModeEndToEnd runs the harness's -short mode against a real
// rlnode (built from ./cmd/rlnode) and a real redis-server, each row
// bounded to about a second and maxRequests requests: every row must
// complete without errors, the Redis rows must have counted script calls,
// and the Envoy RLS rows (go-control-plane's client against the grpc-go
// ceiling and the node) must decide as their workloads say. No timing is
// asserted.
func TestShortModeEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rlnode and drives load for several seconds")
	}
	redisServer := redistest.Bin(t, "redis-server")
	redisBench := redistest.Bin(t, "redis-benchmark")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	rlnode, err := rlbuild.Rlnode(ctx, dir)
	if err != nil {
		t.Fatalf("rlbuild.Rlnode() error = %v", err)
	}
	out := filepath.Join(dir, "bench.json")
	var log bytes.Buffer
	start := time.Now()
	const maxRequests = 3000
	err = run(ctx, []string{"-short", "-pin=false", "-conns", "16", "-max-requests", strconv.Itoa(maxRequests), "-rlnode", rlnode, "-wrk", redistest.Bin(t, "wrk"),
		"-redis-server", redisServer, "-redis-benchmark", redisBench, "-out", out}, &log)
	t.Logf("harness output (%v):\n%s", time.Since(start).Round(time.Millisecond), log.String())
	if err != nil {
		t.Fatalf("run(-short) error = %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("read -out: %v", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("decode -out: %v", err)
	}
	if s := rep.Machine.Steal; s != -1 && (s < 0 || s > 1) {
		t.Errorf("steal = %v, want a share from 0 to 1 (or -1 without /proc/stat)", s)
	}
	stores := map[string]int{}
	envoy := map[string]bool{}
	binaryRows := 0
	for _, r := range rep.Results {
		stores[r.Store]++
		if r.Protocol == protoEnvoy {
			envoy[r.Workload+"/"+r.Mode+"/"+r.Store] = true
		}
		if r.Workload != "redis-benchmark" && r.Requests+r.Errors > maxRequests {
			t.Errorf("%s/%s/%s/%s: %d requests, want at most -max-requests %d",
				r.Workload, r.Mode, r.Protocol, r.Store, r.Requests+r.Errors, maxRequests)
		}
		if r.Requests == 0 || r.Errors != 0 {
			t.Errorf("%s/%s/%s/%s: %d requests, %d errors (%s), want requests and no errors",
				r.Workload, r.Mode, r.Protocol, r.Store, r.Requests, r.Errors, r.FirstError)
		}
		// The generator's and the server's busy shares are their CPU
		// over the run's wall time per core (/proc ticks of 10 ms round
		// them): a few thousand requests cost each some, and neither can
		// use more than its cores.
		if r.Workload != "redis-benchmark" && (r.GenBusy <= 0 || r.GenBusy > 1.5) {
			t.Errorf("%s/%s/%s/%s: generator busy %.3f, want in (0, 1.5]", r.Workload, r.Mode, r.Protocol, r.Store, r.GenBusy)
		}
		if r.Workload != "redis-benchmark" && (r.ServerBusy <= 0 || r.ServerBusy > 1.5) {
			t.Errorf("%s/%s/%s/%s: server busy %.3f, want in (0, 1.5]", r.Workload, r.Mode, r.Protocol, r.Store, r.ServerBusy)
		}
		if r.Store == "redis" && r.ScriptCalls == nil {
			t.Errorf("%s/%s/%s/redis: no script call count", r.Workload, r.Mode, r.Protocol)
		}
		if r.Store == "redis" && r.Workload == "uniform10k" && r.Mode == "closed" && (r.Denied != 0 || r.Allowed == 0) {
			t.Errorf("uniform10k: %d denied, want 0", r.Denied)
		}
		if r.Protocol == protoBinary && isNode(r.Store) {
			// wrk posts protobuf bodies; the node's metrics count what
			// it decided of them.
			binaryRows++
			if r.Allowed == 0 || r.Denied != 0 {
				t.Errorf("%s/%s/%s/%s: %d allowed, %d denied, want all allowed", r.Workload, r.Mode, r.Protocol, r.Store, r.Allowed, r.Denied)
			}
		}
		if r.Workload == "hotkey" && r.Denied <= r.Allowed {
			t.Errorf("hotkey: %d allowed, %d denied, want mostly denied", r.Allowed, r.Denied)
		}
	}
	for _, s := range []string{"ceiling", "redis", "memory", "redis-server"} {
		if stores[s] == 0 {
			t.Errorf("no %s row in %s", s, b)
		}
	}
	for _, row := range []string{"ceiling/closed/ceiling", "uniform10k/closed/redis", "hotkey/closed/redis", "hotkey/open/redis"} {
		if !envoy[row] {
			t.Errorf("no Envoy RLS row %s in %s", row, b)
		}
	}
	if binaryRows == 0 {
		t.Errorf("no Connect protobuf row in %s", b)
	}
	if len(rep.Summary) == 0 {
		t.Errorf("no summary of the goals in %s", b)
	}
}
