package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/status"
	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/polltest"
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	redisEU, redisUS := redistest.Start(t), redistest.Start(t)
	eu, euDone, euLogs := start(t, ctx, []string{"--listen=127.0.0.1:0", "--region=eu", "--node-name=eu-1",
		// Exact counts below: a long store timeout keeps a busy machine from
		// deciding any of them in the failover's fallback.
		"--redis-url", redisEU.URL(), "--gossip-addr=127.0.0.1:0", "--store-timeout=2s"}, env(map[string]string{"RLNODE_GOSSIP_KEY": key}))
	m := gossipRE.FindStringSubmatch(euLogs.String())
	if m == nil {
		t.Fatalf("eu's logs lack its gossip address:\n%s", euLogs)
	}
	us, usDone, usLogs := start(t, ctx, []string{"--listen=127.0.0.1:0", "--region=us", "--node-name=us-1",
		"--redis-url", redisUS.URL(), "--gossip-addr=127.0.0.1:0", "--join", m[1], "--gossip-key", key, "--store-timeout=2s",
		// us's 4 checks below come faster than the burst guard's horizon,
		// which would spread them over several; this test is about
		// replication (internal/gossip's TestGuardBurst covers the guard).
		"--burst-guard=false"}, env(nil))
	if strings.Contains(euLogs.String()+usLogs.String(), key) {
		t.Errorf("the gossip key appears in the logs")
	}

	body := `{"key":"carol","limit":{"limit":10,"window":"3600s"}}`
	// eu runs the burst guard: once us is alive, it spreads the first hits
	// over a few horizons (about 100 ms each), denying the rest of a
	// horizon's with a retry-after under a second; those are retried.
	for i, tries := 0, 0; i < 6; tries++ {
		code, b := post(t, eu+"/ratelimit.v1.RateLimitService/Check", body)
		switch {
		case code == http.StatusOK && strings.Contains(b, `"allowed":true`):
			i++
		case code == http.StatusOK && tries < 50 && strings.Contains(b, `"retryAfter":"0.`):
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("Check %d on eu (try %d): %d %s", i+1, tries+1, code, b)
		}
	}
	start := time.Now()
	var last peekResponse
	polltest.Until(t, 15*time.Second, "us sees eu's 6 hits", func() bool {
		last = peek(t, us, body)
		return last.Response.Stats.Current == "6"
	})
	// One flush interval (20 ms) plus loopback transit; the margin is for
	// a loaded machine.
	if took := time.Since(start); took > 2*time.Second {
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
	cancel()
	wait(t, euDone, euLogs)
	wait(t, usDone, usLogs)
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

func TestGossipFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--join", "127.0.0.1:7946"}, "need --gossip-addr"},
		{[]string{"--gossip-insecure"}, "need --gossip-addr"},
		{[]string{"--gossip-addr", "127.0.0.1:0", "--gossip-join-timeout", "-1s"}, "--gossip-join-timeout: -1s"},
		{[]string{"--gossip-addr", "127.0.0.1:0", "--gossip-key", "not base64!"}, "--gossip-key: not valid base64"},
		{[]string{"--gossip-addr", "127.0.0.1:0", "--gossip-key", "c2hvcnQ="}, "--gossip-key: must be 16, 24 or 32 bytes, got 5"},
		{[]string{"--flush-interval", "0s"}, "--flush-interval: 0s, want 1ms to 10s"},
	} {
		_, err := parseConfig(tc.args, env(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs logtest.Buffer
	err := run(ctx, []string{"--listen=127.0.0.1:0", "--region=eu", "--gossip-addr=0.0.0.0:0"}, env(nil), io.Discard, &logs)
	if err == nil || !strings.Contains(err.Error(), "head -c 32 /dev/urandom | base64") || !strings.Contains(err.Error(), "--gossip-insecure") {
		t.Fatalf("run(--gossip-addr=0.0.0.0:0, no key) = %v, want an error that says how to make a key", err)
	}
	_, done, l := start(t, ctx, []string{"--listen=127.0.0.1:0", "--region=eu", "--gossip-addr=0.0.0.0:0", "--gossip-insecure"}, env(nil))
	if !strings.Contains(l.String(), "encrypted=false") {
		t.Errorf("the insecure node's start line lacks encrypted=false:\n%s", l)
	}
	cancel()
	wait(t, done, l)
}

// TestWrongGossipKeyNotReady: a node whose gossip key differs from the
// pool's cannot join; once --gossip-join-timeout has passed, /readyz says
// it is not ready and why, while the seed (no --join) stays ready.
func TestWrongGossipKeyNotReady(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keyA, keyB := "VDwDX4d26734mkWuXLk4PxnsqiMu8OfyxxvfoTN/UwE=", "q6t6I4xQ0D1bX3nE7y1rj9F2a8cM0pYkV5wL3sH2uGo="
	eu, euDone, euLogs := start(t, ctx, []string{"--listen=127.0.0.1:0", "--region=eu", "--node-name=eu-1",
		"--gossip-addr=127.0.0.1:0", "--gossip-key", keyA}, env(nil))
	m := gossipRE.FindStringSubmatch(euLogs.String())
	if m == nil {
		t.Fatalf("eu's logs lack its gossip address:\n%s", euLogs)
	}
	us, usDone, usLogs := start(t, ctx, []string{"--listen=127.0.0.1:0", "--region=us", "--node-name=us-1",
		"--gossip-addr=127.0.0.1:0", "--join", m[1], "--gossip-key", keyB, "--gossip-join-timeout=1s"}, env(nil))
	var body string
	polltest.Until(t, 15*time.Second, "us not ready", func() bool {
		var code int
		code, body = get(t, us+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "no other region reachable") || !strings.Contains(body, "--gossip-key") {
		t.Errorf("us /readyz = %q, want it to say no other region is reachable and to check --gossip-key", body)
	}
	if code, b := get(t, eu+"/readyz"); code != http.StatusOK {
		t.Errorf("eu (no --join) /readyz = %d %q, want 200", code, b)
	}
	if strings.Contains(usLogs.String(), `\n\t`) {
		t.Errorf("us's join retries log literal \\n\\t:\n%s", usLogs)
	}
	if !strings.Contains(usLogs.String(), "join gossip seeds failed, retrying") {
		t.Errorf("us's logs lack the join retry line:\n%s", usLogs)
	}
	cancel()
	wait(t, euDone, euLogs)
	wait(t, usDone, usLogs)
}

// TestRunMemoryRegion runs two rlnodes of one region, each on its own
// in-memory store, joined over gossip: each counts under a replica of its
// own and sends it to the other, so hits at one node count at the other
// and the limit holds across both.
func TestRunMemoryRegion(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, aDone, aLogs := start(t, ctx, []string{"--listen=127.0.0.1:0", "--region=eu", "--node-name=eu-1",
		"--gossip-addr=127.0.0.1:0", "--gossip-join-timeout=0"}, env(nil))
	m := gossipRE.FindStringSubmatch(aLogs.String())
	if m == nil {
		t.Fatalf("eu-1's logs lack its gossip address:\n%s", aLogs)
	}
	b, bDone, bLogs := start(t, ctx, []string{"--listen=127.0.0.1:0", "--region=eu", "--node-name=eu-2",
		"--gossip-addr=127.0.0.1:0", "--join", m[1], "--gossip-join-timeout=0"}, env(nil))
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
	cancel()
	wait(t, aDone, aLogs)
	wait(t, bDone, bLogs)
}
