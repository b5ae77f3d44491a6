package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// The tests in this file run whole nodes on an in-memory network (memNet,
// wrapped in a FaultNetwork for latency and partitions) inside
// testing/synctest bubbles, with region.Memory stores: the flush,
// reconcile, join and reconnect loops run on the bubble's fake clock, so
// their timings are exact and asserted, and nothing sleeps for real. So
// they run in parallel, after the package's tests on the real clock.

// sim is a pool in a bubble: one region.Memory per region, shared by the
// region's nodes as a regional Redis would be.
type sim struct {
	t      *testing.T
	fn     *FaultNetwork
	mn     *memNet
	stores map[string]*region.Memory
	nodes  map[string]*Node // by name: <region>-<i>
	offset time.Duration    // the nodes' clocks: the bubble's plus offset
}

func newSim(t *testing.T, regions []string, perRegion int, oneWay time.Duration) *sim {
	t.Helper()
	return newSimAt(t, regions, perRegion, oneWay, 0)
}

// newSimAt is newSim with every node's clock offset ahead of the
// bubble's (which starts in 2000), so a test can run at a date of its
// choosing.
func newSimAt(t *testing.T, regions []string, perRegion int, oneWay, offset time.Duration) *sim {
	t.Helper()
	s := &sim{t: t, fn: NewFaultNetwork(1), mn: newMemNet(), stores: map[string]*region.Memory{}, nodes: map[string]*Node{}, offset: offset}
	wan(s.fn, regions, oneWay)
	seed := ""
	for _, r := range regions {
		s.stores[r] = region.NewMemory(region.MemoryConfig{Region: r})
		for i := range perRegion {
			name := fmt.Sprintf("%s-%d", r, i)
			n := s.start(name, r, seed)
			if seed == "" {
				seed = n.Addr()
			}
		}
	}
	s.waitAlive(len(regions) * perRegion)
	return s
}

// start starts a node of region r joining seed (none when empty).
func (s *sim) start(name, r, seed string) *Node {
	s.t.Helper()
	cfg := testConfig()
	cfg.Name, cfg.Region = name, r
	cfg.Now = s.now
	cfg.Transport = NewFaultTransport(s.mn.transport(), s.fn, r)
	if seed != "" {
		cfg.Join = []string{seed}
	}
	n, err := New(cfg, s.stores[r])
	if err != nil {
		s.t.Fatalf("New(%s): %v", name, err)
	}
	s.nodes[name] = n
	return n
}

// close closes every node, then lets the bubble's clock run past every
// timeout that memberlist's goroutines may still wait on (a probe's, a
// stream's, or a leave broadcast's that Close stopped waiting for): the
// bubble's clock stops once its main goroutine returns, and it ends only
// when every goroutine has.
func (s *sim) close() {
	for _, n := range s.nodes {
		_ = n.Close(context.Background())
	}
	time.Sleep(max(2*testConfig().TCPTimeout, 10*time.Second))
}

func (s *sim) waitAlive(want int) {
	s.t.Helper()
	waitAllAlive(s.t, 30*time.Second, want, slices.Collect(maps.Values(s.nodes))...)
}

// now is the nodes' clock.
func (s *sim) now() time.Time { return time.Now().Add(s.offset) }

// hit admits one hit of key on node n as the API does (Check, then Dirty)
// and returns the bucket and the new local total.
func (s *sim) hit(n *Node, key string, lim window.Limit) (int64, uint64) {
	s.t.Helper()
	res := make([]region.Result, 1)
	if err := s.stores[n.Region()].Check(context.Background(), []region.Request{{Key: key, Limit: lim, Hits: 1, Now: s.now()}}, res); err != nil {
		s.t.Fatal(err)
	}
	if !res[0].Allowed {
		s.t.Fatalf("hit on %s denied", key)
	}
	n.Dirty(region.Total{Key: key, Window: lim.BucketWindow(res[0].Bucket), Bucket: res[0].Bucket, Count: res[0].Local})
	return res[0].Bucket, res[0].Local
}

