package gossip

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// ownNode is one node on a store of its own (the in-memory store, counting
// as a replica) or on a Redis, over real sockets.
type ownNode struct {
	name, region string
	node         *Node
	store        region.Store
}

// startOwn starts a node of reg on st over loopback behind fn, joining
// seed when set. ownStore sets Config.OwnStore; epoch, when set, is
// Config.Epoch.
func startOwn(t *testing.T, fn *FaultNetwork, name, reg string, st region.Store, ownStore bool,
	epoch func(context.Context) (string, bool, error), seed string) *ownNode {
	t.Helper()
	cfg := testConfig()
	cfg.Name, cfg.Region = name, reg
	cfg.Transport = listenLoopback(t, fn, reg)
	cfg.OwnStore = ownStore
	cfg.Epoch = epoch
	cfg.EpochInterval = 100 * time.Millisecond
	if seed != "" {
		cfg.Join = []string{seed}
	}
	n := startTestNode(t, cfg, st)
	return &ownNode{name: name, region: reg, node: n, store: st}
}

// hitOwn decides one hit at on as the API does (Check, then Dirty under the
// result's region) and returns whether it was admitted and its bucket.
func hitOwn(t *testing.T, on *ownNode, key string, lim window.Limit) (bool, int64) {
	t.Helper()
	reqs := []region.Request{{Key: key, Limit: lim, Hits: 1, Now: time.Now()}}
	res := make([]region.Result, 1)
	if err := on.store.Check(context.Background(), reqs, res); err != nil {
		t.Fatalf("Check at %s: %v", on.name, err)
	}
	r := res[0]
	if !r.Allowed {
		return false, r.Bucket
	}
	reg := on.region
	if r.LocalRegion != "" {
		reg = r.LocalRegion
	}
	on.node.Dirty(region.Total{Key: key, Window: lim.Window, Bucket: r.Bucket, Region: reg, Count: r.Local})
	return true, r.Bucket
}

// bucketSum returns the sum over replicas of key's bucket b in st.
func bucketSum(t *testing.T, st region.Store, key string, w time.Duration, b int64) uint64 {
	t.Helper()
	vs, err := st.Vectors(context.Background(), []region.BucketRef{{Key: key, Window: w, Bucket: b}})
	if err != nil {
		t.Fatalf("Vectors: %v", err)
	}
	var s uint64
	for _, tt := range vs[0] {
		s += tt.Count
	}
	return s
}

// countOf returns region reg's count of key's bucket b in st.
func countOf(t *testing.T, st region.Store, key string, w time.Duration, b int64, reg string) uint64 {
	t.Helper()
	vs, err := st.Vectors(context.Background(), []region.BucketRef{{Key: key, Window: w, Bucket: b}})
	if err != nil {
		t.Fatalf("Vectors: %v", err)
	}
	for _, tt := range vs[0] {
		if tt.Region == reg {
			return tt.Count
		}
	}
	return 0
}

// redisPair is eu-0 on a real Redis (its epoch read every 100 ms, the
// server's clock) and us-0 on an in-memory store of its own joined to it,
// 20 ms apart one way.
type redisPair struct {
	srv     *redistest.Server
	rd      *region.Redis
	usStore *region.Memory
	eu, us  *ownNode
}

// startRedisPair starts a redisPair behind a fault network of seed and
// waits until both see each other.
func startRedisPair(t *testing.T, seed uint64) redisPair {
	t.Helper()
	fn := NewFaultNetwork(seed)
	wan(fn, []string{"eu", "us"}, 20*time.Millisecond)
	p := redisPair{srv: redistest.Start(t)}
	p.rd = storetest.Open(t, region.Config{Region: "eu", Redis: region.RedisConfig{URL: p.srv.URL(), ServerClock: true},
		Failover: region.FailoverConfig{Timeout: testStoreTimeout}}).Redis
	p.usStore = region.NewMemory(region.MemoryConfig{Region: region.FallbackRegion("us"), Replica: true})
	p.eu = startOwn(t, fn, "eu-0", "eu", p.rd, false, p.rd.Epoch, "")
	p.us = startOwn(t, fn, "us-0", "us", p.usStore, true, nil, p.eu.node.Addr())
	waitMembers(t, []*ownNode{p.eu, p.us}, 2)
	return p
}

// hitEach admits i+1 hits on keys[i] at on, and returns each key's count
// and their bucket.
func hitEach(t *testing.T, on *ownNode, keys []string, lim window.Limit) (map[string]uint64, int64) {
	t.Helper()
	want := map[string]uint64{}
	var bucket int64
	for i, k := range keys {
		for range i + 1 {
			ok, b := hitOwn(t, on, k, lim)
			if !ok {
				t.Fatalf("hit on %s denied", k)
			}
			bucket = b
			want[k]++
		}
	}
	return want, bucket
}

// waitMembers polls until every node sees want members alive.
func waitMembers(t *testing.T, nodes []*ownNode, want int) {
	t.Helper()
	ns := make([]*Node, len(nodes))
	for i, on := range nodes {
		ns[i] = on.node
	}
	waitAllAlive(t, 10*time.Second, want, ns...)
}

