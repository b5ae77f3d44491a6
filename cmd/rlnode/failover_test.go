package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

// get GETs url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, b := apitest.Get(t, url, nil)
	return resp.StatusCode, b
}

// TestRunRedisOutage runs a node on Redis, kills Redis and restarts it: the
// node keeps answering under each --on-store-failure policy, /readyz, the
// logs and the metrics say which mode it is in, and it returns to Redis.
func TestRunRedisOutage(t *testing.T) {
	for _, c := range []struct {
		policy     string
		allowed    bool
		readyWhile int
	}{
		{"local", true, http.StatusOK},
		{"open", true, http.StatusOK},
		{"closed", false, http.StatusServiceUnavailable},
	} {
		t.Run(c.policy, func(t *testing.T) {
			t.Parallel() // a node and a redis-server of its own
			srv := redistest.Start(t)
			n := startNode(t, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL(),
				"--on-store-failure", c.policy, "--store-timeout", "300ms"}, env(nil))
			base, logs := n.base, n.logs
			check := base + "/ratelimit.v1.RateLimitService/Check"
			req := `{"key":"outage","limit":{"limit":1000,"window":"60s"}}`
			if code, body := post(t, check, req); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
				t.Fatalf("healthy Check: %d %s", code, body)
			}
			if code, body := get(t, base+"/readyz"); code != http.StatusOK || body != "ok (store: primary)\n" {
				t.Errorf("healthy /readyz = %d %q, want 200 \"ok (store: primary)\"", code, body)
			}

			srv.Stop()
			for i := range 10 {
				start := time.Now()
				code, body := post(t, check, req)
				if code != http.StatusOK || strings.Contains(body, `"allowed":true`) != c.allowed {
					t.Errorf("Check %d with Redis dead: %d %s, want 200 and allowed %v", i, code, body, c.allowed)
				}
				t.Logf("Check %d with Redis dead: %v", i, time.Since(start).Round(time.Microsecond))
			}
			code, body := get(t, base+"/readyz")
			if code != c.readyWhile || !strings.Contains(body, "fallback "+c.policy) || !strings.Contains(body, "unavailable since") {
				t.Errorf("/readyz with Redis dead = %d %q, want %d naming fallback %s", code, body, c.readyWhile, c.policy)
			}
			t.Logf("/readyz with Redis dead: %d %s", code, strings.TrimSpace(body))
			want := `
# HELP rlcluster_store_mode 1 for the mode the store decides in: primary, or the failure policy (local, open, closed) while the primary is unavailable.
# TYPE rlcluster_store_mode gauge
# HELP rlcluster_store_transitions_total Changes of store mode, to the failure policy and back.
# TYPE rlcluster_store_transitions_total counter
rlcluster_store_transitions_total 1
`
			for _, m := range []string{"closed", "local", "open", "primary"} {
				v := 0
				if m == c.policy {
					v = 1
				}
				want += fmt.Sprintf("rlcluster_store_mode{mode=%q} %d\n", m, v)
			}
			if err := testutil.ScrapeAndCompare(base+"/metrics", strings.NewReader(want), "rlcluster_store_mode", "rlcluster_store_transitions_total"); err != nil {
				t.Errorf("/metrics with Redis dead: %v", err)
			}
			if n := strings.Count(logs.String(), "primary unavailable"); n != 1 {
				t.Errorf("logs hold %d lines about the outage, want 1 (one per transition):\n%s", n, logs)
			}

			srv.Restart(t)
			waitPrimary(t, base)
			if code, body := post(t, check, req); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
				t.Errorf("Check after recovery: %d %s", code, body)
			}
			if !strings.Contains(logs.String(), "primary answers again") {
				t.Errorf("logs lack the recovery:\n%s", logs)
			}
		})
	}
}

// regionCounts returns a Peek's current count per region.
func regionCounts(p peekResponse) map[string]string {
	out := map[string]string{}
	for _, r := range p.Response.Stats.Regions {
		out[r.Region] = r.Current
	}
	return out
}

