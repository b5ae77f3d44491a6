package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlcluster/rlcluster/internal/polltest"
)

// writeAtomic replaces path's contents in one rename, as editors and
// ConfigMap updates do.
func writeAtomic(t *testing.T, path, s string) {
	t.Helper()
	writeFile(t, path+".tmp", s)
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// rls returns go-control-plane's gRPC client for Envoy's rate-limit
// service on the node at base (http://host:port), over h2c.
func rls(t *testing.T, base string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// perUnit asks for one hit of domain's (key, value) descriptor and returns
// the limit that applied (0 for none) and the overall code.
func perUnit(t *testing.T, c rlsv3.RateLimitServiceClient, domain, key, value string) (uint32, rlsv3.RateLimitResponse_Code) {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain:      domain,
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), resp.GetOverallCode()
}

const envoyRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 10
`

// TestRunRulesHotReload edits the rules file under a running node: the
// edit takes effect without a restart, an invalid edit keeps the old
// rules and is counted, and --shadow-mode and --rls-headers apply.
func TestRunRulesHotReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "edge.yaml")
	writeAtomic(t, path, envoyRules)
	n := startNode(t, []string{"--listen=127.0.0.1:0", "--rules", dir, "--rules-reload-interval=10ms"}, env(nil))
	base, logs := n.base, n.logs
	if !strings.Contains(logs.String(), `rules="0 rules, 1 domain (edge: 1 limit)"`) {
		t.Errorf("logs lack the rules summary:\n%s", logs)
	}
	c := rls(t, base)
	if got, _ := perUnit(t, c, "edge", "remote_address", "10.0.0.1"); got != 10 {
		t.Fatalf("limit = %d, want 10", got)
	}
	writeAtomic(t, path, strings.Replace(envoyRules, "10", "1", 1))
	polltest.Until(t, 10*time.Second, "the edit to apply", func() bool {
		got, _ := perUnit(t, c, "edge", "remote_address", "10.0.0.2")
		return got == 1
	})
	if _, code := perUnit(t, c, "edge", "remote_address", "10.0.0.1"); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("second hit under a limit of 1: %v, want OVER_LIMIT", code)
	}

	writeAtomic(t, path, strings.Replace(envoyRules, "minute", "fortnight", 1))
	polltest.Until(t, 10*time.Second, "the rejection", func() bool {
		return strings.Contains(logs.String(), "rules rejected: keeping the rules in use")
	})
	if !strings.Contains(logs.String(), `\"fortnight\" is not second, minute, hour, day, week, month or year`) {
		t.Errorf("the rejection does not say why:\n%s", logs)
	}
	if got, _ := perUnit(t, c, "edge", "remote_address", "10.0.0.3"); got != 1 {
		t.Errorf("limit after an invalid edit = %d, want 1 (the old rules)", got)
	}
	if _, resp := get(t, base+"/metrics"); !strings.Contains(resp, `rlcluster_rules_reloads_total{result="rejected"} 1`) || !strings.Contains(resp, `rlcluster_rules_reloads_total{result="applied"} 1`) {
		t.Errorf("/metrics lacks the reload counts:\n%s", resp)
	}
	n.stop()
}

// TestRunRulesSIGHUP reloads on SIGHUP only, with polling off.
func TestRunRulesSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edge.yaml")
	writeAtomic(t, path, envoyRules)
	n := startNode(t, []string{"--listen=127.0.0.1:0", "--rules", path, "--rules-reload-interval=-1s", "--shadow-mode", "--rls-headers=x"}, env(nil))
	c := rls(t, n.base)
	writeAtomic(t, path, strings.Replace(envoyRules, "10", "1", 1))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the SIGHUP reload", func() bool {
		got, _ := perUnit(t, c, "edge", "remote_address", "10.0.0.9")
		return got == 1
	})
	if !strings.Contains(n.logs.String(), "trigger=reload") {
		t.Errorf("logs lack the SIGHUP reload:\n%s", n.logs)
	}
	// --shadow-mode: over the limit, yet OK overall; --rls-headers=x.
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain:      "edge",
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.9"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.GetOverallCode(), rlsv3.RateLimitResponse_OK; got != want {
		t.Errorf("overall_code in shadow mode = %v, want %v", got, want)
	}
	if got, want := resp.GetStatuses()[0].GetCode(), rlsv3.RateLimitResponse_OVER_LIMIT; got != want {
		t.Errorf("status in shadow mode = %v, want %v", got, want)
	}
	hdrs := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		hdrs[h.GetKey()] = h.GetValue()
	}
	if hdrs["X-RateLimit-Limit"] != "1" || hdrs["X-RateLimit-Remaining"] != "0" || hdrs["X-RateLimit-Reset"] == "" {
		t.Errorf("headers = %v, want X-RateLimit-Limit 1, -Remaining 0 and -Reset", hdrs)
	}
	// The polling above consumes hits too (one may already be denied under
	// the new limit), so at least this request's shadow denial is counted.
	_, m := get(t, n.base+"/metrics")
	if mm := shadowDeniedRE.FindStringSubmatch(m); mm == nil || mm[1] == "0" {
		t.Errorf("/metrics lacks the shadow denial:\n%s", m)
	}
	n.stop()
}