// peek decides a request for one hit of key in region r without
// spending it.
func (s *sim) peek(r, key string, lim window.Limit) window.Decision {
	s.t.Helper()
	res := make([]region.Result, 1)
	if err := s.stores[r].Check(context.Background(), []region.Request{{Key: key, Limit: lim, Hits: 1, Now: s.now(), Peek: true}}, res); err != nil {
		s.t.Fatal(err)
	}
	return res[0].Decision
}

// count is region from's count of key's bucket as region at holds it.
func (s *sim) count(at, from, key string, w time.Duration, b int64) uint64 {
	s.t.Helper()
	v, err := s.stores[at].Vectors(context.Background(), []region.BucketRef{{Key: key, Window: w, Bucket: b}})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, tt := range v[0] {
		if tt.Region == from {
			return tt.Count
		}
	}
	return 0
}

// TestSimFlush: a hit admitted in eu reaches the other regions within one
// flush interval plus the one-way latency (the flush loop's tick, then one
// UDP packet), on the bubble's exact clock.
func TestSimFlush(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const oneWay = 30 * time.Millisecond
		s := newSim(t, threeRegions, 1, oneWay)
		defer s.close()
		lim := window.Limit{Limit: 100, Window: time.Minute}
		start := time.Now()
		b, c := s.hit(s.nodes["eu-0"], "alice", lim)
		took := waitFor(t, 5*time.Second, "ap and us hold eu's hit", func() bool {
			return s.count("us", "eu", "alice", time.Minute, b) == c && s.count("ap", "eu", "alice", time.Minute, b) == c
		})
		bound := testConfig().FlushInterval + oneWay + 10*time.Millisecond // the poll's step
		t.Logf("flush: eu's hit in every region after %v (bound %v)", time.Since(start), bound)
		if took > bound {
			t.Errorf("flush took %v, want <= %v", took, bound)
		}
	})
}

// TestSimReconcile: a bucket known only to reconciliation (touched, never
// flushed) reaches every region once it closes plus Grace, within a few
// one-way latencies (a TCP dial and a write), and exactly.
func TestSimReconcile(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const oneWay = 30 * time.Millisecond
		s := newSim(t, threeRegions, 1, oneWay)
		defer s.close()
		// Let the start-up pass: members that come alive are sent the open
		// totals (and tell their peers to send theirs), which is not what
		// this test is about. (The bubble's clock: no real wait.)
		time.Sleep(time.Second)
		w := 2 * time.Second
		lim := window.Limit{Limit: 100, Window: w}
		eu := s.nodes["eu-0"]
		res := make([]region.Result, 1)
		for range 7 {
			if err := s.stores["eu"].Check(context.Background(), []region.Request{{Key: "bob", Limit: lim, Hits: 1, Now: time.Now()}}, res); err != nil {
				t.Fatal(err)
			}
		}
		b := res[0].Bucket
		eu.remember(time.Now(), []region.Total{{Key: "bob", Window: w, Bucket: b, Region: "eu", Count: 1}})
		end := bucketEnd(w, b)
		time.Sleep(time.Until(end) - time.Millisecond)
		if got := s.count("us", "eu", "bob", w, b); got != 0 {
			t.Fatalf("us holds %d before the bucket closed: something other than reconciliation sent it", got)
		}
		waitFor(t, 10*time.Second, "us and ap hold eu's final count", func() bool {
			return s.count("us", "eu", "bob", w, b) == 7 && s.count("ap", "eu", "bob", w, b) == 7
		})
		took := time.Since(end)
		bound := testConfig().Grace + testConfig().FlushInterval + 4*oneWay + 10*time.Millisecond
		if testConfig().Grace == 0 {
			bound += testConfig().FlushInterval // Grace defaults to one flush interval
		}
		t.Logf("reconcile: every region exact %v after the bucket closed (bound %v)", took, bound)
		if took > bound {
			t.Errorf("reconciliation landed %v after the bucket closed, want <= %v", took, bound)
		}
	})
}

