package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/status"
	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/porttest"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

var gossipRE = regexp.MustCompile(`gossip=(\S+)`)

// peek asks base for key's counts without consuming, through the README's
// GET form of Peek, and returns the decoded response.
func peek(t *testing.T, base, body string) peekResponse {
	t.Helper()
	q := url.Values{"encoding": {"json"}, "message": {body}}
	resp, err := http.Get(base + "/ratelimit.v1.RateLimitService/Peek?" + q.Encode())
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Peek: %d %s", resp.StatusCode, b)
	}
	var p peekResponse
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("Peek: %v in %s", err, b)
	}
	return p
}

type peekResponse struct {
	Response struct {
		Allowed bool `json:"allowed"`
		Stats   struct {
			Current string `json:"current"`
			Regions []struct {
				Region   string `json:"region"`
				Current  string `json:"current"`
				Previous string `json:"previous"`
				Age      string `json:"age"`
			} `json:"regions"`
		} `json:"stats"`
	} `json:"response"`
}

// TestRunTwoRegions runs two rlnodes, each on its own real redis-server and
// in its own region, joined over gossip with encryption on, as the README's
// two-region walkthrough does: hits admitted in eu show up in us's counts,
// and us enforces the global limit.
func TestRunTwoRegions(t *testing.T) {
	key := "VDwDX4d26734mkWuXLk4PxnsqiMu8OfyxxvfoTN/UwE="
	redisEU, redisUS := redistest.Start(t), redistest.Start(t)
	euNode := startNode(t, []string{"--listen=127.0.0.1:0", "--region=eu", "--node-name=eu-1",
		// Exact counts below: a long store timeout keeps a busy machine from
		// deciding any of them in the failover's fallback, and a long
		// suspicion keeps it from taking us for silent (and charging its
		// share, 5 of the 10) when a heartbeat is late.
		"--redis-url", redisEU.URL(), "--gossip-addr=127.0.0.1:0", "--store-timeout=2s", "--burst-guard-suspicion=10s"}, env(map[string]string{"RLNODE_GOSSIP_KEY": key}))
	eu, euLogs := euNode.base, euNode.logs
	m := gossipRE.FindStringSubmatch(euLogs.String())
	if m == nil {
		t.Fatalf("eu's logs lack its gossip address:\n%s", euLogs)
	}
	usNode := startNode(t, []string{"--listen=127.0.0.1:0", "--region=us", "--node-name=us-1",
		"--redis-url", redisUS.URL(), "--gossip-addr=127.0.0.1:0", "--join", m[1], "--gossip-key", key, "--store-timeout=2s",
		// us's 4 checks below come faster than the burst guard's horizon,
		// which would spread them over several; this test is about
		// replication (internal/gossip's TestGuardBurst covers the guard).
		"--burst-guard=false"}, env(nil))
	us, usLogs := usNode.base, usNode.logs
	if strings.Contains(euLogs.String()+usLogs.String(), key) {
		t.Errorf("the gossip key appears in the logs")
	}

	body := `{"key":"carol","limit":{"limit":10,"window":"3600s"}}`
	// eu runs the burst guard: once us is alive, it spreads the first hits
	// over a few horizons (about 100 ms each), denying the rest of a
	// horizon's with a retry-after under a second; those are retried. So
	// are denials while us, just joined, is still silent to eu (until it
	// has been heard from for the rejoin hold): eu charges it its share,
	// 5 of the 10, and the store denies at 5 with the window's retry-after.
	for i, tries := 0, 0; i < 6; tries++ {
		code, b := post(t, eu+"/ratelimit.v1.RateLimitService/Check", body)
		switch {
		case code == http.StatusOK && strings.Contains(b, `"allowed":true`):
			i++
		case code == http.StatusOK && tries < 50 && strings.Contains(b, `"allowed":false`):
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("Check %d on eu (try %d): %d %s", i+1, tries+1, code, b)
		}
	}
	var last peekResponse
	took := polltest.Until(t, 15*time.Second, "us sees eu's 6 hits", func() bool {
		last = peek(t, us, body)
		return last.Response.Stats.Current == "6"
	})
	// One flush interval (20 ms) plus loopback transit; the margin is for
	// a loaded machine.
	if took > 2*time.Second {
		t.Errorf("eu's 6 hits visible in us after %v, want <= 2s", took.Round(time.Millisecond))
	}
	var sawEU bool
	for _, r := range last.Response.Stats.Regions {
		if r.Region == "eu" {
			sawEU = r.Current == "6" && r.Age != ""
		}
	}
	if !sawEU {
		t.Errorf("us's Peek regions = %+v, want eu with current 6 and an age", last.Response.Stats.Regions)
	}
	// The limit is global: us admits 4 more, then denies.
	for i := 1; i <= 5; i++ {
		_, b := post(t, us+"/ratelimit.v1.RateLimitService/Check", body)
		if want := i <= 4; strings.Contains(b, `"allowed":true`) != want {
			t.Errorf("Check %d on us = %s, want allowed %v", i, b, want)
		}
	}
	resp, err := http.Get(us + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`rlcluster_gossip_members{region="eu",state="alive"} 1`, "rlcluster_gossip_merges_total"} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("us /metrics lacks %q", want)
		}
	}
	// eu runs the burst guard (the default), us does not (--burst-guard=false).
	if strings.Contains(string(mb), "rlcluster_guard_horizon_seconds") {
		t.Errorf("us /metrics has the burst guard's metrics with --burst-guard=false")
	}
	if code, b := get(t, eu+"/metrics"); code != http.StatusOK || !strings.Contains(b, "rlcluster_guard_horizon_seconds") {
		t.Errorf("eu /metrics = %d, lacks rlcluster_guard_horizon_seconds (the burst guard is on by default)", code)
	}
	if code, b := get(t, us+"/readyz"); code != http.StatusOK {
		t.Errorf("us (joined eu) /readyz = %d %q, want 200", code, b)
	}
	checkStatus(t, us, "us-1", map[string]string{"us": "us-1", "eu": "eu-1"}, "eu")
	checkStatus(t, eu, "eu-1", map[string]string{"us": "us-1", "eu": "eu-1"}, "")
	stopNodes(euNode, usNode)
	if !strings.Contains(usLogs.String(), "gossip node left") {
		t.Errorf("us did not leave the pool on shutdown:\n%s", usLogs)
	}
}