// waitGuardAlive waits until the burst guard of the node at base takes
// region for alive: heard from, and no region silent. A region stays
// silent to the guard until it is first heard and for a hold after that
// (guard.RejoinHold), and a key whose horizon began meanwhile admits no
// more in that horizon once the region is alive. The guard reads the
// pool only at a decision: each poll makes one, on a key of its own.
func waitGuardAlive(t *testing.T, base, region string) {
	t.Helper()
	warm := `{"key":"guard-alive","limit":{"limit":1000,"window":"1s"}}`
	polltest.Until(t, 20*time.Second, base+"'s burst guard to take "+region+" for alive", func() bool {
		post(t, base+"/ratelimit.v1.RateLimitService/Check", warm)
		_, m := get(t, base+"/metrics")
		return strings.Contains(m, `rlcluster_remote_staleness_seconds_count{region="`+region+`"}`) &&
			strings.Contains(m, "\nrlcluster_guard_silent_regions 0\n")
	})
}

// startEUUS starts node eu-1 of eu on the Redis at euURL, with a store
// timeout of euTimeout, and node us-1 of us on usURL joined to it, both
// with gossip and a burst guard suspicion of 10 s, stopped when the test
// ends, and waits until eu's guard takes us for alive.
func startEUUS(t *testing.T, euURL, usURL, euTimeout string) (eu, us *node) {
	t.Helper()
	eu = startNode(t, []string{"--listen=127.0.0.1:0", "--region=eu", "--node-name=eu-1",
		"--redis-url", euURL, "--gossip-addr=127.0.0.1:0", "--store-timeout=" + euTimeout, "--burst-guard-suspicion=10s"}, env(nil))
	m := gossipRE.FindStringSubmatch(eu.logs.String())
	if m == nil {
		t.Fatalf("eu's logs lack its gossip address:\n%s", eu.logs)
	}
	us = startNode(t, []string{"--listen=127.0.0.1:0", "--region=us", "--node-name=us-1",
		"--redis-url", usURL, "--gossip-addr=127.0.0.1:0", "--join", m[1], "--store-timeout=2s", "--burst-guard-suspicion=10s"}, env(nil))
	t.Cleanup(func() { stopNodes(eu, us) })
	waitGuardAlive(t, eu.base, "us")
	return eu, us
}

// TestRunTwoRegionsRedisOutage: eu's Redis stalls while eu takes traffic.
// eu keeps admitting from its fallback, which counts under a region of its
// own (eu~<id>), and us counts those hits too; when eu's Redis answers
// again the fallback's count is written back to it, and both regions agree
// on every region's count.
func TestRunTwoRegionsRedisOutage(t *testing.T) {
	redisEU, redisUS := redistest.Start(t), redistest.Start(t)
	// Every Check below must be admitted, and the burst guard may deny
	// below the limit for up to a horizon after a region it took for
	// silent is alive again (docs/design.md, "The burst guard"). So a long
	// suspicion keeps a late heartbeat on a busy machine from making either
	// region silent to the other, and waitGuardAlive lets the pool form
	// before the first Check. A stalled Redis still trips eu's 500ms; a
	// busy machine's slow call does not.
	euNode, usNode := startEUUS(t, redisEU.URL(), redisUS.URL(), "500ms")
	eu, euLogs, us := euNode.base, euNode.logs, usNode.base
	fbm := regexp.MustCompile(`fallback_region=(\S+)`).FindStringSubmatch(euLogs.String())
	if fbm == nil {
		t.Fatalf("eu's logs lack its fallback region:\n%s", euLogs)
	}
	fallback := fbm[1]

	body := `{"key":"erin","limit":{"limit":100,"window":"3600s"}}`
	checkEU := func(n int) {
		t.Helper()
		for i := range n {
			if code, b := post(t, eu+"/ratelimit.v1.RateLimitService/Check", body); code != http.StatusOK || !strings.Contains(b, `"allowed":true`) {
				t.Fatalf("Check %d on eu: %d %s", i+1, code, b)
			}
		}
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		if _, ok := polltest.Poll(20*time.Second, cond); !ok {
			t.Fatalf("timed out waiting until %s; eu %v, us %v\neu logs:\n%s", what,
				regionCounts(peek(t, eu, body)), regionCounts(peek(t, us, body)), euLogs)
		}
	}
	checkEU(5)
	waitUntil("us sees eu's 5 hits", func() bool { return regionCounts(peek(t, us, body))["eu"] == "5" })

	redisEU.Pause(t)
	checkEU(7)
	if c := regionCounts(peek(t, eu, body)); c[fallback] != "7" {
		t.Errorf("eu's counts during the outage = %v, want %s: 7", c, fallback)
	}
	waitUntil("us sees the 7 hits eu admitted from its fallback", func() bool {
		return regionCounts(peek(t, us, body))[fallback] == "7"
	})
	if c := regionCounts(peek(t, us, body)); c["eu"] != "5" {
		t.Errorf("us's count of eu during the outage = %s, want 5: a fallback count never poses as eu's", c["eu"])
	}

	redisEU.Resume(t)
	waitUntil("eu is back on Redis", func() bool {
		code, b := get(t, eu+"/readyz")
		return code == http.StatusOK && b == "ok (store: primary)\n"
	})
	checkEU(1)
	// Calls abandoned at the timeout when Redis stalled may have been applied
	// once it resumed (counted twice, never lost): compare the regions, not
	// a fixed figure.
	waitUntil("eu and us agree on every region's count", func() bool {
		e, u := regionCounts(peek(t, eu, body)), regionCounts(peek(t, us, body))
		return e[fallback] == "7" && u[fallback] == "7" && e["eu"] != "" && e["eu"] == u["eu"]
	})
	t.Logf("after the outage: eu %v, us %v", regionCounts(peek(t, eu, body)), regionCounts(peek(t, us, body)))
}