// TestMemoryRegionNodes: two nodes of eu and one of us, each on its own
// in-memory store counting as a replica (as rlnode runs the memory store
// with gossip), over real memberlist sockets, hold a limit of 10 per 300 s
// whatever node the hits go to: for each order of hits below, each phase
// hits one node and lets replication settle before the next, and at most
// 11 hits are admitted in all (the limit plus the sliding estimate's
// rounding across a bucket boundary), and at least 10 (the limit stays
// usable).
func TestMemoryRegionNodes(t *testing.T) {
	fn := NewFaultNetwork(1)
	mem := func(reg string) region.Store {
		// As rlnode opens the in-memory store with gossip.
		return storetest.Open(t, region.Config{Region: reg, Replica: true})
	}
	eu0 := startOwn(t, fn, "eu-0", "eu", mem("eu"), true, nil, "")
	eu1 := startOwn(t, fn, "eu-1", "eu", mem("eu"), true, nil, eu0.node.Addr())
	us0 := startOwn(t, fn, "us-0", "us", mem("us"), true, nil, eu0.node.Addr())
	nodes := []*ownNode{eu0, eu1, us0}
	waitMembers(t, nodes, 3)
	lim := window.Limit{Limit: 10, Window: 300 * time.Second}
	type phase struct {
		at   *ownNode
		hits int
	}
	orders := map[string][]phase{
		"eu-0 8, eu-1 8, us 10":       {{eu0, 8}, {eu1, 8}, {us0, 10}},
		"us 5, eu-1 5, eu-0 5":        {{us0, 5}, {eu1, 5}, {eu0, 5}},
		"eu-1 3, us 3, eu-0 10, us 5": {{eu1, 3}, {us0, 3}, {eu0, 10}, {us0, 5}},
		"one at a time, round robin": {{eu0, 1}, {eu1, 1}, {us0, 1}, {eu0, 1}, {eu1, 1}, {us0, 1},
			{eu0, 1}, {eu1, 1}, {us0, 1}, {eu0, 1}, {eu1, 1}, {us0, 1}},
	}
	names := make([]string, 0, len(orders))
	for name := range orders {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		key := fmt.Sprintf("order%d", i)
		admitted := 0
		buckets := map[int64]bool{}
		for _, ph := range orders[name] {
			for range ph.hits {
				ok, b := hitOwn(t, ph.at, key, lim)
				buckets[b] = true
				if ok {
					admitted++
				}
			}
			// Settle: every node holds every replica's count.
			waitFor(t, 10*time.Second, "every node holds every admitted hit of "+key, func() bool {
				for _, on := range nodes {
					var s uint64
					for b := range buckets {
						s += bucketSum(t, on.store, key, lim.Window, b)
					}
					if s != uint64(admitted) {
						return false
					}
				}
				return true
			})
		}
		t.Logf("%s: %d admitted against a limit of 10", name, admitted)
		if admitted > 11 || admitted < 10 {
			t.Errorf("%s: %d admitted, want 10 or 11", name, admitted)
		}
	}
}

// TestRedisRestartRepair: region eu decides on a real redis-server, us on
// its own in-memory store. After eu's counts have replicated to us, eu's
// Redis is restarted empty; eu's node sees the new epoch, asks us for eu's
// totals and max-merges them back: every count us holds of eu is counted
// again in eu's Redis, and a decision in eu counts it.
func TestRedisRestartRepair(t *testing.T) {
	p := startRedisPair(t, 2)
	srv, rd, usStore, eu, us := p.srv, p.rd, p.usStore, p.eu, p.us

	lim := window.Limit{Limit: 1000, Window: time.Hour}
	keys := keyNames("r%d", 20)
	want, bucket := hitEach(t, eu, keys, lim) // key -> eu's count
	// A count us holds for eu: only what us merged.
	held := func(k string) uint64 { return countOf(t, usStore, k, lim.Window, bucket, "eu") }
	waitFor(t, 10*time.Second, "us holds eu's counts", func() bool {
		for _, k := range keys {
			if held(k) != want[k] {
				return false
			}
		}
		return true
	})
	// Close the repair window eu opened at start (its first epoch was
	// fresh), once us has no answer to it pending: what comes back after
	// the restart must come from the restart's own repair.
	waitFor(t, 5*time.Second, "us has no repair answer pending", func() bool {
		us.node.rep.mu.Lock()
		defer us.node.rep.mu.Unlock()
		return len(us.node.rep.deferred) == 0
	})
	eu.node.rep.mu.Lock()
	eu.node.rep.until = time.Time{}
	eu.node.rep.mu.Unlock()
	requested := counterValue(eu.node.met.repairs.WithLabelValues("requested"))

	srv.Restart(t) // empty: no persistence
	took := waitFor(t, 20*time.Second, "eu's Redis counts every total us holds of eu again", func() bool {
		for _, k := range keys {
			if bucketSum(t, rd, k, lim.Window, bucket) < held(k) {
				return false
			}
		}
		return true
	})
	t.Logf("eu's Redis restarted empty; its %d keys' counts were back %v later", len(keys), took.Round(time.Millisecond))
	for _, k := range keys {
		if got := bucketSum(t, rd, k, lim.Window, bucket); got != want[k] {
			t.Errorf("eu's Redis holds %d for %s after the repair, want exactly %d (never above the truth)", got, k, want[k])
		}
	}
	if got := counterValue(eu.node.met.repairs.WithLabelValues("requested")); got <= requested {
		t.Errorf("repairs requested = %v after the restart, want more than %v", got, requested)
	}
	if got := counterValue(eu.node.met.repairTs); got < float64(len(keys)) {
		t.Errorf("repair totals received = %v, want at least %d", got, len(keys))
	}
	if got := counterValue(us.node.met.repairs.WithLabelValues("answered")); got < 1 {
		t.Errorf("us answered %v repairs, want at least 1", got)
	}
	// The restored count takes part in decisions: key r19 holds 20 of
	// 1000; with a limit of 20 it is now full.
	ok, _ := hitOwn(t, eu, keys[len(keys)-1], window.Limit{Limit: 20, Window: lim.Window})
	if ok {
		t.Errorf("a hit on %s was admitted against a limit of 20 after the repair restored its 20", keys[len(keys)-1])
	}
	checkTiming(t, "repair after the restart", took, 5*testConfig().ReconnectInterval)
}