// checkStatus asserts that base's /status.json names node and shows
// members (region -> its one alive member), and a replication lag for
// lagFrom (when not empty), and that / serves the status page.
func checkStatus(t *testing.T, base, node string, members map[string]string, lagFrom string) {
	t.Helper()
	resp, err := http.Get(base + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st status.Status
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s/status.json: %v in %s", base, err, b)
	}
	if st.Node != node || !st.Gossip {
		t.Errorf("%s/status.json node %q gossip %v, want %q true", base, st.Node, st.Gossip, node)
	}
	got := map[string]string{}
	for _, rg := range st.Regions {
		for _, m := range rg.Members {
			if m.Region != rg.Region {
				t.Errorf("%s/status.json: member %s of region %s listed under %s", base, m.Name, m.Region, rg.Region)
			}
			if m.State == "alive" {
				got[rg.Region] += m.Name
			}
		}
		if rg.Region == lagFrom && rg.LagSeconds == nil {
			t.Errorf("%s/status.json: region %s has no replication lag: %s", base, rg.Region, b)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(members) {
		t.Errorf("%s/status.json alive members = %v, want %v", base, got, members)
	}
	resp, err = http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "<title>rlcluster status</title>") {
		t.Errorf("GET %s/ = %d %.200q, want the status page", base, resp.StatusCode, page)
	}
}

// TestScopeThreeRegions runs three rlnodes, each in its own region, joined
// over gossip on real loopback sockets. Alone, a node accepts a token
// bucket with global scope (there are no other regions to disagree with);
// once the three regions are members, every node refuses a region-local
// algorithm with global scope as invalid_argument naming the field, inline
// or through a rule, and accepts it with scope region. Region-scoped counts
// stay in their region while global ones replicate.
func TestScopeThreeRegions(t *testing.T) {
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeAtomic(t, rulesFile, `rules:
  - {name: burst, limit: 10, window: 1m, algorithm: token_bucket}
  - {name: burst-here, limit: 10, window: 1m, algorithm: token_bucket, scope: region}
`)
	args := func(region string, join ...string) []string {
		a := []string{"--listen=127.0.0.1:0", "--region=" + region, "--node-name=" + region + "-1", "--gossip-addr=127.0.0.1:0", "--rules=" + rulesFile}
		for _, j := range join {
			a = append(a, "--join="+j)
		}
		return a
	}
	euNode := startNode(t, args("eu"), env(nil))
	eu, euLogs := euNode.base, euNode.logs
	m := gossipRE.FindStringSubmatch(euLogs.String())
	if m == nil {
		t.Fatalf("eu's logs lack its gossip address:\n%s", euLogs)
	}
	if !strings.Contains(euLogs.String(), `rule 1 (burst): algorithm: token_bucket is region-local and scope is global`) {
		t.Errorf("eu's logs do not warn about rule burst:\n%s", euLogs)
	}
	const (
		tbGlobal  = `{"key":"carol","limit":{"limit":10,"window":"60s","algorithm":"ALGORITHM_TOKEN_BUCKET"}}`
		tbRegion  = `{"key":"carol","limit":{"limit":10,"window":"60s","algorithm":"ALGORITHM_TOKEN_BUCKET","scope":"SCOPE_REGION"}}`
		logGlobal = `{"key":"carol","limit":{"limit":10,"window":"60s","algorithm":"ALGORITHM_SLIDING_LOG","scope":"SCOPE_GLOBAL"}}`
	)
	check := func(base string) string { return base + "/ratelimit.v1.RateLimitService/Check" }
	if code, b := post(t, check(eu), tbGlobal); code != http.StatusOK || !strings.Contains(b, `"allowed":true`) || !strings.HasSuffix(b, `"scope":"SCOPE_GLOBAL"}`) {
		t.Errorf("eu alone: Check global token bucket = %d %s, want allowed with SCOPE_GLOBAL", code, b)
	}

	usNode, apNode := startNode(t, args("us", m[1]), env(nil)), startNode(t, args("ap", m[1]), env(nil))
	us := usNode.base
	nodes := map[string]string{"eu": eu, "us": us, "ap": apNode.base}
	for name, base := range nodes {
		polltest.Until(t, 15*time.Second, name+" sees three regions alive", func() bool {
			_, metrics := get(t, base+"/metrics")
			for other := range nodes {
				if other != name && !strings.Contains(metrics, `rlcluster_gossip_members{region="`+other+`",state="alive"} 1`) {
					return false
				}
			}
			return true
		})
	}

	for name, base := range nodes {
		for _, tc := range []struct{ body, want string }{
			{tbGlobal, `limit.scope: ALGORITHM_TOKEN_BUCKET is region-local and the scope is global, and this cluster has 3 regions`},
			{logGlobal, `limit.scope: ALGORITHM_SLIDING_LOG is region-local and the scope is global, and this cluster has 3 regions`},
			{`{"key":"carol","rule":"burst"}`, `rule: rule \"burst\": scope: token_bucket is region-local and the rule's scope is global, and this cluster has 3 regions`},
		} {
			if code, b := post(t, check(base), tc.body); code != http.StatusBadRequest || !strings.Contains(b, `"code":"invalid_argument"`) || !strings.Contains(b, tc.want) {
				t.Errorf("%s: Check %s = %d %s, want 400 invalid_argument with %q", name, tc.body, code, b, tc.want)
			}
		}
		for _, body := range []string{tbRegion, `{"key":"carol","rule":"burst-here"}`} {
			if code, b := post(t, check(base), body); code != http.StatusOK || !strings.Contains(b, `"allowed":true`) || !strings.HasSuffix(b, `"scope":"SCOPE_REGION"}`) {
				t.Errorf("%s: Check %s = %d %s, want allowed with SCOPE_REGION", name, body, code, b)
			}
		}
	}

	// Region-scoped sliding-window hits stay in eu; a global hit sent after
	// them reaches us, so theirs would have too had they been sent.
	const (
		swRegion = `{"key":"dave","limit":{"limit":10,"window":"3600s","scope":"SCOPE_REGION"}}`
		swGlobal = `{"key":"dave","limit":{"limit":10,"window":"3600s"}}`
	)
	for i := 0; i < 4; i++ {
		if code, b := post(t, check(eu), swRegion); code != http.StatusOK || !strings.Contains(b, `"allowed":true`) {
			t.Fatalf("eu: region-scoped Check %d = %d %s", i+1, code, b)
		}
	}
	if code, b := post(t, check(eu), swGlobal); code != http.StatusOK || !strings.Contains(b, `"current":"1"`) {
		t.Fatalf("eu: global Check = %d %s, want current 1 (apart from the region-scoped counter)", code, b)
	}
	polltest.Until(t, 15*time.Second, "us sees eu's global hit", func() bool {
		return peek(t, us, swGlobal).Response.Stats.Current == "1"
	})
	if p := peek(t, us, swRegion); p.Response.Stats.Current != "0" || len(p.Response.Stats.Regions) != 1 || (p.Response.Stats.Regions[0].Region != "us" && !strings.HasPrefix(p.Response.Stats.Regions[0].Region, "us~")) {
		t.Errorf("us: region-scoped Peek = %+v, want current 0 and us alone (us, or us~<node> on the in-memory store)", p.Response.Stats)
	}
	if p := peek(t, eu, swRegion); p.Response.Stats.Current != "4" {
		t.Errorf("eu: region-scoped Peek current = %s, want 4", p.Response.Stats.Current)
	}

	stopNodes(euNode, usNode, apNode)
}

func TestGossipFlags(t *testing.T) {
	for _, err := range checkRefused(t, []refusal{
		{[]string{"--join", "127.0.0.1:7946"}, "need --gossip-addr"},
		{[]string{"--gossip-insecure"}, "need --gossip-addr"},
		{[]string{"--gossip-addr", "127.0.0.1:0", "--gossip-join-timeout", "-1s"}, "--gossip-join-timeout: -1s"},
		{[]string{"--gossip-addr", "127.0.0.1:0", "--gossip-key", "not base64!"}, "--gossip-key: not valid base64"},
		{[]string{"--gossip-addr", "127.0.0.1:0", "--gossip-key", "c2hvcnQ="}, "--gossip-key: must be 16, 24 or 32 bytes, got 5"},
		{[]string{"--flush-interval", "0s"}, "--flush-interval: 0s, want 1ms to 10s"},
		{[]string{"--gossip-addr", "127.0.0.1:0", "--region", strings.Repeat("r", 58)}, "--region: 58 bytes, want at most 57 with gossip"},
	}) {
		if err != nil && strings.Contains(err.Error(), "not base64!") {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
	for _, tc := range []struct{ listen, gossip, want string }{
		{"127.0.0.1:8080", "", "127.0.0.1:8080"},
		{"0.0.0.0:8080", "172.28.1.11:7946", "172.28.1.11:8080"},
		{":8080", "0.0.0.0:7946", ":8080"},
	} {
		if got := advertisedAPI(tc.listen, config{GossipAddr: tc.gossip}); got != tc.want {
			t.Errorf("advertisedAPI(%q, gossip %q) = %q, want %q", tc.listen, tc.gossip, got, tc.want)
		}
	}
}

// TestGossipClosedByDefault: gossip on an address other than loopback
// without a key refuses to start and says how to make a key;
// --gossip-insecure starts it anyway.
func TestGossipClosedByDefault(t *testing.T) {
	var logs logtest.Buffer
	err := run(context.Background(), []string{"--listen=127.0.0.1:0", "--region=eu", "--gossip-addr=0.0.0.0:0"}, env(nil), io.Discard, &logs)
	if err == nil || !strings.Contains(err.Error(), "head -c 32 /dev/urandom | base64") || !strings.Contains(err.Error(), "--gossip-insecure") {
		t.Fatalf("run(--gossip-addr=0.0.0.0:0, no key) = %v, want an error that says how to make a key", err)
	}
	n := startNode(t, []string{"--listen=127.0.0.1:0", "--region=eu", "--gossip-addr=0.0.0.0:0", "--gossip-insecure"}, env(nil))
	if !strings.Contains(n.logs.String(), "encrypted=false") {
		t.Errorf("the insecure node's start line lacks encrypted=false:\n%s", n.logs)
	}
	n.stop()
}

// TestGossipBindsWhatIsNamed: without a key, --gossip-addr localhost:0 is
// accepted, and the node listens on 127.0.0.1 alone (memberlist alone
// bound the name on every interface: another process on another address
// could join keyless); [::1]:0 listens on ::1 alone; a non-loopback IPv6
// address is refused with the way to make a key.
func TestGossipBindsWhatIsNamed(t *testing.T) {
	var others []string
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			others = append(others, n.IP.String())
		}
	}
	for _, tc := range []struct {
		addr, at string
		not      []string
	}{
		{"localhost:0", "127.0.0.1", append([]string{"127.0.0.2", "::1"}, others...)},
		{"[::1]:0", "::1", append([]string{"127.0.0.1"}, others...)},
	} {
		n := startNode(t, []string{"--listen=127.0.0.1:0", "--region=eu", "--gossip-addr=" + tc.addr}, env(nil))
		m := gossipRE.FindStringSubmatch(n.logs.String())
		if m == nil {
			t.Fatalf("no gossip address logged:\n%s", n.logs)
		}
		host, port, _ := net.SplitHostPort(m[1])
		if host != tc.at {
			t.Errorf("--gossip-addr %s: gossip=%s, want %s", tc.addr, m[1], tc.at)
		}
		for _, h := range append([]string{tc.at}, tc.not...) {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(h, port), 2*time.Second)
			if c != nil {
				c.Close()
			}
			if h == tc.at && err != nil {
				t.Errorf("--gossip-addr %s: %s:%s refused: %v", tc.addr, h, port, err)
			}
			if h != tc.at && err == nil {
				t.Errorf("--gossip-addr %s: %s:%s accepted a connection, an address the name does not name", tc.addr, h, port)
			}
		}
		n.stop()
	}
	err = run(context.Background(), []string{"--listen=127.0.0.1:0", "--region=eu", "--gossip-addr=[2001:db8::1]:7946"}, env(nil), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "2001:db8::1") || !strings.Contains(err.Error(), "head -c 32 /dev/urandom | base64") {
		t.Errorf("run(--gossip-addr [2001:db8::1]:7946, no key) = %v, want a refusal that names the address and how to make a key", err)
	}
}