// TestRunRedisDownAtStart: a node started while its Redis is down serves
// under the failure policy (local), says so once in its own log format,
// is not ready until Redis first answers, and then moves to Redis and
// counts there.
func TestRunRedisDownAtStart(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	n := startNode(t, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL(), "--log-level", "debug"}, env(nil))
	base, logs := n.base, n.logs

	check := base + "/ratelimit.v1.RateLimitService/Check"
	req := `{"key":"down-at-start","limit":{"limit":100,"window":"3600s"}}`
	if code, body := post(t, check, req); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Fatalf("Check with Redis down at start: %d %s, want allowed by the local policy", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not reached since start") {
		t.Errorf("/readyz with Redis down at start = %d %q, want 503 saying Redis was not reached", code, body)
	}
	l := logs.String()
	if n := strings.Count(l, "unreachable at start"); n != 1 {
		t.Errorf("logs say %d times that Redis is unreachable at start, want once:\n%s", n, l)
	}
	for _, line := range strings.Split(strings.TrimSpace(l), "\n") {
		if !strings.HasPrefix(line, "time=") {
			t.Errorf("log line not in the node's format: %q", line)
		}
	}
	if !strings.Contains(l, "component=redis") {
		t.Errorf("go-redis's own lines do not reach the node's logger:\n%s", l)
	}

	srv.Restart(t)
	waitPrimary(t, base)
	if code, body := post(t, check, req); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Fatalf("Check once Redis answers: %d %s", code, body)
	}
	// Another node on the same Redis sees the count: it is in Redis.
	other := startNode(t, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL()}, env(nil))
	defer stopNodes(other, n)
	if got := regionCounts(peek(t, other.base, req))["local"]; got != "1" {
		t.Errorf("Redis's count of region local = %q, want 1 (the Check made once Redis answered)", got)
	}
}