// TestClockSkewBound: an offset past MaxClockSkew is counted once per
// excursion, in either direction.
func TestClockSkewBound(t *testing.T) {
	n := receiver(t, "eu", region.NewMemory(region.MemoryConfig{Region: "eu"}))
	for i, c := range []struct {
		off  time.Duration
		want float64
	}{
		{10 * time.Millisecond, 0},
		{time.Second, 1},
		{2 * time.Second, 1}, // still the same excursion
		{0, 1},
		{-time.Second, 2},
	} {
		n.checkSkew("node-us", "us", c.off)
		if got := counterValue(n.met.skew); got != c.want {
			t.Errorf("step %d (offset %v): clock_skew_exceeded_total = %v, want %v", i, c.off, got, c.want)
		}
	}
}

// TestRepairAnswerOnlyWhenAsked: a repair answer (totals of this node's
// own region) is taken only while this node has a repair open, only from
// a member it asked, only for buckets that began before it asked, never
// naming a third region, and only as far as two sources agree when two
// were asked: one member's made-up count is not restored. The totals of
// the answerer's own region in it merge as its flush would.
func TestRepairAnswerOnlyWhenAsked(t *testing.T) {
	st := region.NewMemory(region.MemoryConfig{Region: "eu"})
	n := receiver(t, "eu", st)
	w := time.Minute
	b := window.Bucket(t0.UnixMilli(), w)
	send := func(from string, ts ...region.Total) {
		t.Helper()
		fs, err := Encode(KindRepaired, t0, testSender(from), ts, MaxMessage)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			deliver(n, f)
		}
	}
	eu := func(count uint64) region.Total {
		return region.Total{Key: "k", Window: w, Bucket: b, Region: "eu", Count: count}
	}
	step := func(name string, want uint64, reason string, drops float64) {
		t.Helper()
		if got := bucketSum(t, st, "k", w, b); got != want {
			t.Errorf("%s: holds %d, want %d", name, got, want)
		}
		if reason != "" {
			if got := n.met.dropCount(reason); got != drops {
				t.Errorf("%s: dropped %s = %v, want %v", name, reason, got, drops)
			}
		}
	}
	send("us", eu(7))
	step("no repair open", 0, "foreign_kind", 1)

	openRepair(n, "us", "ap", "a") // three regions asked: two must agree
	send("c", eu(7))
	step("a member not asked", 0, "unasked", 1)
	send("us", region.Total{Key: "k", Window: w, Bucket: b, Region: "ap", Count: 9})
	step("another region's totals", 0, "foreign_region", 1)
	send("us", eu(99999))
	step("one member's word", 0, "", 0)
	send("ap", eu(7))
	step("a second region agrees on 7", 7, "", 0)
	send("ap", eu(7)) // idempotent
	step("the same answer again", 7, "", 0)
	send("a", eu(10))
	step("a third region: two agree on 10", 10, "", 0)
	send("us", eu(100000))
	step("the first member raises its word", 10, "", 0)
	send("ap", region.Total{Key: "k", Window: w, Bucket: b + 1, Region: "eu", Count: 5})
	step("a bucket that began after the request", 10, "unasked", 2)
	if v := bucketSum(t, st, "k", w, b+1); v != 0 {
		t.Errorf("the later bucket holds %d, want 0", v)
	}
	// The answerer's own region's totals ride along, merged as its flush
	// would be, the later bucket's too.
	send("ap", region.Total{Key: "k2", Window: w, Bucket: b, Region: "ap", Count: 4},
		region.Total{Key: "k2", Window: w, Bucket: b + 1, Region: "ap", Count: 2})
	if v, v1 := bucketSum(t, st, "k2", w, b), bucketSum(t, st, "k2", w, b+1); v != 4 || v1 != 2 {
		t.Errorf("ap's own totals in its answer: held %d and %d, want 4 and 2", v, v1)
	}

	// One source asked (a pool of two regions, the other of one node):
	// its word is taken alone.
	st2 := region.NewMemory(region.MemoryConfig{Region: "eu"})
	n2 := receiver(t, "eu", st2)
	openRepair(n2, "us")
	fs, _ := Encode(KindRepaired, t0, testSender("us"), []region.Total{eu(12)}, MaxMessage)
	deliver(n2, fs[0])
	if got := bucketSum(t, st2, "k", w, b); got != 12 {
		t.Errorf("one source asked: holds %d, want 12", got)
	}
}

