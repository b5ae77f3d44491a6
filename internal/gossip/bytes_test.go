package gossip

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// bytesGoal is the replication cost asked of keys below half their limit:
// payload bytes per active key per second, all nodes together, three
// regions of one node each.
const bytesGoal = 100

// costRun is one measurement of replication cost: three regions of one
// node each (memory store, keyed gossip, real memberlist sockets on
// loopback behind a FaultNetwork with oneWay latency between regions), keys
// each offered perKey hits per second spread evenly over the regions.
type costRun struct {
	keys   int
	perKey float64 // hits per second offered to each key, all regions
	lim    window.Limit
	run    time.Duration
	oneWay time.Duration
	stale  time.Duration // Config.MaxStaleness; 0: the default
}

// costResult is what a costRun measured.
type costResult struct {
	offered, admitted int64
	payload           float64            // replication payload bytes, all nodes
	byReason          map[string]float64 // payload bytes by reason, all nodes
	wire              int64              // bytes between regions incl. memberlist
	keys              int
	run               time.Duration
}

// perKeySecond is the payload bytes per active key per second.
func (r costResult) perKeySecond() float64 {
	return r.payload / float64(r.keys) / r.run.Seconds()
}

func (r costResult) String() string {
	reasons := make([]string, 0, len(r.byReason))
	for k := range r.byReason {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	var b strings.Builder
	for _, k := range reasons {
		if v := r.byReason[k]; v > 0 {
			fmt.Fprintf(&b, " %s=%.0f", k, v/float64(r.keys)/r.run.Seconds())
		}
	}
	return fmt.Sprintf("%.0f payload bytes per active key per second (by reason:%s); %.0f on the inter-region wire incl. memberlist; %d keys, %d hits offered, %d admitted, over %v",
		r.perKeySecond(), b.String(), float64(r.wire)/float64(r.keys)/r.run.Seconds(), r.keys, r.offered, r.admitted, r.run)
}

// measureCost starts the three nodes, offers the load for c.run and
// returns the replication bytes sent while it ran.
func measureCost(tb testing.TB, c costRun) costResult {
	tb.Helper()
	fn := NewFaultNetwork(16)
	wan(fn, threeRegions, c.oneWay)
	key := []byte("0123456789abcdef")
	type rnode struct {
		node  *Node
		store *region.Memory
		name  string
	}
	var nodes []rnode
	seed := ""
	for _, r := range threeRegions {
		nt, err := Listen("127.0.0.1:0", nil)
		if err != nil {
			tb.Fatal(err)
		}
		cfg := testConfig()
		cfg.FlushInterval, cfg.HeartbeatInterval, cfg.PushPullInterval = DefaultFlushInterval, DefaultHeartbeatInterval, 10*time.Second
		cfg.Name, cfg.Region, cfg.SecretKey = r+"-0", r, key
		cfg.MaxStaleness = c.stale
		cfg.APIAddr = fmt.Sprintf("127.0.0.1:%d", 8000+len(nodes))
		cfg.Transport = NewFaultTransport(nt, fn, r)
		if seed != "" {
			cfg.Join = []string{seed}
		}
		st := region.NewMemory(region.MemoryConfig{Region: r})
		n, err := New(cfg, st)
		if err != nil {
			tb.Fatalf("New(%s): %v", cfg.Name, err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = n.Close(ctx)
		}()
		if seed == "" {
			seed = n.Addr()
		}
		nodes = append(nodes, rnode{n, st, cfg.Name})
	}
	polltest.Until(tb, 10*time.Second, "three members alive everywhere", func() bool {
		for _, rn := range nodes {
			alive := 0
			for _, m := range rn.node.Members() {
				if m.State == "alive" {
					alive++
				}
			}
			if alive != len(nodes) {
				return false
			}
		}
		return true
	})
	keys := keyNames("tenant-%05d", c.keys)
	snapshot := func() (float64, map[string]float64, int64) {
		var p float64
		by := map[string]float64{}
		for _, rn := range nodes {
			p += rn.node.met.bytesSentTotal()
			for r, v := range rn.node.met.bytesByReason() {
				by[r] += v
			}
		}
		var w int64
		for k, v := range fn.Stats() {
			if k[0] != k[1] {
				w += v.PacketBytes + v.StreamBytes
			}
		}
		return p, by, w
	}
	// Each region offers perKey/3 hits per second to every key, keys in
	// turn, catching up every 10 ms on what the elapsed time owes (so that
	// a late tick on a loaded machine does not lower the load).
	const tickEvery = 10 * time.Millisecond
	rate := float64(c.keys) * c.perKey / float64(len(nodes))
	started := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var res costResult
	for _, rn := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := 0
			var offered, admitted int64
			reqs := make([]region.Request, 1)
			out := make([]region.Result, 1)
			tick(stop, tickEvery, func(int) bool {
				for owed := int64(time.Since(started).Seconds() * rate); offered < owed; {
					k := keys[next%len(keys)]
					next++
					offered++
					reqs[0] = region.Request{Key: k, Limit: c.lim, Hits: 1, Now: time.Now()}
					if err := rn.store.Check(context.Background(), reqs, out); err != nil {
						tb.Errorf("Check: %v", err)
						return false
					}
					if out[0].Allowed {
						admitted++
						rn.node.Dirty(region.Total{Key: k, Window: c.lim.Window, Bucket: out[0].Bucket, Count: out[0].Local, Trail: out[0].LocalTrail,
							Limit: c.lim.Limit, Estimate: out[0].Estimate + 1})
					}
				}
				return true
			})
			mu.Lock()
			res.offered += offered
			res.admitted += admitted
			mu.Unlock()
		}()
	}
	// Measure the steady state: from one maximum staleness into the load
	// (when far keys have begun to go out) for c.run.
	warm := c.stale
	if warm <= 0 {
		warm = DefaultMaxStaleness
	}
	polltest.Until(tb, 2*warm+10*time.Second, "the warm-up to pass", func() bool { return time.Since(started) >= warm })
	p0, by0, w0 := snapshot()
	measured := time.Now()
	polltest.Until(tb, 2*c.run+10*time.Second, "the load period to pass", func() bool { return time.Since(measured) >= c.run })
	close(stop)
	wg.Wait()
	p1, by1, w1 := snapshot()
	res.run = time.Since(measured)
	res.keys = c.keys
	res.payload = p1 - p0
	res.wire = w1 - w0
	res.byReason = map[string]float64{}
	for r, v := range by1 {
		res.byReason[r] = v - by0[r]
	}
	return res
}