// TestSimPartitionHeal: eu and us are cut off until both see the other
// dead; eu keeps admitting. Once the link heals, the reconnect loop
// rejoins them and reconciliation's retries bring us eu's exact count.
func TestSimPartitionHeal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const oneWay = 30 * time.Millisecond
		s := newSim(t, []string{"eu", "us"}, 1, oneWay)
		defer s.close()
		w := 20 * time.Second
		lim := window.Limit{Limit: 1000, Window: w}
		s.fn.Partition("eu", "us")
		waitFor(t, 30*time.Second, "eu and us see each other dead", func() bool {
			return memberState(s.nodes["eu-0"], "us-0") == "dead" && memberState(s.nodes["us-0"], "eu-0") == "dead"
		})
		var b int64
		var c uint64
		for range 5 {
			b, c = s.hit(s.nodes["eu-0"], "carol", lim)
		}
		time.Sleep(time.Second)
		if got := s.count("us", "eu", "carol", w, b); got != 0 {
			t.Fatalf("us holds %d across the partition", got)
		}
		healed := time.Now()
		s.fn.HealAll()
		waitFor(t, 30*time.Second, "us holds eu's count after the heal", func() bool { return s.count("us", "eu", "carol", w, b) == c })
		took := time.Since(healed)
		// Nothing is flushed again after the heal (the echo went into the
		// cut): the count comes by the bucket's reconciliation, at its end
		// plus Grace, once the reconnect loop has rejoined the regions.
		limit := bucketEnd(w, b).Sub(healed) + testConfig().FlushInterval*3 + 4*oneWay + 10*time.Millisecond
		t.Logf("partition heal: us exact %v after the heal (bound %v: the bucket closes %v after it)", took, limit, bucketEnd(w, b).Sub(healed))
		if took > limit {
			t.Errorf("us agreed %v after the heal, want <= %v", took, limit)
		}
	})
}

// TestSimJoinReady: a node whose seed never answers retries with backoff
// and is ready until JoinTimeout has passed, then not ready; a node that
// joined another region is ready.
func TestSimJoinReady(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, []string{"eu", "us"}, 1, 10*time.Millisecond)
		defer s.close()
		if err := s.nodes["us-0"].Ready(); err != nil {
			t.Errorf("us-0 (joined eu) Ready() = %v, want nil", err)
		}
		var logs logtest.Buffer
		cfg := testConfig()
		cfg.Logger = logtest.Logger(&logs, slog.LevelWarn)
		cfg.Name, cfg.Region, cfg.JoinTimeout = "ap-0", "ap", 2*time.Second
		cfg.Join = []string{"127.0.0.1:9"} // nobody there
		cfg.Transport = NewFaultTransport(s.mn.transport(), s.fn, "ap")
		s.stores["ap"] = region.NewMemory(region.MemoryConfig{Region: "ap"})
		n, err := New(cfg, s.stores["ap"])
		if err != nil {
			t.Fatal(err)
		}
		s.nodes["ap-0"] = n
		time.Sleep(cfg.JoinTimeout - time.Millisecond)
		if err := n.Ready(); err != nil {
			t.Errorf("Ready() before JoinTimeout = %v, want nil", err)
		}
		time.Sleep(time.Millisecond)
		if err := n.Ready(); err == nil || !strings.Contains(err.Error(), "no other region reachable") {
			t.Errorf("Ready() after JoinTimeout = %v, want ErrNotJoined", err)
		}
		// Backoff 50 ms doubling: attempts at 0, 50, 150, 350, 750, 1550 ms
		// within the first 2 s.
		synctest.Wait()
		if got, want := strings.Count(logs.String(), "join gossip seeds failed"), 6; got != want {
			t.Errorf("%d join attempts in %v, want %d:\n%s", got, cfg.JoinTimeout, want, logs.String())
		}
		if strings.Contains(logs.String(), `\n`) {
			t.Errorf("join retry lines hold a literal \\n:\n%s", logs.String())
		}
	})
}

// TestSimCloseAllAtOnce: when every node stops at once, none waits out its
// leave timeout for a broadcast that nobody is left to receive.
func TestSimCloseAllAtOnce(t *testing.T) {
	t.Parallel()
	for round := range 10 {
		synctest.Test(t, func(t *testing.T) { closeAllAtOnce(t, round) })
	}
}