// openRepair opens a repair on n asked at t0, as RequestRepair does, of
// the test senders of regions, without the network.
func openRepair(n *Node, regions ...string) {
	n.rep.mu.Lock()
	defer n.rep.mu.Unlock()
	n.rep.until = t0.Add(repairWindow)
	n.rep.quorum.reset(t0)
	for _, r := range regions {
		n.rep.quorum.ask(n.members[testSender(r).Node])
	}
}

// TestLongPartitionHeals: two regions cut off from each other long enough
// that each has forgotten the other (as after more failed members than it
// remembers, or, before, an hour) still find each other again once the
// link heals: the node with a seed keeps joining it for as long as it runs.
func TestLongPartitionHeals(t *testing.T) {
	fn := NewFaultNetwork(4)
	x := startOwn(t, fn, "x-0", "x", region.NewMemory(region.MemoryConfig{Region: "x"}), false, nil, "")
	y := startOwn(t, fn, "y-0", "y", region.NewMemory(region.MemoryConfig{Region: "y"}), false, nil, x.node.Addr())
	waitMembers(t, []*ownNode{x, y}, 2)
	fn.Partition("x", "y")
	waitFor(t, 20*time.Second, "each declares the other dead", func() bool {
		return memberState(x.node, "y-0") == "dead" && memberState(y.node, "x-0") == "dead"
	})
	// The partition lasts past GossipToTheDeadTime, after which memberlist
	// itself stops talking to the dead: only this package's loops can heal
	// it. (A phase's length, not a wait for something to settle.)
	<-time.After(testConfig().GossipToTheDeadTime + time.Second)
	for _, on := range []*ownNode{x, y} {
		on.node.memMu.Lock()
		for name, m := range on.node.members {
			if !m.isLocal {
				delete(on.node.members, name) // forgotten
			}
		}
		on.node.memMu.Unlock()
	}
	fn.HealAll()
	took := waitFor(t, 20*time.Second, "both alive again", func() bool {
		return memberState(x.node, "y-0") == "alive" && memberState(y.node, "x-0") == "alive"
	})
	t.Logf("forgotten members found each other %v after the heal", took.Round(time.Millisecond))
}

// TestDeadMembersKept: a failed member stays listed, and so tried by the
// reconnect loop, however long it has been dead, up to maxDead of them.
func TestDeadMembersKept(t *testing.T) {
	n := receiver(t, "eu", region.NewMemory(region.MemoryConfig{Region: "eu"}))
	for i := range maxDead + 3 {
		n.setMember(memberNode(fmt.Sprintf("gone-%03d", i), "us", 1), "dead")
	}
	n.pruneMembers(time.Now().Add(24 * time.Hour))
	dead := 0
	for _, m := range n.Members() {
		if m.State == "dead" {
			dead++
		}
	}
	if dead != maxDead {
		t.Errorf("%d dead members listed a day later, want %d (the bound)", dead, maxDead)
	}
	if s := memberState(n, "gone-000"); s != "" {
		t.Errorf("the longest dead member is still listed (%s), want it forgotten first", s)
	}
	if s := memberState(n, fmt.Sprintf("gone-%03d", maxDead+2)); s != "dead" {
		t.Errorf("the newest dead member is %q, want dead", s)
	}
}