// TestWrongGossipKeyNotReady: a node whose gossip key differs from the
// pool's cannot join; once --gossip-join-timeout has passed, /readyz says
// it is not ready and why, while the seed (no --join) stays ready.
func TestWrongGossipKeyNotReady(t *testing.T) {
	keyA, keyB := "VDwDX4d26734mkWuXLk4PxnsqiMu8OfyxxvfoTN/UwE=", "q6t6I4xQ0D1bX3nE7y1rj9F2a8cM0pYkV5wL3sH2uGo="
	eu := startNode(t, []string{"--listen=127.0.0.1:0", "--region=eu", "--node-name=eu-1",
		"--gossip-addr=127.0.0.1:0", "--gossip-key", keyA}, env(nil))
	m := gossipRE.FindStringSubmatch(eu.logs.String())
	if m == nil {
		t.Fatalf("eu's logs lack its gossip address:\n%s", eu.logs)
	}
	us := startNode(t, []string{"--listen=127.0.0.1:0", "--region=us", "--node-name=us-1",
		"--gossip-addr=127.0.0.1:0", "--join", m[1], "--gossip-key", keyB, "--gossip-join-timeout=1s"}, env(nil))
	var body string
	polltest.Until(t, 15*time.Second, "us not ready", func() bool {
		var code int
		code, body = get(t, us.base+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "no other region reachable") || !strings.Contains(body, "--gossip-key") {
		t.Errorf("us /readyz = %q, want it to say no other region is reachable and to check --gossip-key", body)
	}
	if code, b := get(t, eu.base+"/readyz"); code != http.StatusOK {
		t.Errorf("eu (no --join) /readyz = %d %q, want 200", code, b)
	}
	if strings.Contains(us.logs.String(), `\n\t`) {
		t.Errorf("us's join retries log literal \\n\\t:\n%s", us.logs)
	}
	if !strings.Contains(us.logs.String(), "join gossip seeds failed, retrying") {
		t.Errorf("us's logs lack the join retry line:\n%s", us.logs)
	}
	stopNodes(eu, us)
}

// TestStatusSaysWhyNotReady: when /readyz answers 503, /status.json (and
// the page drawn from it) says why, in /readyz's words: a region cut off
// from the others, a store that has not answered.
func TestStatusSaysWhyNotReady(t *testing.T) {
	for _, tc := range []struct {
		name, want, end string
		args            []string
	}{
		{"no other region", "gossip: no other region reachable (none seen in 1s; seeds ", "): check --join and --gossip-key",
			[]string{"--region=us", "--gossip-addr=127.0.0.1:0", "--join", porttest.ClosedAddr(t), "--gossip-join-timeout=1s"}},
		{"redis down, closed", "store: ", "connection refused",
			[]string{"--redis-url", "redis://" + porttest.ClosedAddr(t), "--on-store-failure=closed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t, append([]string{"--listen=127.0.0.1:0"}, tc.args...), env(nil))
			var ready string
			polltest.Until(t, 15*time.Second, "/readyz 503", func() bool {
				code, body := get(t, n.base+"/readyz")
				ready = body
				return code == http.StatusServiceUnavailable
			})
			code, body := get(t, n.base+"/status.json")
			var st struct {
				Ready    bool   `json:"ready"`
				NotReady string `json:"not_ready"`
			}
			if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
				t.Fatalf("/status.json = %d %v: %s", code, err, body)
			}
			if st.Ready || !strings.HasPrefix(st.NotReady, tc.want) || !strings.HasSuffix(st.NotReady, tc.end) {
				t.Errorf("/status.json ready=%v not_ready=%q, want false and %q...%q", st.Ready, st.NotReady, tc.want, tc.end)
			}
			if got := strings.TrimSpace(strings.TrimPrefix(ready, "not ready: ")); !strings.HasPrefix(got, tc.want) {
				t.Errorf("/readyz = %q, want %q...", ready, tc.want)
			}
			n.stop()
		})
	}
}

// TestRunMemoryRegion runs two rlnodes of one region, each on its own
// in-memory store, joined over gossip: each counts under a replica of its
// own and sends it to the other, so hits at one node count at the other
// and the limit holds across both.
func TestRunMemoryRegion(t *testing.T) {
	aNode := startNode(t, []string{"--listen=127.0.0.1:0", "--region=eu", "--node-name=eu-1",
		"--gossip-addr=127.0.0.1:0", "--gossip-join-timeout=0"}, env(nil))
	m := gossipRE.FindStringSubmatch(aNode.logs.String())
	if m == nil {
		t.Fatalf("eu-1's logs lack its gossip address:\n%s", aNode.logs)
	}
	bNode := startNode(t, []string{"--listen=127.0.0.1:0", "--region=eu", "--node-name=eu-2",
		"--gossip-addr=127.0.0.1:0", "--join", m[1], "--gossip-join-timeout=0"}, env(nil))
	a, b := aNode.base, bNode.base
	body := `{"key":"dave","limit":{"limit":10,"window":"3600s"}}`
	polltest.Until(t, 15*time.Second, "eu-1 sees eu-2", func() bool {
		_, s := get(t, a+"/metrics")
		return strings.Contains(s, `rlcluster_gossip_members{region="eu",state="alive"} 2`)
	})
	for i := 0; i < 6; i++ {
		if code, s := post(t, a+"/ratelimit.v1.RateLimitService/Check", body); code != http.StatusOK || !strings.Contains(s, `"allowed":true`) {
			t.Fatalf("Check %d on eu-1: %d %s", i+1, code, s)
		}
	}
	polltest.Until(t, 15*time.Second, "eu-2 counts eu-1's 6 hits", func() bool {
		return peek(t, b, body).Response.Stats.Current == "6"
	})
	for i := 1; i <= 5; i++ {
		_, s := post(t, b+"/ratelimit.v1.RateLimitService/Check", body)
		if want := i <= 4; strings.Contains(s, `"allowed":true`) != want {
			t.Errorf("Check %d on eu-2 = %s, want allowed %v", i, s, want)
		}
	}
	if _, s := get(t, b+"/metrics"); !strings.Contains(s, `rlcluster_gossip_repairs_total{direction="requested"} 1`) {
		t.Errorf("eu-2 /metrics lacks its start-up repair request")
	}
	stopNodes(aNode, bNode)
}

// TestReadyWhileJoining: a node that joins a region that has another node
// is not ready (/readyz 503, naming the hold) while the burst guard holds
// its decisions until that node can count it, and is once the hold has
// passed. The nodes' clock stands still until the test moves it, so the
// hold cannot pass unseen on a slow machine.
func TestReadyWhileJoining(t *testing.T) {
	base := time.Now()
	var offset atomic.Int64
	now := func() time.Time { return base.Add(time.Duration(offset.Load())) }
	args := func(name, region string, join ...string) []string {
		a := []string{"--listen=127.0.0.1:0", "--region=" + region, "--node-name=" + name, "--gossip-addr=127.0.0.1:0", "--gossip-insecure"}
		for _, j := range join {
			a = append(a, "--join", j)
		}
		return a
	}
	eu1 := startNodeWithClock(t, args("eu-1", "eu"), env(nil), now)
	m := gossipRE.FindStringSubmatch(eu1.logs.String())
	if m == nil {
		t.Fatalf("eu-1's logs lack its gossip address:\n%s", eu1.logs)
	}
	startNodeWithClock(t, args("us-1", "us", m[1]), env(nil), now)
	eu2 := startNodeWithClock(t, args("eu-2", "eu", m[1]), env(nil), now)
	// Once eu-2 knows eu-1 and us-1 alive, it holds.
	var code int
	var body string
	polltest.Until(t, 20*time.Second, "eu-2's /readyz to name the joining hold", func() bool {
		code, body = get(t, eu2.base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "joining")
	})
	offset.Store(int64(2 * time.Second)) // past the hold of about 0.7 s
	polltest.Until(t, 20*time.Second, "eu-2 ready once the hold has passed", func() bool {
		code, body = get(t, eu2.base+"/readyz")
		return code == http.StatusOK
	})
	// eu-1, alone in eu when it started, is ready now too.
	if code, body := get(t, eu1.base+"/readyz"); code != http.StatusOK {
		t.Errorf("eu-1 /readyz = %d %s, want 200", code, body)
	}
}
