package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/region"
)

// TestLimitFlags: the bounds on input come from flags or RLNODE_ variables,
// bad values are refused, -help documents them, and a running node applies
// them with invalid_argument errors naming the field.
func TestLimitFlags(t *testing.T) {
	c, err := parseConfig([]string{"--max-batch", "7"}, env(map[string]string{
		"RLNODE_MAX_BATCH": "9", "RLNODE_MAX_REQUEST_BYTES": "4096", "RLNODE_MAX_HITS": "50",
		"RLNODE_MAX_WINDOW": "1h", "RLNODE_MAX_LOG_LIMIT": "77", "RLNODE_MAX_RULES": "3",
		"RLNODE_ON_STORE_FAILURE": "closed", "RLNODE_STORE_TIMEOUT": "20ms",
		"RLNODE_MAX_STREAMS": "8", "RLNODE_MAX_REQUEST_MEMORY": "2",
	}), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxBatch != 7 || c.MaxRequestBytes != 4096 || c.MaxHits != 50 || c.MaxWindow != time.Hour || c.MaxLogLimit != 77 ||
		c.MaxRules != 3 || c.OnStoreFailure != "closed" || c.StoreTimeout != 20*time.Millisecond ||
		c.MaxStreams != 8 || c.MaxRequestMemoryMiB != 2 {
		t.Errorf("parseConfig = %+v", c)
	}
	checkRefused(t, []refusal{
		{[]string{"--max-batch", "0"}, "--max-batch: 0, want at least 1"},
		{[]string{"--max-key-bytes", "4096"}, "--max-key-bytes: 4096, want at most 3946 (counter keys, namespace prefix included, must fit the 4096 bytes replication carries)"},
		{[]string{"--max-request-bytes", "10"}, "--max-request-bytes: 10, want at least 64"},
		{[]string{"--max-streams", "0"}, "--max-streams: 0, want 1 to 1000"},
		{[]string{"--max-request-memory", "0"}, "--max-request-memory: 0, want 1 to 1048576 MiB"},
		{[]string{"--max-hits", "0"}, "--max-hits: 0, want at least 1"},
		{[]string{"--max-window", "200h"}, "--max-inline-window: 200h0m0s, want 1s to 168h0m0s"},
		{[]string{"--max-inline-window", "200h"}, "--max-inline-window: 200h0m0s, want 1s to 168h0m0s"},
		{[]string{"--max-log-limit", "0"}, "--max-log-limit: 0, want at least 1"},
		{[]string{"--max-rules", "0"}, "--max-rules: 0, want at least 1"},
		{[]string{"--on-store-failure", "maybe"}, `--on-store-failure: "maybe" is not local, open or closed`},
		{[]string{"--store-timeout", "0s"}, "--store-timeout: 0s, want 1ms to 1m"},
	})
	// Too many rules stop the node.
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	writeFile(t, rules, "rules:\n  - name: a\n    limit: 1\n    window: 1s\n  - name: b\n    limit: 1\n    window: 1s\n")
	err = run(context.Background(), []string{"--listen", "127.0.0.1:0", "--rules", rules, "--max-rules", "1"}, env(nil), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "2 limits (rules and envoy descriptors), more than the maximum of 1 (--max-rules)") {
		t.Errorf("run with 2 rules and --max-rules 1 = %v, want the rules refused", err)
	}

	n := startNode(t, []string{"--listen", "127.0.0.1:0", "--max-key-bytes", "4", "--max-batch", "2", "--max-hits", "3"}, env(nil))
	for _, tc := range []struct {
		method, body, want string
	}{
		{"Check", `{"key":"12345","limit":{"limit":10,"window":"60s"}}`, "key: 5 bytes, more than the maximum of 4"},
		{"Check", `{"key":"a","hits":4,"limit":{"limit":10,"window":"60s"}}`, "hits: 4 is more than the maximum of 3"},
		{"CheckBatch", `{"checks":[{"key":"a"},{"key":"b"},{"key":"c"}]}`, "checks: more than the maximum of 2 checks"},
	} {
		code, body := post(t, n.base+"/ratelimit.v1.RateLimitService/"+tc.method, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, `"code":"invalid_argument"`) || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s = %d %s, want 400 invalid_argument %q", tc.method, tc.body, code, body, tc.want)
		}
	}
}