// TestRestartKeepsUnsentHits: eu decides on a real redis-server with
// replication by urgency, us on its own in-memory store. eu admits hits of
// a key far below its limit, which wait under its allowance, unsent; then
// eu's Redis restarts empty. Its peers hold none of those hits, so their
// repair answers cannot bring them back: the node's own unsent totals must
// be restored with them. Then the bucket's hits are all counted in eu's
// Redis again (none lost), and once the bucket closes both regions hold
// the same vector for it, the acknowledged one. The periodic send (after
// MaxStaleness) comes after the repair and before the bucket closes, so
// that a node that lost its hits from Redis still pushes its older, larger
// dirty total to us.
func TestRestartKeepsUnsentHits(t *testing.T) {
	fn := NewFaultNetwork(5)
	const oneWay = 20 * time.Millisecond
	wan(fn, []string{"eu", "us"}, oneWay)
	srv := redistest.Start(t)
	rd := storetest.Open(t, region.Config{Region: "eu", Redis: region.RedisConfig{URL: srv.URL()},
		Failover: region.FailoverConfig{Timeout: testStoreTimeout}}).Redis
	usStore := region.NewMemory(region.MemoryConfig{Region: region.FallbackRegion("us"), Replica: true})
	start := func(name, reg string, st region.Store, own bool, epoch func(context.Context) (string, bool, error), seed string) *ownNode {
		cfg := testConfig()
		cfg.Name, cfg.Region, cfg.OwnStore = name, reg, own
		cfg.Transport = listenLoopback(t, fn, reg)
		cfg.Epoch, cfg.EpochInterval = epoch, 100*time.Millisecond
		cfg.MaxStaleness = 3 * time.Second
		if seed != "" {
			cfg.Join = []string{seed}
		}
		return &ownNode{name: name, region: reg, node: startTestNode(t, cfg, st), store: st}
	}
	eu := start("eu-0", "eu", rd, false, rd.Epoch, "")
	us := start("us-0", "us", usStore, true, nil, eu.node.Addr())
	waitMembers(t, []*ownNode{eu, us}, 2)

	const hits = 10
	lim := window.Limit{Limit: 1000, Window: 6 * time.Second} // allowance (1000 - 2*10) / (2*2) = 245, and L/20 / 2 = 25: > 10
	b := waitBucketStart(t, lim.Window)
	key := "unsent"
	var acked uint64
	for range hits {
		res := make([]region.Result, 1)
		if err := rd.Check(context.Background(), []region.Request{{Key: key, Limit: lim, Hits: 1, Now: time.Now()}}, res); err != nil {
			t.Fatal(err)
		}
		r := res[0]
		if !r.Allowed || r.Bucket != b {
			t.Fatalf("hit %d: allowed %v in bucket %d, want allowed in %d", acked+1, r.Allowed, r.Bucket, b)
		}
		acked = r.Local
		eu.node.Dirty(region.Total{Key: key, Window: lim.Window, Bucket: r.Bucket, Count: r.Local, Limit: lim.Limit, Estimate: r.Estimate + 1})
	}
	count := func(st region.Store, from string) uint64 { return countOf(t, st, key, lim.Window, b, from) }
	requested := counterValue(eu.node.met.repairs.WithLabelValues("requested"))
	answered := counterValue(us.node.met.repairs.WithLabelValues("answered"))
	restarted := time.Now()
	srv.Restart(t) // empty: no persistence
	waitFor(t, 10*time.Second, "eu asks for a repair after the restart and us answers", func() bool {
		return counterValue(eu.node.met.repairs.WithLabelValues("requested")) > requested &&
			counterValue(us.node.met.repairs.WithLabelValues("answered")) > answered
	})
	// With a machine so slow that the periodic send reached us before its
	// answer, the answer brings the hits back and the test cannot fail.
	t.Logf("%d hits acknowledged in eu; us held %d of them when it answered eu's repair, %v after the restart began",
		acked, count(usStore, "eu"), time.Since(restarted).Round(time.Millisecond))
	end := bucketEndOf(lim.Window, b)
	// Every region agrees on the closed bucket within two flush intervals
	// plus the one-way delay of its reconciliation (Grace after the close),
	// a TCP dial and a poll step on a loaded machine aside.
	var euHas, usHas uint64
	deadline := end.Add(10 * time.Second)
	for {
		euHas, usHas = count(rd, "eu"), count(usStore, "eu")
		if time.Now().After(end) && euHas == acked && usHas == acked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the bucket closed: eu's Redis holds %d of eu's hits, us holds %d, want both %d (acknowledged)", euHas, usHas, acked)
		}
		<-time.After(10 * time.Millisecond) // poll step
	}
	took := max(time.Since(end), 0)
	checkTiming(t, "agreement on the closed bucket after its close", took, testConfig().Grace+2*testConfig().FlushInterval+4*oneWay)
}

// TestRepairBringsOthersBack: us admits hits on 20 keys and eu's Redis
// merges them; then eu's Redis restarts empty and us sends nothing more.
// The answers to eu's repair carry us's own totals, so eu's Redis holds
// every count of us again, exactly, one round trip after it asked, and a
// decision in eu counts them: otherwise they would come back only with
// us's next send (its next admission, or the bucket's reconciliation an
// hour later), and eu would admit meanwhile as if us had admitted nothing.
func TestRepairBringsOthersBack(t *testing.T) {
	p := startRedisPair(t, 6)
	srv, rd, eu, us := p.srv, p.rd, p.eu, p.us

	lim := window.Limit{Limit: 1000, Window: time.Hour}
	keys := keyNames("o%d", 20)
	want, bucket := hitEach(t, us, keys, lim) // key -> us's count
	held := func(k string) uint64 {           // eu's Redis's count of us
		return countOf(t, rd, k, lim.Window, bucket, p.usStore.Region())
	}
	all := func() bool {
		for _, k := range keys {
			if held(k) != want[k] {
				return false
			}
		}
		return true
	}
	waitFor(t, 10*time.Second, "eu's Redis holds us's counts", all)
	totalsSent := totalsSentBy(us)
	sent := waitQuiet(totalsSent)

	srv.Restart(t) // empty: no persistence
	took := waitFor(t, 20*time.Second, "eu's Redis holds every count of us again", all)
	t.Logf("eu's Redis restarted empty; us's %d keys' counts were back %v later", len(keys), took.Round(time.Millisecond))
	if got := totalsSent(); got != sent {
		t.Errorf("us sent %v bytes of totals after the restart, want none (the answer alone brings its counts back)", got-sent)
	}
	// Key o19 holds 20 of us's hits; with a limit of 20 eu denies it.
	if ok, _ := hitOwn(t, eu, keys[len(keys)-1], window.Limit{Limit: 20, Window: lim.Window}); ok {
		t.Errorf("a hit on %s was admitted in eu against a limit of 20 after the repair brought back us's 20", keys[len(keys)-1])
	}
	checkTiming(t, "others' counts back after the restart", took, 5*testConfig().ReconnectInterval)
}

