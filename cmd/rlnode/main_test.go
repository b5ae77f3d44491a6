package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// refusal is a command line that parseConfig must refuse with an error
// containing want.
type refusal struct {
	args []string
	want string
}

// checkRefused asserts that parseConfig, with no environment, refuses each
// case with an error containing its want, and returns the errors in order.
func checkRefused(t *testing.T, cases []refusal) []error {
	t.Helper()
	errs := make([]error, len(cases))
	for i, tc := range cases {
		_, err := parseConfig(tc.args, env(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
		errs[i] = err
	}
	return errs
}

var listenRE = regexp.MustCompile(`msg="rlnode listening" addr=(\S+)`)

// node is an rlnode that startNode runs in the background.
type node struct {
	t      *testing.T
	base   string          // the API's URL: http://host:port
	logs   *logtest.Buffer // what the node logs
	cancel context.CancelFunc
	done   <-chan error // run's result
	waited bool
}

// startNode runs run(args, getenv) in the background and returns once the
// node logs its address, failing t if run returns first or 20s pass. The
// node runs until stop (or wait, after a signal); t's cleanup stops it
// otherwise.
func startNode(t *testing.T, args []string, getenv func(string) string) *node {
	t.Helper()
	return startNodeWithClock(t, args, getenv, time.Now)
}

// startNodeWithClock is startNode with now as the node's clock (see
// runWithClock).
func startNodeWithClock(t *testing.T, args []string, getenv func(string) string, now func() time.Time) *node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	n := &node{t: t, logs: &logtest.Buffer{}, cancel: cancel, done: done}
	go func() { done <- runWithClock(ctx, args, getenv, io.Discard, n.logs, now) }()
	t.Cleanup(n.stop)
	var runErr error
	_, listening := polltest.Poll(20*time.Second, func() bool {
		if m := listenRE.FindStringSubmatch(n.logs.String()); m != nil {
			n.base = "http://" + m[1]
			return true
		}
		select {
		case runErr = <-done:
			n.waited = true
			return true
		default:
			return false
		}
	})
	switch {
	case n.waited:
		t.Fatalf("run returned before listening: %v\nlogs:\n%s", runErr, n.logs)
	case !listening:
		t.Fatalf("node did not log its address within 20s; logs:\n%s", n.logs)
	}
	return n
}

// stop cancels the node's run and waits for it to return, failing t
// unless it returns nil within 20s. Calls after the first do nothing.
func (n *node) stop() {
	n.t.Helper()
	n.cancel()
	n.wait()
}

// wait waits for the node's run to return without cancelling it (as after
// SIGTERM), failing t unless it returns nil within 20s. Calls after the
// first do nothing.
func (n *node) wait() {
	n.t.Helper()
	if n.waited {
		return
	}
	n.waited = true
	select {
	case err := <-n.done:
		if err != nil {
			n.t.Fatalf("run = %v, want nil\nlogs:\n%s", err, n.logs)
		}
	case <-time.After(20 * time.Second):
		n.t.Fatalf("run did not return within 20s of shutdown; logs:\n%s", n.logs)
	}
}

// stopNodes stops nodes together, as cancelling a context they shared
// would: it cancels every node's run, then waits for each in turn.
func stopNodes(nodes ...*node) {
	for _, n := range nodes {
		n.t.Helper()
		n.cancel()
	}
	for _, n := range nodes {
		n.t.Helper()
		n.stop()
	}
}

// writeFile writes s to path (mode 0600), failing t on error.
func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// post sends body as the README's curl does and returns the answer.
func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	return postAs(t, url, "", body)
}

// postAs is post with tok as the bearer token, when tok is not empty.
func postAs(t *testing.T, url, tok, body string) (int, string) {
	t.Helper()
	var hdr map[string]string
	if tok != "" {
		hdr = map[string]string{"Authorization": "Bearer " + tok}
	}
	resp, b := apitest.Post(t, url, body, hdr)
	return resp.StatusCode, b
}