var shadowDeniedRE = regexp.MustCompile(`rlcluster_decisions_total\{outcome="shadow_denied",rule="edge.remote_address"\} (\d+)`)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.Mkdir(good, 0o700); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(good, "edge.yaml"), envoyRules)
	writeAtomic(t, filepath.Join(good, "native.yaml"), "rules:\n  - name: login\n    limit: 5\n    window: 15m\n")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"validate", "--rules", good}, env(nil), &out, &errOut); err != nil {
		t.Fatalf("validate good = %v; stderr:\n%s", err, errOut.String())
	}
	if got, want := out.String(), good+": valid: 1 rule, 1 domain (edge: 1 limit)\n"; got != want {
		t.Errorf("validate good printed %q, want %q", got, want)
	}

	// validate refuses what the node would: here, more than --max-rules.
	errOut.Reset()
	if err := run(context.Background(), []string{"validate", "--rules", good}, env(map[string]string{"RLNODE_MAX_RULES": "1"}), io.Discard, &errOut); !errors.Is(err, errInvalidRules) || !strings.Contains(errOut.String(), "more than the maximum of 1 (--max-rules)") {
		t.Errorf("validate with RLNODE_MAX_RULES=1 = %v, stderr %q; want the 2 rules refused", err, errOut.String())
	}

	bad := filepath.Join(dir, "bad.yaml")
	writeAtomic(t, bad, "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - value: b\n  - key: c\n    rate_limit: {unit: year, requests_per_unit: 1}\n")
	out.Reset()
	errOut.Reset()
	// The environment names the rules too.
	err := run(context.Background(), []string{"validate"}, env(map[string]string{"RLNODE_RULES": bad}), &out, &errOut)
	if !errors.Is(err, errInvalidRules) || !strings.Contains(err.Error(), bad+": 2 problems") {
		t.Errorf("validate bad = %v, want 2 problems (unit year is a calendar year)", err)
	}
	if got, want := errOut.String(), bad+`:4: domain "edge": descriptors[0].rate_limit.unit: "fortnight" is not second, minute, hour, day, week, month or year
`+bad+`:5: domain "edge": descriptors[1].key: required
`; got != want {
		t.Errorf("validate printed:\n%s\nwant:\n%s", got, want)
	}
	// Native rules: the rule's number and name, the field as spelled.
	native := filepath.Join(dir, "native.yaml")
	writeAtomic(t, native, "rules:\n  - name: login\n    limit: 5\n    window: 1m\n    algoritm: sliding_log\n  - name: api\n    limit: 5\n    window: 1m\n    algorithm: leaky\n")
	errOut.Reset()
	err = run(context.Background(), []string{"validate", "--rules", native}, env(nil), io.Discard, &errOut)
	if got, want := errOut.String(), native+`:5: rule 1 (login): unknown field "algoritm" (want name, limit, window, calendar, time_zone, algorithm, strict, burst, shadow_mode, scope or leasable)
`+native+`:9: rule 2 (api): algorithm: "leaky" is not sliding_window, sliding_window_two_bucket, fixed_window, token_bucket or sliding_log
`; !errors.Is(err, errInvalidRules) || got != want {
		t.Errorf("validate = %v, printed:\n%s\nwant:\n%s", err, got, want)
	}
	if err := run(context.Background(), []string{"validate"}, env(nil), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--rules is required") {
		t.Errorf("validate without --rules = %v", err)
	}
}

func TestParseConfigRulesFlags(t *testing.T) {
	c, err := parseConfig(nil, env(map[string]string{
		"RLNODE_SHADOW_MODE":           "true",
		"RLNODE_RLS_HEADERS":           "draft",
		"RLNODE_RULES_RELOAD_INTERVAL": "250ms",
	}), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.ShadowMode || c.RLSHeaders != "draft" || c.RulesReloadInterval != 250*time.Millisecond {
		t.Errorf("parseConfig = shadow %v, rls-headers %q, reload %v; want true, draft, 250ms", c.ShadowMode, c.RLSHeaders, c.RulesReloadInterval)
	}
	checkRefused(t, []refusal{
		{[]string{"--rls-headers", "ietf"}, `--rls-headers: "ietf" is not none, draft or x`},
		{[]string{"--shadow-mode=maybe"}, "invalid boolean value"},
	})
}

// TestRunInvalidRules: invalid rules stop the node at start with every
// problem, each by file, line, rule and field.
func TestRunInvalidRules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeAtomic(t, path, "rules:\n  - name: login\n    limit: 5\n    window: 1m\n    algorithm: leaky\n  - name: api\n    limit: 0\n    window: 1m\n")
	err := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--rules", path}, env(nil), io.Discard, io.Discard)
	want := "rules " + path + ": 2 problems:\n" +
		path + `:5: rule 1 (login): algorithm: "leaky" is not sliding_window, sliding_window_two_bucket, fixed_window, token_bucket or sliding_log` + "\n" +
		path + ":7: rule 2 (api): limit: must be from 1 to 2^53, got 0"
	if err == nil || err.Error() != want {
		t.Errorf("run = %v, want:\n%s", err, want)
	}
}

// TestValidateWarnsRegionLocal: `rlnode validate` accepts a region-local
// algorithm with global scope, and warns on stderr where it is and what a
// cluster of several regions will do with it.
func TestValidateWarnsRegionLocal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeAtomic(t, path, "rules:\n  - name: burst\n    limit: 10\n    window: 1m\n    algorithm: token_bucket\n  - {name: here, limit: 1, window: 1s, algorithm: sliding_log, scope: region}\n")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"validate", "--rules", path}, env(nil), &out, &errOut); err != nil {
		t.Fatalf("validate = %v; stderr:\n%s", err, errOut.String())
	}
	if got, want := out.String(), path+": valid: 2 rules, 0 domains\n"; got != want {
		t.Errorf("validate printed %q, want %q", got, want)
	}
	want := "warning: " + path + ":5: rule 1 (burst): algorithm: token_bucket is region-local and scope is global: accepted while the cluster has one region, " +
		"refused (invalid_argument) while it has more; set scope: region for one limit per region, or use sliding_window or fixed_window for one global limit\n"
	if got := errOut.String(); got != want {
		t.Errorf("validate stderr:\n%s\nwant:\n%s", got, want)
	}
}