// TestFlagsCheckedByTheirPackages: a flag's value that the package it
// configures refuses (api, forwardauth, region, gossip Validate) is named
// by its flag, once, beside the command line's own refusals, before the
// node starts.
func TestFlagsCheckedByTheirPackages(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-key-bytes", "-5"}, "--max-key-bytes: 0, want at least 1"},
		{[]string{"--max-request-bytes", "0"}, "--max-request-bytes: 0, want at least 64"},
		{[]string{"--max-window", "0s"}, "--max-inline-window: 0s, want 1s to 168h0m0s"},
		{[]string{"--max-key-bytes", "4096", "--region", strings.Repeat("r", 65), "--max-window", "200h", "--max-batch", "0"},
			"--max-batch: 0, want at least 1\n" +
				"--max-key-bytes: 4096, want at most 3946 (counter keys, namespace prefix included, must fit the 4096 bytes replication carries)\n" +
				"--max-inline-window: 200h0m0s, want 1s to 168h0m0s\n" +
				"--region: 65 bytes, want at most 64"},
		// With gossip, region's and gossip's bounds on --region: the
		// first refusal stands alone.
		{[]string{"--gossip-addr", "127.0.0.1:0", "--region", strings.Repeat("r", 65)}, "--region: 65 bytes, want at most 64"},
		{[]string{"--gossip-addr", "127.0.0.1:0", "--flush-interval", "-1s"}, "--flush-interval: -1s, want 1ms to 10s"},
		{[]string{"--gossip-addr", "nowhere"}, `--gossip-addr: "nowhere": address nowhere: missing port in address`},
		{[]string{"--gossip-addr", "127.0.0.1:0", "--node-name", strings.Repeat("n", 256)}, "--node-name: 256 bytes, want at most 255 bytes of UTF-8"},
		{[]string{"--check-deny-status", "500", "--check-path", "/metrics"},
			"--check-path: \"/metrics\" is already served\n--check-deny-status: 500, want 429 or 403"},
	} {
		_, err := parseConfig(tc.args, env(nil), io.Discard, io.Discard)
		if got := fmt.Sprint(err); got != tc.want {
			t.Errorf("parseConfig(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
	err := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-heartbeat", "1s", "--burst-guard-suspicion", "1500ms"},
		env(nil), io.Discard, io.Discard)
	if got, want := fmt.Sprint(err), "--burst-guard-suspicion: 1.5s, want at least twice the heartbeat interval, 2s"; got != want {
		t.Errorf("run(--gossip-heartbeat 1s --burst-guard-suspicion 1500ms) = %q, want %q", got, want)
	}
}

// TestHTTPServerBounds: the API's server cuts off a request whose body
// trickles in (a slow client holding a connection and a goroutine) and
// refuses huge headers, while a server-reflection stream outlives both
// deadlines. The deadlines are shortened here so that the test is quick;
// newHTTPServer's own values are checked first.
func TestHTTPServerBounds(t *testing.T) {
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(h, slog.New(slog.DiscardHandler))
	if srv.ReadTimeout != httpReadTimeout || srv.WriteTimeout != httpWriteTimeout || srv.MaxHeaderBytes != 64<<10 {
		t.Errorf("newHTTPServer: ReadTimeout %v WriteTimeout %v MaxHeaderBytes %d, want %v %v %d",
			srv.ReadTimeout, srv.WriteTimeout, srv.MaxHeaderBytes, httpReadTimeout, httpWriteTimeout, 64<<10)
	}
	// As in production, the write deadline is later than the read one, so
	// that a request cut off at the read deadline still gets its answer.
	const deadline = 300 * time.Millisecond
	srv.ReadTimeout, srv.WriteTimeout = deadline, 2*deadline
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()

	// A body sent one byte at a time, slower than the read deadline.
	body := `{"key":"k","limit":{"limit":"3","window":"60s"}}`
	pr, pw := io.Pipe()
	go func() {
		for i := range body {
			if _, err := pw.Write([]byte(body[i : i+1])); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = pw.Close()
	}()
	t.Cleanup(func() { _ = pw.CloseWithError(io.ErrClosedPipe) })
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, base+"/ratelimit.v1.RateLimitService/Check", pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("trickled body: %v after %v, want a deadline_exceeded answer", err, time.Since(start))
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(b), `"code":"deadline_exceeded"`) {
		t.Errorf("trickled body: %d %s, want 504 deadline_exceeded", resp.StatusCode, b)
	}
	if took < deadline || took > 3*time.Second {
		t.Errorf("trickled body cut off after %v, want at the read deadline, %v", took, deadline)
	}

	// Headers over 64 KiB.
	req, _ = http.NewRequest(http.MethodGet, base+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 80<<10))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("80 KiB of headers: %v, want a 431 answer", err)
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusRequestHeaderFieldsTooLarge; got != want {
		t.Errorf("80 KiB of headers: %d, want %d", got, want)
	}

	// A reflection stream outlives both deadlines.
	stream := grpcreflect.NewClient(apitest.H2CClient(t), base, connect.WithGRPC()).NewStream(context.Background())
	t.Cleanup(func() { stream.Close() })
	if _, err := stream.ListServices(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * deadline) // the behaviour under test is a wall-clock deadline
	if _, err := stream.ListServices(); err != nil {
		t.Errorf("reflection stream after %v: %v, want it still open past both deadlines", 3*deadline, err)
	}
}

// TestMaxConnections: with --max-connections 1, a client that holds the
// one connection idle for a second after its request gives way to the
// next client: its connection is closed and the next one served at once.
func TestMaxConnections(t *testing.T) {
	base := startNode(t, []string{"--listen", "127.0.0.1:0", "--max-connections", "1"}, env(nil)).base
	hold, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	// The held connection is served: the node answers on it.
	if _, err := hold.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	if _, err := hold.Read(buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Fatalf("held connection: %q, %v", buf, err)
	}
	time.Sleep(1100 * time.Millisecond) // idle for more than a second: it gives way
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := c.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("second connection while the first is held idle: %v", err)
	}
	resp.Body.Close()
	if took := time.Since(start); took > time.Second {
		t.Errorf("second connection served after %v, want at once", took)
	}
	// The idle one was closed to make room.
	_ = hold.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, hold); err != nil { // the rest of its answer, then EOF
		t.Errorf("held idle connection: %v, want it closed by the node", err)
	}
}