// farAndNear are the two key classes measured: far below the limit (a
// million per minute, offered 10 per second) and near it (offered 10 per
// second against 12 per second, each bucket ends above half its limit).
func farAndNear(keys int, run time.Duration) (far, near costRun) {
	far = costRun{keys: keys, perKey: 10, lim: window.Limit{Limit: 1_000_000, Window: time.Minute}, run: run, oneWay: 30 * time.Millisecond}
	near = far
	near.lim = window.Limit{Limit: 12, Window: time.Second}
	return far, near
}

// TestReplicationCost measures what replication spends per active key, for
// keys far below their limit and keys near it, and checks the figures are
// those of the urgency policy: far keys go only when their oldest unsent
// hit is a maximum staleness (1 s here) old, near keys at every flush in
// which they changed, echoed at the next; something is sent for every
// key, and no more than every total in every flush to both other regions
// could cost.
func TestReplicationCost(t *testing.T) {
	far, near := farAndNear(100, 3*time.Second)
	far.stale, near.stale = time.Second, time.Second
	got := map[string]costResult{}
	for _, c := range []struct {
		name      string
		run       costRun
		sent, not string // a reason bytes must be counted for, and one they must not
	}{{"far from limit", far, reasonPeriodic, reasonUrgent}, {"near limit", near, reasonUrgent, reasonPeriodic}} {
		r := measureCost(t, c.run)
		got[c.name] = r
		t.Logf("%s: %v", c.name, r)
		// Each flush (every 20 ms) sends each changed total to two regions,
		// once more as an echo: with about 45 bytes per entry that is at most
		// 3 nodes * 2 * 2 * 45 * 50 = 27,000 bytes per key per second; a
		// figure above it means totals go out more often than flushes do.
		if got := r.perKeySecond(); got <= 0 || got > 27000 {
			t.Errorf("%s: %.0f payload bytes per active key per second, want 1 to 27000", c.name, got)
		}
		if r.admitted == 0 {
			t.Errorf("%s: nothing admitted", c.name)
		}
		var sum float64
		for _, v := range r.byReason {
			sum += v
		}
		// The nodes keep sending (heartbeats) while the two counters are
		// read, one after the other: a frame or two may be in one and not
		// yet in the other. A kind of send left out of the reasons would
		// be far more.
		if slack := 2 * float64(testConfig().UDPBudget); math.Abs(sum-r.payload) > slack {
			t.Errorf("%s: bytes by reason sum to %.0f, bytes by kind to %.0f (more apart than two frames, %.0f)", c.name, sum, r.payload, slack)
		}
		// Near totals are echoed at the next flush; a far key changes
		// before its echo would be due, so its next send stands for it.
		for _, why := range []string{c.sent, reasonHeartbeat} {
			if r.byReason[why] <= 0 {
				t.Errorf("%s: no bytes counted as %s: %v", c.name, why, r.byReason)
			}
		}
		for _, why := range []string{c.not, reasonFlush} {
			if r.byReason[why] != 0 {
				t.Errorf("%s: %.0f bytes counted as %s, want none: %v", c.name, r.byReason[why], why, r.byReason)
			}
		}
	}
	// A far key goes about once a second instead of in about one flush in
	// five (each region offers it a hit every 300 ms) plus its echo: well
	// under half what a near key costs.
	if r := got["near limit"]; r.byReason[reasonEcho] <= 0 {
		t.Errorf("near limit: no bytes counted as echo: %v", r.byReason)
	}
	if f, n := got["far from limit"].perKeySecond(), got["near limit"].perKeySecond(); f > n/2 {
		t.Errorf("far keys cost %.0f bytes per key per second, near ones %.0f: want far at most half", f, n)
	}
}