// TestRestartHoldsDecisions: when eu's Redis restarts empty while its
// node runs, the node's guard view says it is restoring from the moment
// it asks for the repair until us has answered (at the most, two
// horizons less a flush interval plus the second us may wait before it
// answers eu again), so the guard refuses meanwhile; then it decides
// again. A node that finds its store without a marker at start (new, or
// emptied before it ran) does not hold. The view counts the loss
// (Losses), so that the guard reads a key's counts again before it
// decides on what a result of before the loss held.
func TestRestartHoldsDecisions(t *testing.T) {
	p := startRedisPair(t, 7)
	srv, eu := p.srv, p.eu
	if v := eu.node.GuardView(time.Now()); v.Restoring != 0 || v.Losses != 0 {
		t.Fatalf("eu restoring %v, %d losses after a start on a new Redis, want 0 and 0", v.Restoring, v.Losses)
	}
	waitFor(t, 10*time.Second, "eu hears us", func() bool { v := eu.node.GuardView(time.Now()); return !v.Off() })

	requested := counterValue(eu.node.met.repairs.WithLabelValues("requested"))
	srv.Restart(t)           // empty: no persistence
	var restoring guard.View // the view that said so longest
	waitFor(t, 10*time.Second, "eu asks for a repair after the restart", func() bool {
		if v := eu.node.GuardView(time.Now()); v.Restoring > restoring.Restoring {
			restoring = v
		}
		return counterValue(eu.node.met.repairs.WithLabelValues("requested")) > requested
	})
	if v := eu.node.GuardView(time.Now()); v.Restoring > restoring.Restoring {
		restoring = v
	}
	hold := RestoreHold(restoring.Horizon, testConfig().FlushInterval)
	if held := restoring.Restoring; held <= 0 || held > hold {
		t.Fatalf("eu restoring %v after it asked for a repair, want in (0, %v]", held, hold)
	}
	if restoring.Losses != 1 {
		t.Errorf("eu's view counts %d losses after its Redis restarted once, want 1", restoring.Losses)
	}
	g := guard.New(guard.Config{})
	lim := window.Limit{Limit: 100, Window: time.Minute}
	if ok, _, retry := g.Admit(time.Now(), "k", lim, 1, &restoring); ok || retry <= 0 || retry > restoring.Horizon {
		t.Errorf("guard under eu's view while restoring: admitted %v, retry after %v; want refused, retry in (0, %v]", ok, retry, restoring.Horizon)
	}
	took := waitFor(t, 5*time.Second, "eu decides again", func() bool { return eu.node.GuardView(time.Now()).Restoring == 0 })
	checkTiming(t, "the hold after the restart", took, hold)
}

// TestLossSeenAtDecision: eu reads its store's epoch only once an hour,
// yet when its Redis restarts empty it finds the loss at its first
// decision after it, and asks for the repair, and holds its decisions,
// within a round trip of that decision rather than at the next hourly
// read: on a key it counted, because the decision returns a count below
// the one it sent (Dirty); on a key new to it, because Redis lost its
// scripts too and the decision runs again after the node read the epoch
// (region.Redis.OnReload, as rlnode sets it).
func TestLossSeenAtDecision(t *testing.T) {
	for _, newKey := range []bool{false, true} {
		name := "a key it counted"
		if newKey {
			name = "a key new to it"
		}
		t.Run(name, func(t *testing.T) { lossSeenAtDecision(t, newKey) })
	}
}