func closeAllAtOnce(t *testing.T, round int) {
	{
		s := newSim(t, []string{"eu", "us"}, 1+round%2, 10*time.Millisecond)
		const timeout = 10 * time.Second
		var wg sync.WaitGroup
		took := make(map[string]time.Duration, len(s.nodes))
		var mu sync.Mutex
		for name, n := range s.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				start := time.Now()
				_ = n.Close(ctx)
				mu.Lock()
				took[name] = time.Since(start)
				mu.Unlock()
			}()
		}
		wg.Wait()
		var longest time.Duration
		for _, d := range took {
			longest = max(longest, d)
		}
		if bound := 2 * time.Second; longest > bound {
			t.Errorf("round %d: %d nodes closed at once, the slowest Close took %v, want <= %v: %v", round, len(s.nodes), longest, bound, took)
		}
		s.close()
	}
}

// TestSimHealAgreement is TestHealAgreement on the bubble's exact clock:
// us is cut off from ap and eu until they see it dead, while every region
// admits hits in a long window (its bucket stays open) and a short one
// (its buckets close during the split). From the instant the link heals,
// every region holds every other region's count of every bucket hit
// within two flush intervals plus the one-way delay: each node probes the
// members it holds failed with its open and waiting totals every flush
// interval, so the first probe to cross lands within one flush interval
// plus the one-way delay of the heal.
func TestSimHealAgreement(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const oneWay = 60 * time.Millisecond
		regions := []string{"ap", "eu", "us"}
		s := newSim(t, regions, 1, oneWay)
		defer s.close()
		open := window.Limit{Limit: 1 << 40, Window: time.Hour}
		short := window.Limit{Limit: 1 << 40, Window: time.Second}
		type ref struct {
			key string
			lim window.Limit
			b   int64
		}
		hit := map[ref]bool{}
		round := func() {
			for i, r := range regions {
				for j, lim := range []window.Limit{open, short} {
					key := fmt.Sprintf("h%d%d", i, j)
					b, _ := s.hit(s.nodes[r+"-0"], key, lim)
					hit[ref{key, lim, b}] = true
				}
			}
		}
		round()
		time.Sleep(200 * time.Millisecond)
		s.fn.Partition("us", "ap")
		s.fn.Partition("us", "eu")
		waitFor(t, 30*time.Second, "ap and eu see us dead and us sees them dead", func() bool {
			return memberState(s.nodes["ap-0"], "us-0") == "dead" && memberState(s.nodes["eu-0"], "us-0") == "dead" &&
				memberState(s.nodes["us-0"], "ap-0") == "dead"
		})
		for range 3 {
			round()
			time.Sleep(700 * time.Millisecond) // the short buckets close
		}
		agree := func() (bool, string) {
			for r := range hit {
				for _, at := range regions {
					for _, from := range regions {
						if got, want := s.count(at, from, r.key, r.lim.Window, r.b), s.count(from, from, r.key, r.lim.Window, r.b); got != want {
							return false, fmt.Sprintf("%s holds %s's %s/%v/%d at %d, want %d", at, from, r.key, r.lim.Window, r.b, got, want)
						}
					}
				}
			}
			return true, ""
		}
		if ok, _ := agree(); ok {
			t.Fatal("the regions agree before the heal: the split cost nothing to repair")
		}
		s.fn.HealAll()
		healed := time.Now()
		bound := 2*testConfig().FlushInterval + oneWay
		var diff string
		for {
			ok, d := agree()
			if ok {
				break
			}
			diff = d
			if time.Since(healed) > 10*time.Second {
				t.Fatalf("no agreement 10s after the heal: %s", diff)
			}
			time.Sleep(time.Millisecond)
		}
		took := time.Since(healed)
		t.Logf("heal: every region agreed on %d buckets %v after the heal (bound %v); last difference: %s", len(hit), took, bound, diff)
		if took > bound {
			t.Errorf("agreement %v after the heal, want <= %v (two flush intervals + one-way delay)", took, bound)
		}
	})
}