// BenchmarkReplicationCost measures replication bytes per active key per
// second for 300 keys offered 10 hits per second each (three regions of
// one node), far from and near their limit, and reports whether keys below
// half their limit meet the goal of bytesGoal (and fails when they do
// not). Each measurement starts one maximum staleness into the load.
// RLCLUSTER_COST_SECONDS sets the measured period (default 20);
// RLCLUSTER_COST_KEYS=keys,rate the keys and the hits per second offered
// to each (default 300,10). It measures once, whatever b.N.
//
//	go test ./internal/gossip -run '^$' -bench ReplicationCost -benchtime 1x
func BenchmarkReplicationCost(b *testing.B) {
	run := 20 * time.Second
	if s := os.Getenv("RLCLUSTER_COST_SECONDS"); s != "" {
		d, err := time.ParseDuration(s + "s")
		if err != nil {
			b.Fatalf("RLCLUSTER_COST_SECONDS=%q: %v", s, err)
		}
		run = d
	}
	keys, perKey := 300, 10.0
	if s := os.Getenv("RLCLUSTER_COST_KEYS"); s != "" {
		if _, err := fmt.Sscanf(s, "%d,%g", &keys, &perKey); err != nil || keys < 1 || perKey <= 0 {
			b.Fatalf("RLCLUSTER_COST_KEYS=%q: want keys,hits-per-key-per-second (e.g. 10000,1): %v", s, err)
		}
	}
	far, near := farAndNear(keys, run)
	far.perKey, near.perKey = perKey, perKey
	for b.Loop() {
		rf := measureCost(b, far)
		rn := measureCost(b, near)
		b.ReportMetric(rf.perKeySecond(), "far-B/key/s")
		b.ReportMetric(rn.perKeySecond(), "near-B/key/s")
		verdict := "MET"
		if rf.perKeySecond() > bytesGoal {
			verdict = "NOT MET"
		}
		b.Logf("far from limit: %v", rf)
		b.Logf("near limit: %v", rn)
		b.Logf("goal: <= %d payload bytes per active key per second for keys below half their limit (all nodes, three regions): %s (%.0f)",
			bytesGoal, verdict, rf.perKeySecond())
		if rf.perKeySecond() > bytesGoal {
			b.Errorf("far from limit: %.0f payload bytes per active key per second, want <= %d", rf.perKeySecond(), bytesGoal)
		}
	}
}

// BenchmarkReplicationCostByLimit measures replication bytes per active key
// per second at limits of 10, 1000 and 100000 per minute (or the limits in
// RLCLUSTER_COST_LIMITS, comma-separated), with 20 keys each offered 0.9x
// its limit's rate spread over three regions of one node. Trails carry
// where the hits fell, so a key's bytes grow with the marks a flush sends:
// a mark per granule with hits, at most window.Granules. It measures once,
// whatever b.N, for RLCLUSTER_COST_SECONDS (default 10).
//
//	go test ./internal/gossip -run '^$' -bench ReplicationCostByLimit -benchtime 1x
func BenchmarkReplicationCostByLimit(b *testing.B) {
	run := 10 * time.Second
	if s := os.Getenv("RLCLUSTER_COST_SECONDS"); s != "" {
		d, err := time.ParseDuration(s + "s")
		if err != nil {
			b.Fatalf("RLCLUSTER_COST_SECONDS=%q: %v", s, err)
		}
		run = d
	}
	limits := []uint64{10, 1000, 100000}
	if s := os.Getenv("RLCLUSTER_COST_LIMITS"); s != "" {
		limits = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil || n < 1 {
				b.Fatalf("RLCLUSTER_COST_LIMITS=%q: %v", s, err)
			}
			limits = append(limits, n)
		}
	}
	for b.Loop() {
		for _, lim := range limits {
			c := costRun{keys: 20, lim: window.Limit{Limit: lim, Window: time.Minute}, run: run, oneWay: 30 * time.Millisecond}
			c.perKey = 0.9 * float64(lim) / 60
			r := measureCost(b, c)
			b.ReportMetric(r.perKeySecond(), fmt.Sprintf("B/key/s@%d", lim))
			b.Logf("limit %d per minute, offered 0.9x: %v", lim, r)
			if r.admitted == 0 {
				b.Errorf("limit %d: nothing admitted", lim)
			}
		}
	}
}