// exercise sends the README's requests: a 3-per-week inline limit admits 3
// and denies the 4th; a bad request names the field.
func exercise(t *testing.T, base string) {
	t.Helper()
	check := base + "/ratelimit.v1.RateLimitService/Check"
	req := `{"key":"alice","limit":{"limit":3,"window":"604800s"}}`
	for i := 1; i <= 4; i++ {
		code, body := post(t, check, req)
		if code != http.StatusOK {
			t.Fatalf("Check %d: status %d: %s", i, code, body)
		}
		if want := i <= 3; strings.Contains(body, `"allowed":true`) != want {
			t.Errorf("Check %d = %s, want allowed %v", i, body, want)
		}
	}
	code, body := post(t, check, `{"key":"","limit":{"limit":3,"window":"60s"}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, `"code":"invalid_argument"`) || !strings.Contains(body, "key: must not be empty") {
		t.Errorf("empty key: %d %s, want 400 invalid_argument naming the key", code, body)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, resp.StatusCode, b)
		}
		if p == "/metrics" && !strings.Contains(string(b), `rlcluster_decisions_total{outcome="denied",rule="inline"} 1`) {
			t.Errorf("/metrics lacks the denial:\n%s", b)
		}
	}
}

// TestRunMemorySIGTERM runs a node with no flags (the listen address comes
// from the environment, to get a free port) and stops it with SIGTERM.
func TestRunMemorySIGTERM(t *testing.T) {
	n := startNode(t, nil, env(map[string]string{"RLNODE_LISTEN": "127.0.0.1:0"}))
	if !strings.Contains(n.logs.String(), "store=memory") {
		t.Errorf("logs do not name the store:\n%s", n.logs)
	}
	exercise(t, n.base)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	n.wait()
	if !strings.Contains(n.logs.String(), "msg=stopped") {
		t.Errorf("logs lack the shutdown:\n%s", n.logs)
	}
}

func TestRunRedis(t *testing.T) {
	srv := redistest.Start(t)
	n := startNode(t, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL(), "--region", "eu"}, env(nil))
	if !strings.Contains(n.logs.String(), "store=\"redis redis://"+srv.Addr) || !strings.Contains(n.logs.String(), "deny cache of 100000 keys") {
		t.Errorf("logs do not name the store:\n%s", n.logs)
	}
	exercise(t, n.base)
	// The 4th request was denied by Redis; the 5th is denied from memory.
	if _, body := post(t, n.base+"/ratelimit.v1.RateLimitService/Check", `{"key":"alice","limit":{"limit":3,"window":"604800s"}}`); !strings.Contains(body, `"allowed":false`) {
		t.Errorf("Check 5 = %s, want denied", body)
	}
	want := `
# HELP rlcluster_deny_cache_hits_total Decisions answered from the deny cache, without a store round trip.
# TYPE rlcluster_deny_cache_hits_total counter
rlcluster_deny_cache_hits_total 1
`
	if err := testutil.ScrapeAndCompare(n.base+"/metrics", strings.NewReader(want), "rlcluster_deny_cache_hits_total"); err != nil {
		t.Errorf("/metrics: %v", err)
	}
	n.stop()

	// --deny-cache-keys 0 turns the cache off.
	n = startNode(t, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL(), "--deny-cache-keys", "0"}, env(nil))
	if !strings.Contains(n.logs.String(), "store=\"redis redis://"+srv.Addr) || strings.Contains(n.logs.String(), "deny cache") {
		t.Errorf("with --deny-cache-keys 0, logs do not name the store without a deny cache:\n%s", n.logs)
	}
	n.stop()
}

func TestRunRules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, "rules:\n  - name: per-user\n    limit: 1\n    window: 168h\n")
	n := startNode(t, []string{"--listen=127.0.0.1:0"}, env(map[string]string{"RLNODE_RULES": path}))
	check := n.base + "/ratelimit.v1.RateLimitService/Check"
	for i, want := range []string{`"allowed":true`, `"limit":"1"`} {
		if _, body := post(t, check, `{"key":"bob","rule":"per-user"}`); !strings.Contains(body, want) || (i == 1 && strings.Contains(body, `"allowed":true`)) {
			t.Errorf("Check %d = %s", i+1, body)
		}
	}
	n.stop()

	// A bad rules file stops the node before it listens, saying why.
	writeFile(t, path, "rules:\n  - name: x\n    limit: 0\n    window: 1m\n")
	err := run(context.Background(), []string{"--listen=127.0.0.1:0", "--rules", path}, env(nil), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "limit: must be from 1 to 2^53, got 0") {
		t.Errorf("run with bad rules = %v", err)
	}
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-help"}, env(nil), &out, io.Discard); err != nil {
		t.Fatalf("run -help = %v, want nil", err)
	}
	var c config
	newFlagSet(&c, io.Discard).VisitAll(func(f *flag.Flag) {
		for _, want := range []string{"--" + f.Name + " ", envName(f.Name), "default " + `"` + defaultText(f) + `"`} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("help lacks %q for --%s:\n%s", want, f.Name, out.String())
			}
		}
	})
}

func TestParseConfig(t *testing.T) {
	c, err := parseConfig([]string{"--region", "us"}, env(map[string]string{
		"RLNODE_REGION":    "ignored: the flag wins",
		"RLNODE_REDIS_URL": "redis://127.0.0.1:6379",
		"RLNODE_LOG_LEVEL": "debug",
		"RLNODE_MAX_KEYS":  "42",
	}), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Region != "us" || c.RedisURL != "redis://127.0.0.1:6379" || c.LogLevel.String() != "DEBUG" || c.MaxKeys != 42 || c.Listen != "127.0.0.1:8080" {
		t.Errorf("parseConfig = %+v", c)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--nope"}, nil, "flag provided but not defined: -nope"},
		{nil, map[string]string{"RLNODE_MAX_KEYS": "many"}, `RLNODE_MAX_KEYS="many"`},
		{[]string{"--log-format", "xml"}, nil, `--log-format: "xml" is not text or json`},
		{[]string{"--max-key-bytes", "0"}, nil, "--max-key-bytes: 0, want at least 1"},
		{nil, map[string]string{"RLNODE_DENY_CACHE_KEYS": "-1"}, "--deny-cache-keys: -1, want 0 (off) or more"},
		{[]string{"extra"}, nil, `unexpected arguments: ["extra"]`},
	} {
		_, err := parseConfig(tc.args, env(tc.env), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q, %v) = %v, want an error containing %q", tc.args, tc.env, err, tc.want)
		}
	}
}