// TestRunRedisPasswordFile: --redis-password-file authenticates without a
// password in the URL or on the command line, and the password is never
// logged.
func TestRunRedisPasswordFile(t *testing.T) {
	const pass = "file-pass-Secr3t"
	srv := redistest.Start(t, "--requirepass", pass)
	file := filepath.Join(t.TempDir(), "redis-pass")
	writeFile(t, file, pass+"\n")
	n := startNode(t, []string{"--listen", "127.0.0.1:0", "--redis-url", srv.URL()},
		env(map[string]string{"RLNODE_REDIS_PASSWORD_FILE": file}))
	if code, body := get(t, n.base+"/readyz"); code != http.StatusOK || body != "ok (store: primary)\n" {
		t.Errorf("/readyz = %d %q, want the node on Redis", code, body)
	}
	if code, body := post(t, n.base+"/ratelimit.v1.RateLimitService/Check", `{"key":"pw","limit":{"limit":1,"window":"60s"}}`); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("Check: %d %s", code, body)
	}
	n.stop()
	if strings.Contains(n.logs.String(), pass) {
		t.Errorf("logs show the password:\n%s", n.logs)
	}

	checkRefused(t, []refusal{
		{[]string{"--redis-password-file", file}, "--redis-password-file: needs --redis-url"},
		{[]string{"--redis-url", srv.URL(), "--redis-password-file", file + ".missing"}, "read --redis-password-file"},
	})
}

// waitPrimary waits until base's /readyz says the node decides with Redis.
func waitPrimary(t *testing.T, base string) {
	t.Helper()
	polltest.Until(t, 20*time.Second, "/readyz to say the node decides with Redis", func() bool {
		code, body := get(t, base+"/readyz")
		return code == http.StatusOK && body == "ok (store: primary)\n"
	})
}

// TestRunRedisRestartKeepsLimit: us admits 6 of a limit of 10 and eu
// holds them; then eu's Redis restarts empty. eu finds the loss (at its
// first decision after the restart, or its epoch read), holds its
// decisions while us sends back what eu's Redis lost, us's own 6
// included, and then admits at most the 4 left: without that, eu would
// decide on an empty Redis and admit all 10 again.
func TestRunRedisRestartKeepsLimit(t *testing.T) {
	redisEU, redisUS := redistest.Start(t), redistest.Start(t)
	euNode, usNode := startEUUS(t, redisEU.URL(), redisUS.URL(), "2s")
	eu, euLogs, us := euNode.base, euNode.logs, usNode.base
	waitGuardAlive(t, us, "eu")

	body := `{"key":"dora","limit":{"limit":10,"window":"3600s"}}`
	// admit sends up to tries Checks to base until it has n admitted or
	// a denial that is not the guard's (a retry-after of a second or
	// more), and returns how many were admitted.
	admit := func(base string, n, tries int) int {
		t.Helper()
		got := 0
		for ; got < n && tries > 0; tries-- {
			code, b := post(t, base+"/ratelimit.v1.RateLimitService/Check", body)
			if code != http.StatusOK {
				t.Fatalf("Check on %s: %d %s", base, code, b)
			}
			var r struct {
				Allowed    bool   `json:"allowed"`
				RetryAfter string `json:"retryAfter"`
			}
			if err := json.Unmarshal([]byte(b), &r); err != nil {
				t.Fatalf("Check on %s: %v: %s", base, err, b)
			}
			if r.Allowed {
				got++
				continue
			}
			d, err := time.ParseDuration(r.RetryAfter)
			if err != nil || d >= time.Second {
				return got // the window is full
			}
			<-time.After(d) // a guard's or the hold's refusal: retry after it
		}
		return got
	}
	if got := admit(us, 6, 50); got != 6 {
		t.Fatalf("us admitted %d, want 6", got)
	}
	polltest.Until(t, 20*time.Second, "eu holds us's 6 hits", func() bool { return regionCounts(peek(t, eu, body))["us"] == "6" })

	redisEU.Restart(t) // empty: no persistence
	got := admit(eu, 10, 4)
	if got > 4 {
		t.Errorf("eu admitted %d after its Redis restarted empty, want at most 4 (us holds 6 of the 10)\neu's logs:\n%s", got, euLogs)
	}
	if c := regionCounts(peek(t, eu, body)); c["us"] != "6" {
		t.Errorf("eu's counts after the repair = %v, want us: 6", c)
	}
	if !strings.Contains(euLogs.String(), "asking peers for this region's totals") {
		t.Errorf("eu's logs lack the repair:\n%s", euLogs)
	}
	t.Logf("eu admitted %d after the restart; its counts %v", got, regionCounts(peek(t, eu, body)))
}