func lossSeenAtDecision(t *testing.T, newKey bool) {
	fn := NewFaultNetwork(8)
	wan(fn, []string{"eu", "us"}, 20*time.Millisecond)
	srv := redistest.Start(t)
	rd := storetest.Open(t, region.Config{Region: "eu", Redis: region.RedisConfig{URL: srv.URL()},
		Failover: region.FailoverConfig{Timeout: testStoreTimeout}}).Redis
	usStore := region.NewMemory(region.MemoryConfig{Region: region.FallbackRegion("us"), Replica: true})
	cfg := testConfig()
	cfg.Name, cfg.Region = "eu-0", "eu"
	cfg.Transport = listenLoopback(t, fn, "eu")
	cfg.Epoch, cfg.EpochInterval = rd.Epoch, time.Hour
	eu := &ownNode{name: "eu-0", region: "eu", node: startTestNode(t, cfg, rd), store: rd}
	if newKey {
		rd.OnReload(eu.node.CheckEpoch)
		t.Cleanup(func() { rd.OnReload(nil) })
	}
	us := startOwn(t, fn, "us-0", "us", usStore, true, nil, eu.node.Addr())
	waitMembers(t, []*ownNode{eu, us}, 2)
	waitFor(t, 10*time.Second, "eu hears us", func() bool { v := eu.node.GuardView(time.Now()); return !v.Off() })

	lim := window.Limit{Limit: 1000, Window: time.Hour}
	key := "seen"
	var held time.Duration // the retry-after of a decision held
	hit := func() uint64 {
		res := make([]region.Result, 1)
		if err := rd.Check(context.Background(), []region.Request{{Key: key, Limit: lim, Hits: 1, Now: time.Now()}}, res); err != nil {
			t.Fatal(err)
		}
		r := res[0]
		if !r.Allowed {
			if r.RetryAfter > 0 && r.RetryAfter < time.Second {
				held = r.RetryAfter
				return 0
			}
			t.Fatalf("hit on %s denied", key)
		}
		// As the decision path records it: with the limit and estimate,
		// so the node keeps the key's state once sent.
		eu.node.Dirty(region.Total{Key: key, Window: lim.Window, Bucket: r.Bucket, Count: r.Local, Limit: lim.Limit, Estimate: r.Estimate + 1})
		return r.Local
	}
	for range 10 {
		hit()
	}
	waitFor(t, 10*time.Second, "us holds eu's 10 hits", func() bool {
		return bucketSum(t, usStore, key, lim.Window, window.Bucket(time.Now().UnixMilli(), lim.Window)) == 10
	})
	requested := counterValue(eu.node.met.repairs.WithLabelValues("requested"))
	srv.Restart(t) // empty: no persistence
	if newKey {
		key = "new"
		// The node reads the epoch before the decision runs again, and
		// holds it: denied, retryable after the hold, counting nothing.
		if got := hit(); got != 0 || held <= 0 {
			t.Fatalf("the first decision after the restart counted %d, held %v; want held", got, held)
		}
	} else if got := hit(); got != 1 {
		t.Fatalf("eu's count after the restart = %d, want 1 (the store lost the others)", got)
	}
	decided := time.Now()
	if got := counterValue(eu.node.met.repairs.WithLabelValues("requested")); newKey && got <= requested {
		t.Errorf("repairs requested = %v when the decision returned, want more than %v: the node reads the epoch before the decision runs again", got, requested)
	}
	took := waitFor(t, 10*time.Second, "eu asks for a repair after its first decision on the emptied store", func() bool {
		return counterValue(eu.node.met.repairs.WithLabelValues("requested")) > requested
	})
	if !newKey {
		if got := counterValue(eu.node.met.repairs.WithLabelValues("suspected")); got < 1 {
			t.Errorf("suspected losses = %v, want at least 1", got)
		}
	}
	if r := eu.node.GuardView(time.Now()).Restoring; r <= 0 {
		t.Errorf("eu restoring %v right after the repair it asked for, want > 0", r)
	}
	t.Logf("eu asked for the repair %v after its first decision on the emptied store", time.Since(decided).Round(time.Millisecond))
	checkTiming(t, "the loss seen after the first decision", took, 100*time.Millisecond)
}

// TestRepairAnswerFromALostStore: us's Redis restarts empty and its node
// has not found the loss yet (it reads no epoch here; a node finds it
// within a second, or at its next decision), then eu's Redis restarts
// too and eu asks us for its repair. us's store holds nothing to answer
// with, but its node still holds its own latest totals, and the answer
// carries them: eu's Redis holds us's counts again one round trip after
// it asked. Without them eu decided as if us had admitted nothing until
// us next sent (the fault search's seed 39867: two stores restarting
// 159 ms apart, 1.079 of the bound).
func TestRepairAnswerFromALostStore(t *testing.T) {
	fn := NewFaultNetwork(8)
	wan(fn, []string{"eu", "us"}, 20*time.Millisecond)
	euSrv, rd := redisRegion(t, "eu")
	usSrv, usRd := redisRegion(t, "us")
	eu := startOwn(t, fn, "eu-0", "eu", rd, false, rd.Epoch, "")
	us := startOwn(t, fn, "us-0", "us", usRd, false, nil, eu.node.Addr())
	waitMembers(t, []*ownNode{eu, us}, 2)

	// us's hits go as the API's do: with the limit and the estimate, so
	// that its node keeps the state of each key's bucket until it closes.
	lim := window.Limit{Limit: 1000, Window: time.Hour}
	keys := keyNames("l%d", 10)
	want := map[string]uint64{}
	var bucket int64
	for i, k := range keys {
		for range i + 1 {
			res := make([]region.Result, 1)
			if err := usRd.Check(context.Background(), []region.Request{{Key: k, Limit: lim, Hits: 1, Now: time.Now()}}, res); err != nil || !res[0].Allowed {
				t.Fatalf("hit on %s: %+v, %v", k, res[0], err)
			}
			r := res[0]
			us.node.Dirty(region.Total{Key: k, Window: lim.Window, Bucket: r.Bucket, Region: "us", Count: r.Local, Trail: r.LocalTrail,
				Limit: lim.Limit, Estimate: r.Estimate + 1})
			want[k], bucket = want[k]+1, r.Bucket
		}
	}
	all := func() bool {
		for _, k := range keys {
			if countOf(t, rd, k, lim.Window, bucket, "us") != want[k] {
				return false
			}
		}
		return true
	}
	waitFor(t, 10*time.Second, "eu's Redis holds us's counts", all)
	totalsSent := totalsSentBy(us)
	sent := waitQuiet(totalsSent)
	usSrv.Restart(t)
	if n := countOf(t, usRd, keys[len(keys)-1], lim.Window, bucket, "us"); n != 0 {
		t.Fatalf("us's Redis holds %d after its restart, want 0", n)
	}
	euSrv.Restart(t)
	took := waitFor(t, 20*time.Second, "eu's Redis holds every count of us again", all)
	t.Logf("both stores restarted empty; us's counts were back in eu's %v after eu's restart", took.Round(time.Millisecond))
	if got := totalsSent(); got != sent {
		t.Errorf("us sent %v bytes of totals after the restarts, want none (the answer alone brings its counts back)", got-sent)
	}
}

