package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/looptest"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/porttest"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

// TestRollingRestart restarts every node of region eu, one after the other,
// gracefully (as SIGTERM does), under steady load from clients that retry a
// failed request on the region's other node. No client sees an error, and
// every admitted hit is counted exactly once in eu's Redis and in us's view
// of eu: no acknowledged count is lost or double-counted.
func TestRollingRestart(t *testing.T) {
	redisEU, redisUS := redistest.Start(t), redistest.Start(t)
	us := startNode(t, []string{"--listen=127.0.0.1:0", "--region=us", "--node-name=us-1",
		"--redis-url", redisUS.URL(), "--gossip-addr=127.0.0.1:0", "--store-timeout=2s"}, env(nil))
	seed := gossipRE.FindStringSubmatch(us.logs.String())[1]

	type euNode struct {
		name, listen string
		*node        // the running node, replaced at each restart
	}
	startEU := func(n *euNode) {
		t.Helper()
		n.node = startNode(t, []string{"--listen", n.listen, "--region=eu", "--node-name", n.name,
			"--redis-url", redisEU.URL(), "--gossip-addr=127.0.0.1:0", "--join", seed, "--shutdown-timeout=10s",
			// In doubt (a Redis call abandoned at the timeout) counts twice;
			// a long timeout keeps a busy machine from making doubt here.
			"--store-timeout=2s"}, env(nil))
		if n.base != "http://"+n.listen {
			t.Fatalf("%s listens on %s, want %s", n.name, n.base, n.listen)
		}
	}
	nodes := []*euNode{
		{name: "eu-1", listen: fmt.Sprintf("127.0.0.1:%d", porttest.Steady(t))},
		{name: "eu-2", listen: fmt.Sprintf("127.0.0.1:%d", porttest.Steady(t))},
	}
	for _, n := range nodes {
		startEU(n)
	}

	const keys = 8
	body := func(k int) string {
		return fmt.Sprintf(`{"key":"rolling-%d","limit":{"limit":1000000,"window":"604800s"}}`, k)
	}
	var (
		admitted [keys]atomic.Uint64
		requests atomic.Uint64
		retried  atomic.Uint64
		failed   atomic.Uint64
		firstErr atomic.Value
	)
	client := &http.Client{Timeout: 5 * time.Second}
	checkOn := func(node *euNode, k int) (bool, error) {
		resp, err := client.Post("http://"+node.listen+"/ratelimit.v1.RateLimitService/Check", "application/json", strings.NewReader(body(k)))
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var r struct {
			Allowed bool `json:"allowed"`
		}
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("status %d", resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return false, err
		}
		return r.Allowed, nil
	}
	stop := looptest.Start(t, 4, func(w, i int) {
		k := (w*7 + i) % keys
		var err error
		var ok bool
		// Try the nodes in turn, at most 50 times in all (a
		// restarting node refuses connections for a moment).
		for attempt := range 50 {
			ok, err = checkOn(nodes[(w+i+attempt)%len(nodes)], k)
			if err == nil {
				break
			}
			retried.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
		requests.Add(1)
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
			return
		}
		if ok {
			admitted[k].Add(1)
		}
		time.Sleep(2 * time.Millisecond)
	})

	// Let the load run, then restart each eu node in turn.
	polltest.Until(t, 10*time.Second, "load to start", func() bool { return requests.Load() > 100 })
	for _, n := range nodes {
		n.stop()
		if !strings.Contains(n.logs.String(), "gossip node left") {
			t.Errorf("%s did not leave the pool:\n%s", n.name, n.logs)
		}
		before := requests.Load()
		startEU(n)
		polltest.Until(t, 10*time.Second, n.name+" to serve again", func() bool { return requests.Load() > before+100 })
	}
	stop()
	if f := failed.Load(); f != 0 {
		t.Errorf("%d of %d requests failed on every retry; first error: %v", f, requests.Load(), firstErr.Load())
	}

	// Every admitted hit is in eu's Redis and, after replication, in us's
	// view of eu: exactly once.
	var total uint64
	for k := range keys {
		want := admitted[k].Load()
		total += want
		for _, base := range []string{"http://" + nodes[0].listen, us.base} {
			var got uint64
			polltest.Until(t, 10*time.Second, fmt.Sprintf("%s to hold eu's %d hits on key %d", base, want, k), func() bool {
				got = 0
				for _, r := range peek(t, base, body(k)).Response.Stats.Regions {
					// eu's hits: counted by Redis, or, for a decision whose
					// Redis call timed out on a busy machine, by a node's
					// fallback region eu~<id> (see region.Failover).
					if r.Region == "eu" || strings.HasPrefix(r.Region, "eu~") {
						c, _ := strconv.ParseUint(r.Current, 10, 64)
						p, _ := strconv.ParseUint(r.Previous, 10, 64)
						got += c + p
					}
				}
				return got == want
			})
		}
	}
	t.Logf("rolling restart of eu-1 and eu-2: %d requests, %d retried on the other node, %d failed; %d admitted hits, all counted once in eu and in us",
		requests.Load(), retried.Load(), failed.Load(), total)
	stopNodes(nodes[0].node, nodes[1].node, us)
}