// redisRegion starts a Redis server for region reg and opens its store
// on the server's clock.
func redisRegion(t *testing.T, reg string) (*redistest.Server, *region.Redis) {
	t.Helper()
	srv := redistest.Start(t)
	rd := storetest.Open(t, region.Config{Region: reg, Redis: region.RedisConfig{URL: srv.URL(), ServerClock: true},
		Failover: region.FailoverConfig{Timeout: testStoreTimeout}}).Redis
	return srv, rd
}

// totalsSentBy returns a function that reports the bytes of totals on has
// sent other than to answer a repair.
func totalsSentBy(on *ownNode) func() float64 {
	return func() float64 {
		var b float64
		for _, r := range []string{"urgent", "periodic", "flush", "echo", "reconcile", "rejoin"} {
			b += counterValue(on.node.met.bytesWhy.WithLabelValues(r))
		}
		return b
	}
}

// waitQuiet waits until sent has not grown for a second (a node sends its
// totals once more a while after a flush, an echo for a lost packet) and
// returns its value then.
func waitQuiet(sent func() float64) float64 {
	v := sent()
	for quiet := time.Now(); time.Since(quiet) < time.Second; {
		<-time.After(50 * time.Millisecond) // poll step
		if b := sent(); b != v {
			v, quiet = b, time.Now()
		}
	}
	return v
}

// TestWithOwn: a repair answer adds the node's own totals only where its
// store lacks them or holds less, so a store that lost nothing sends each
// total once.
func TestWithOwn(t *testing.T) {
	tot := func(key string, b int64, n uint64) region.Total {
		return region.Total{Key: key, Window: time.Minute, Bucket: b, Region: "us", Count: n}
	}
	store := []region.Total{tot("a", 1, 5), tot("b", 1, 6)}
	own := []region.Total{tot("a", 1, 3), tot("a", 2, 2), tot("b", 1, 7)}
	got := withOwn(slices.Clone(store), own)
	want := []region.Total{tot("a", 1, 5), tot("b", 1, 6), tot("a", 2, 2), tot("b", 1, 7)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("withOwn = %v, want %v", got, want)
	}
	if got := withOwn(slices.Clone(store), []region.Total{tot("a", 1, 5), tot("b", 1, 1)}); len(got) != 2 {
		t.Errorf("withOwn with nothing newer = %v, want the store's two", got)
	}
}

// TestRepairRestoresClosedOwn: a region's count of the bucket that closed
// last still counts in every estimate for a window. When its Redis and the
// other region's restart empty one after the other, nobody's store holds
// that count any more, and the node restores it from what it kept.
func TestRepairRestoresClosedOwn(t *testing.T) {
	fn := NewFaultNetwork(8)
	wan(fn, []string{"eu", "us"}, 20*time.Millisecond)
	euSrv, euRd := redisRegion(t, "eu")
	usSrv, usRd := redisRegion(t, "us")
	// eu does not read its epoch: its loss stays unseen, as when the
	// second restart comes within a round trip of the first.
	eu := startOwn(t, fn, "eu-0", "eu", euRd, false, nil, "")
	us := startOwn(t, fn, "us-0", "us", usRd, false, usRd.Epoch, eu.node.Addr())
	waitMembers(t, []*ownNode{eu, us}, 2)

	// Hits early in a bucket of 3 s, so that it closes and the repair
	// comes well within the window after it.
	lim := window.Limit{Limit: 1000, Window: 3 * time.Second}
	bucket := waitBucketStart(t, lim.Window)
	end := bucketEndOf(lim.Window, bucket)
	const key, hits = "closed", 7
	for range hits {
		res := make([]region.Result, 1)
		if err := usRd.Check(context.Background(), []region.Request{{Key: key, Limit: lim, Hits: 1, Now: time.Now()}}, res); err != nil || !res[0].Allowed {
			t.Fatalf("hit: %+v, %v", res[0], err)
		}
		r := res[0]
		if r.Bucket != bucket {
			t.Fatalf("hit in bucket %d, want %d", r.Bucket, bucket)
		}
		us.node.Dirty(region.Total{Key: key, Window: lim.Window, Bucket: r.Bucket, Region: "us", Count: r.Local, Trail: r.LocalTrail,
			Limit: lim.Limit, Estimate: r.Estimate + 1})
	}
	waitFor(t, 5*time.Second, "eu's Redis holds us's hits", func() bool { return countOf(t, euRd, key, lim.Window, bucket, "us") == hits })
	// The bucket closes; us forgets its state of it at its next flush.
	<-time.After(time.Until(end) + 100*time.Millisecond)

	euSrv.Restart(t)
	usSrv.Restart(t)
	took := waitFor(t, time.Until(end.Add(lim.Window))-200*time.Millisecond,
		"us's Redis holds its count of the closed bucket again", func() bool { return countOf(t, usRd, key, lim.Window, bucket, "us") == hits })
	t.Logf("both stores restarted after the bucket closed; us's count of it was back in %v", took.Round(time.Millisecond))
}
