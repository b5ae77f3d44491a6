package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// The tests in this file reproduce, over real loopback sockets, the
// attacks on replication that a keyless pool once let through: each fails
// without the receive path's checks.

// attackPool is a victim node of region "us" on the in-memory store, one
// honest member of "eu", and a rogue member of region "evil" (joining
// needs no key on loopback: a keyless pool trusts whoever joins to report
// only its own region).
type attackPool struct {
	victim, honest, rogue *Node
	store                 *region.Memory
}

func newAttackPool(t *testing.T) *attackPool {
	t.Helper()
	p := &attackPool{store: region.NewMemory(region.MemoryConfig{Region: "us"})}
	mk := func(name, reg string, store Store, join []string) *Node {
		cfg := testConfig()
		cfg.Name, cfg.Region, cfg.Transport, cfg.Join = name, reg, listenLoopback(t, nil, ""), join
		return startTestNode(t, cfg, store)
	}
	p.victim = mk("us-0", "us", p.store, nil)
	p.honest = mk("eu-0", "eu", region.NewMemory(region.MemoryConfig{Region: "eu"}), []string{p.victim.Addr()})
	p.rogue = mk("evil-0", "evil", region.NewMemory(region.MemoryConfig{Region: "evil"}), []string{p.victim.Addr()})
	waitFor(t, 10*time.Second, "the victim and its members see each other alive", func() bool {
		return aliveMembers(p.victim) == 3 && memberState(p.honest, p.victim.cfg.Name) == "alive" && memberState(p.rogue, p.victim.cfg.Name) == "alive"
	})
	return p
}

// admit spends n hits of key on the victim's store in the current bucket
// and returns the bucket.
func (p *attackPool) admit(t *testing.T, key string, lim window.Limit, n int) int64 {
	t.Helper()
	var b int64
	for range n {
		res := make([]region.Result, 1)
		if err := p.store.Check(context.Background(), []region.Request{{Key: key, Limit: lim, Hits: 1, Now: time.Now()}}, res); err != nil {
			t.Fatal(err)
		}
		b = res[0].Bucket
	}
	return b
}

// vector reads one bucket of key from the victim's store.
func (p *attackPool) vector(t *testing.T, key string, w time.Duration, b int64) map[string]uint64 {
	t.Helper()
	return storetest.RegionCounts(t, p.store, key, w, b)
}

// sendAsRogue sends frame from the rogue member to the victim over TCP
// (memberlist's SendReliable), as a member that joined can.
func (p *attackPool) sendAsRogue(t *testing.T, frame []byte) {
	t.Helper()
	if err := p.rogue.sendStream(memberOf(t, p.rogue, p.victim.cfg.Name), frame); err != nil {
		t.Fatalf("SendReliable: %v", err)
	}
}

// memberOf returns a copy of n's record of the member named name, to send
// it frames as n does (stamped for it: see replay.go).
func memberOf(t testing.TB, n *Node, name string) *member {
	t.Helper()
	n.memMu.RLock()
	defer n.memMu.RUnlock()
	m := n.members[name]
	if m == nil {
		t.Fatalf("%s does not know %s", n.cfg.Name, name)
	}
	cp := *m
	return &cp
}

// knows reports whether n has admitted the member called name.
func knows(n *Node, name string) bool {
	n.memMu.RLock()
	defer n.memMu.RUnlock()
	return n.members[name] != nil
}

// settle sends a harmless frame from the honest member after the attack and
// waits until it merged: frames are handled in order, so whatever the
// attack did has happened by then.
func (p *attackPool) settle(t *testing.T) {
	t.Helper()
	before := counterValue(p.victim.met.merges)
	now := time.Now()
	fs, err := Encode(KindFlush, now, p.honest.self(), []region.Total{{Key: "settle", Window: time.Minute, Bucket: now.Unix() / 60, Region: "eu", Count: 1}}, 1360)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.honest.sendStream(memberOf(t, p.honest, p.victim.cfg.Name), fs[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the honest frame merged", func() bool { return counterValue(p.victim.met.merges) > before })
}

// TestAttackForgedCountFromOutsider: one UDP packet, a bare memberlist user
// message from a process that never joined, carrying a count of 10^15 for a
// made-up region (and another under a real member's name and region,
// without its token), merges nothing.
func TestAttackForgedCountFromOutsider(t *testing.T) {
	p := newAttackPool(t)
	lim := window.Limit{Limit: 10, Window: time.Minute}
	b := p.admit(t, "alice", lim, 1)
	conn, err := net.Dial("udp", p.victim.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const userMsg = 8 // memberlist's user message type
	// Frames a member sends before the victim has seen it join are dropped
	// as not_member too (the pool's start-up races): count from here.
	before := p.victim.met.dropCount("not_member")
	for _, from := range []Sender{
		{Node: "outsider", Region: "zz", Token: 1},
		{Node: "eu-0", Region: "eu", Token: 1}, // a real member's name, a guessed token
	} {
		fs, err := Encode(KindFlush, time.Now(), from, []region.Total{{Key: "alice", Window: time.Minute, Bucket: b, Region: from.Region, Count: 1e15}}, 1360)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(append([]byte{userMsg}, fs[0]...)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "both forged frames dropped", func() bool { return p.victim.met.dropCount("not_member") >= before+2 })
	p.settle(t)
	if got, want := p.vector(t, "alice", time.Minute, b), map[string]uint64{"us": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("alice's bucket = %v, want %v", got, want)
	}
}

// TestAttackMemberReportsOtherRegion: a member that joined reports counts
// only for its own region; a count of 10^15 for a made-up region or for
// another member's region is dropped whole.
func TestAttackMemberReportsOtherRegion(t *testing.T) {
	p := newAttackPool(t)
	b := p.admit(t, "alice", window.Limit{Limit: 10, Window: time.Minute}, 1)
	for _, r := range []string{"zz", "eu", "us"} {
		fs, _ := Encode(KindReconcile, time.Now(), p.rogue.self(), []region.Total{{Key: "alice", Window: time.Minute, Bucket: b, Region: r, Count: 1e15}}, 1360)
		p.sendAsRogue(t, fs[0])
	}
	p.settle(t)
	if got, want := p.victim.met.dropCount("foreign_region"), 3.0; got != want {
		t.Errorf("dropped(foreign_region) = %v, want %v", got, want)
	}
	if got, want := p.vector(t, "alice", time.Minute, b), map[string]uint64{"us": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("alice's bucket = %v, want %v", got, want)
	}
}

// TestAttackFarFutureBucket: a total for a bucket far in the future would
// make the store drop the key's current buckets (it keeps the newest two),
// giving the key its whole limit again. It is dropped.
func TestAttackFarFutureBucket(t *testing.T) {
	p := newAttackPool(t)
	lim := window.Limit{Limit: 10, Window: time.Minute}
	b := p.admit(t, "alice", lim, 10)
	fs, _ := Encode(KindFlush, time.Now(), p.rogue.self(), []region.Total{{Key: "alice", Window: time.Minute, Bucket: b + 1_000_000, Region: "evil", Count: 1}}, 1360)
	p.sendAsRogue(t, fs[0])
	p.settle(t)
	if got, want := p.victim.met.dropCount("future_bucket"), 1.0; got != want {
		t.Errorf("dropped(future_bucket) = %v, want %v", got, want)
	}
	if got := p.vector(t, "alice", time.Minute, b)["us"]; got != 10 {
		t.Errorf("alice's spent count = %d after the attack, want 10", got)
	}
	res := make([]region.Result, 1)
	if err := p.store.Check(context.Background(), []region.Request{{Key: "alice", Limit: lim, Hits: 1, Now: time.Now()}}, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Allowed {
		t.Errorf("alice was allowed an 11th hit of 10 after the attack")
	}
}

// TestAttackManyRegions: tens of thousands of region names in one bucket
// (made up, or replica names of the rogue's own region) once made every
// Peek on the key slow; a bucket now holds at most 1 + MaxReplicas entries
// per member region.
func TestAttackManyRegions(t *testing.T) {
	p := newAttackPool(t)
	now := time.Now()
	b := now.Unix() / 60
	const names = 20000
	for start := 0; start < names; start += MaxRegions - 1 {
		var ts []region.Total
		for i := start; i < min(start+MaxRegions-1, names); i++ {
			ts = append(ts, region.Total{Key: "alice", Window: time.Minute, Bucket: b, Region: fmt.Sprintf("evil~%06x", i), Count: 1})
		}
		fs, err := Encode(KindFlush, now, p.rogue.self(), ts, maxReliableFrame)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			p.sendAsRogue(t, f)
		}
	}
	p.settle(t)
	got := len(p.vector(t, "alice", time.Minute, b))
	if want := p.victim.cfg.MaxReplicas; got != want {
		t.Errorf("alice's bucket holds %d regions after %d replica names, want the bound %d", got, names, want)
	}
	if p.victim.met.dropCount("replicas_full") == 0 {
		t.Errorf("no frame counted as replicas_full")
	}
}

// TestAttackReplicaOfAnotherRegion: a member of region eu-west reports
// counts under a name that only looks like a replica of eu ("eu~" and 61
// more bytes: a prefix of eu-west, cut to 64 bytes, as replica names of
// long regions once were). It is dropped whole: a replica name is exactly
// <region>~<6 hex digits> of the sender's own region.
func TestAttackReplicaOfAnotherRegion(t *testing.T) {
	p := newAttackPool(t)
	cfg := testConfig()
	cfg.Name, cfg.Region, cfg.Transport, cfg.Join = "eu-west-0", "eu-west", listenLoopback(t, nil, ""), []string{p.victim.Addr()}
	west := startTestNode(t, cfg, region.NewMemory(region.MemoryConfig{Region: "eu-west"}))
	waitFor(t, 10*time.Second, "the victim and eu-west-0 see each other alive", func() bool {
		return aliveMembers(p.victim) == 4 && memberState(west, p.victim.cfg.Name) == "alive"
	})
	b := p.admit(t, "alice", window.Limit{Limit: 10, Window: time.Minute}, 1)
	for _, name := range []string{"eu~" + strings.Repeat("0", MaxRegionLen-3), "eu~0f1e2d", "eu-west~0F1E2D"} {
		fs, err := Encode(KindFlush, time.Now(), west.self(), []region.Total{{Key: "alice", Window: time.Minute, Bucket: b, Region: name, Count: 1000}}, 1360)
		if err != nil {
			t.Fatal(err)
		}
		if err := west.sendStream(memberOf(t, west, p.victim.cfg.Name), fs[0]); err != nil {
			t.Fatal(err)
		}
	}
	p.settle(t)
	if got, want := p.victim.met.dropCount("foreign_region"), 3.0; got != want {
		t.Errorf("dropped(foreign_region) = %v, want %v", got, want)
	}
	if got, want := p.vector(t, "alice", time.Minute, b), map[string]uint64{"us": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("alice's bucket = %v, want %v", got, want)
	}
}

// TestAttackBadNamesAndCounts: a region name that is not valid UTF-8 (it
// once broke every Check on the key and /metrics) and counts that wrap
// their sum are refused; /metrics still gathers.
func TestAttackBadNamesAndCounts(t *testing.T) {
	p := newAttackPool(t)
	now := time.Now()
	b := now.Unix() / 60
	bad, err := Encode(KindFlush, now, Sender{Node: p.rogue.cfg.Name, Region: "evil\xff", Token: p.rogue.token},
		[]region.Total{{Key: "alice", Window: time.Minute, Bucket: b, Region: "evil\xff", Count: 1}}, 1360)
	if err != nil {
		t.Fatal(err)
	}
	p.sendAsRogue(t, bad[0])
	// Two replicas at 2^63 each would wrap a uint64 sum to 0. Encode
	// leaves such counts out, so the frame is patched by hand: MaxCount's
	// last uvarint byte 0x10 (2^53) becomes 0x7f.
	wrap, _ := Encode(KindFlush, now, p.rogue.self(), []region.Total{{Key: "alice", Window: time.Minute, Bucket: b, Region: "evil~000001", Count: MaxCount}}, 1360)
	w := wrap[0]
	w[len(w)-1] = 0x7f
	p.sendAsRogue(t, w)
	p.settle(t)
	if got, want := p.victim.met.dropCount("malformed"), 2.0; got != want {
		t.Errorf("dropped(malformed) = %v, want %v", got, want)
	}
	if got := p.vector(t, "alice", time.Minute, b); len(got) != 0 {
		t.Errorf("alice's bucket = %v, want nothing merged", got)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.victim.Collectors()...)
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gather /metrics: %v", err)
	}
}

// TestMembersForgotten: the member, clock-offset and freshness maps forget
// a member that left, once GossipToTheDeadTime has passed.
func TestMembersForgotten(t *testing.T) {
	p := newAttackPool(t)
	waitFor(t, 10*time.Second, "a clock offset for eu-0", func() bool { _, ok := p.victim.ClockOffsets()["eu-0"]; return ok })
	p.settle(t)
	if len(p.victim.Ages()) == 0 {
		t.Fatal("no region freshness recorded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.honest.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "eu-0 left", func() bool { return memberState(p.victim, "eu-0") == "left" })
	if _, ok := p.victim.ClockOffsets()["eu-0"]; ok {
		t.Errorf("eu-0 still has a clock offset after it left")
	}
	p.victim.pruneMembers(time.Now().Add(p.victim.cfg.GossipToTheDeadTime + time.Second))
	if s := memberState(p.victim, "eu-0"); s != "" {
		t.Errorf("eu-0 still listed (%s) after GossipToTheDeadTime", s)
	}
	for _, a := range p.victim.Ages() {
		if a.Region == "eu" {
			t.Errorf("region eu still has a freshness entry after its last member was forgotten")
		}
	}
}

func memberState(n *Node, name string) string {
	for _, m := range n.Members() {
		if m.Name == name {
			return m.State
		}
	}
	return ""
}

// TestNoKeyOffLoopback: New refuses a keyless node on an address other
// than loopback, unless Insecure, with a message that says how to make a
// key.
func TestNoKeyOffLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:7946", ":7946"} {
		_, err := New(Config{Name: "n", Region: "eu", BindAddr: addr}, region.NewMemory(region.MemoryConfig{Region: "eu"}))
		if err == nil || !strings.Contains(err.Error(), "head -c 32 /dev/urandom | base64") {
			t.Errorf("New(BindAddr %s, no key) error = %v, want ErrNoKey", addr, err)
		}
	}
	cfg := testConfig()
	cfg.Name, cfg.Region, cfg.BindAddr, cfg.Insecure = "n", "eu", "0.0.0.0:0", true
	n, err := New(cfg, region.NewMemory(region.MemoryConfig{Region: "eu"}))
	if err != nil {
		t.Fatalf("New(Insecure) error = %v", err)
	}
	_ = n.Close(context.Background())
}

// TestAttackLogFlood: 20,000 garbage UDP packets, sent without the key to
// a node that has one, once wrote 7,713 ERROR lines (1.1 MB) in 0.2 s.
// Each makes memberlist log "Decrypt packet failed"; the first
// logBurst go to the log and the rest are counted in
// rlcluster_gossip_log_lines_suppressed_total.
func TestAttackLogFlood(t *testing.T) {
	var logs logtest.Buffer
	cfg := testConfig()
	cfg.Name, cfg.Region, cfg.Transport, cfg.SecretKey = "us-0", "us", listenLoopback(t, nil, ""), make([]byte, 32)
	cfg.Logger = logtest.Logger(&logs, slog.LevelInfo)
	n := startTestNode(t, cfg, region.NewMemory(region.MemoryConfig{Region: "us"}))
	conn, err := net.Dial("udp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const packets, round = 20000, 1000
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, 100)
	decrypt, label := "Decrypt packet failed", "discarding packet with unacceptable label"
	seen := func(msg string) float64 {
		return float64(strings.Count(logs.String(), msg)) + counterValue(n.met.logSuppressed.WithLabelValues("error: "+msg))
	}
	// Rounds of garbage, each followed by a packet with a label the node
	// does not use (memberlist logs it under another kind): packets are
	// read in order, so once the marker is seen the round has been read.
	for r := range packets / round {
		for range round {
			for i := range garbage {
				garbage[i] = byte(rng.Uint32())
			}
			garbage[0] = 1 // not memberlist's label header
			if _, err := conn.Write(garbage); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.Write([]byte{244, 3, 'e', 'n', 'd'}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the round read", func() bool { return seen(label) >= float64(r+1) })
	}
	arrived := seen(decrypt)
	lines := strings.Count(logs.String(), decrypt)
	suppressed := counterValue(n.met.logSuppressed.WithLabelValues("error: " + decrypt))
	t.Logf("%d garbage packets sent, %v read: %d lines logged (%d bytes of log in all), %v counted as suppressed",
		packets, arrived, lines, len(logs.String()), suppressed)
	if arrived < round {
		t.Fatalf("only %v garbage packets read, want at least %d for a flood", arrived, round)
	}
	if lines != logBurst {
		t.Errorf("%d lines of %q logged, want %d", lines, decrypt, logBurst)
	}
	if got, want := suppressed, arrived-logBurst; got != want {
		t.Errorf("suppressed = %v, want %v (every line read but the first %d)", got, want, logBurst)
	}
	if len(logs.String()) > 4<<10 {
		t.Errorf("%d bytes of log, want at most 4 KiB:\n%s", len(logs.String()), logtest.Lines(logs.String(), "Decrypt"))
	}
}

// TestAttackMadeUpRegionsFillBucket: four members of made-up regions
// (key holders, each reporting its region and its 64 replica names) try
// to fill a bucket's MaxRegionsPerBucket region slots before a real
// region's total arrives, so that the store drops it and the victim
// admits as if that region had admitted nothing (a global limit of 100
// once admitted 200). With zero counts they take no slot; with counts of
// 1 they fill it, and the real total still takes the place of one of
// theirs: the victim admits exactly the limit less every count the
// bucket holds, the real region's included.
func TestAttackMadeUpRegionsFillBucket(t *testing.T) {
	for _, count := range []uint64{0, 1} {
		t.Run(fmt.Sprintf("count %d", count), func(t *testing.T) {
			p := newAttackPool(t)
			var rogues []*Node
			for i := range 4 {
				cfg := testConfig()
				reg := fmt.Sprintf("z%d", i)
				cfg.Name, cfg.Region, cfg.Transport, cfg.Join = reg+"-0", reg, listenLoopback(t, nil, ""), []string{p.victim.Addr()}
				rogues = append(rogues, startTestNode(t, cfg, region.NewMemory(region.MemoryConfig{Region: reg})))
			}
			waitFor(t, 10*time.Second, "the victim and the rogues see each other alive", func() bool {
				for _, r := range rogues {
					if memberState(r, p.victim.cfg.Name) != "alive" {
						return false
					}
				}
				return aliveMembers(p.victim) == 7
			})
			lim := window.Limit{Limit: 1000, Window: time.Hour}
			now := time.Now()
			b := window.Bucket(now.UnixMilli(), lim.Window)
			// Each rogue sends on its own stream, so the honest frame of
			// settle may overtake theirs: one at a time, wait until the
			// victim's merge loop has handled each (it merges totals or
			// drops them as zero or as full; heartbeats do neither).
			handled := func() float64 {
				return counterValue(p.victim.met.merges) + p.victim.met.dropCount("zero_count") + p.victim.met.dropCount("replicas_full")
			}
			for _, r := range rogues {
				ts := []region.Total{{Key: "alice", Window: lim.Window, Bucket: b, Region: r.cfg.Region, Count: count}}
				for i := range r.cfg.MaxReplicas {
					ts = append(ts, region.Total{Key: "alice", Window: lim.Window, Bucket: b, Region: fmt.Sprintf("%s~%06x", r.cfg.Region, i), Count: count})
				}
				fs, err := Encode(KindFlush, now, r.self(), ts, maxReliableFrame)
				if err != nil {
					t.Fatal(err)
				}
				before := handled()
				if err := r.sendStream(memberOf(t, r, p.victim.cfg.Name), fs[0]); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 5*time.Second, r.cfg.Name+"'s frame handled", func() bool { return handled() > before })
			}
			p.settle(t)
			// The real region eu reports 60 hits.
			fs, _ := Encode(KindFlush, now, p.honest.self(), []region.Total{{Key: "alice", Window: lim.Window, Bucket: b, Region: "eu", Count: 60}}, 1360)
			if err := p.honest.sendStream(memberOf(t, p.honest, p.victim.cfg.Name), fs[0]); err != nil {
				t.Fatal(err)
			}
			p.settle(t)
			v := p.vector(t, "alice", lim.Window, b)
			if v["eu"] != 60 {
				t.Errorf("eu's count in the bucket = %d, want 60 (kept whatever the made-up regions sent)", v["eu"])
			}
			var others uint64
			for _, c := range v {
				others += c
			}
			admitted := 0
			for range 1100 {
				res := make([]region.Result, 1)
				if err := p.store.Check(context.Background(), []region.Request{{Key: "alice", Limit: lim, Hits: 1, Now: time.Now()}}, res); err != nil {
					t.Fatal(err)
				}
				if res[0].Allowed {
					admitted++
				}
			}
			t.Logf("made-up counts %d: the bucket holds %d regions summing to %d; the victim admitted %d of a limit of %d", count, len(v), others, admitted, lim.Limit)
			if want := int(lim.Limit) - int(others); admitted != want {
				t.Errorf("admitted %d, want %d (the limit less the %d the bucket holds)", admitted, want, others)
			}
			if count == 0 && len(v) != 1 {
				t.Errorf("zero counts took slots: the bucket holds %d regions, want eu alone", len(v))
			}
		})
	}
}

// TestAttackRepairLie: a node of eu on its own in-memory store starts
// empty and asks its peers for eu's totals. ap holds eu's 5 hits of a
// key and answers so; a member of us answers that eu counted 99,999 (and
// 99,999 in the next bucket). The node restores 5: a value one member
// alone reports is not restored while two regions were asked, and no
// answer is taken for a bucket that began after it asked. (Once, eu took
// 99,999 into its own count and reported it to every region as its own.)
func TestAttackRepairLie(t *testing.T) {
	lim := window.Limit{Limit: 100, Window: time.Hour}
	now := time.Now()
	b := window.Bucket(now.UnixMilli(), lim.Window)
	mk := func(name, reg string, st Store, own bool, join []string) *Node {
		cfg := testConfig()
		cfg.Name, cfg.Region, cfg.Transport, cfg.Join, cfg.OwnStore = name, reg, listenLoopback(t, nil, ""), join, own
		return startTestNode(t, cfg, st)
	}
	// ap holds eu's 5 hits, as eu once reported them.
	apStore := region.NewMemory(region.MemoryConfig{Region: "ap"})
	held := []region.Total{{Key: "k", Window: lim.Window, Bucket: b, Region: "eu", Count: 5}}
	if err := apStore.Merge(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	ap := mk("ap-0", "ap", apStore, false, nil)
	ap.hear(now, held)
	rogue := mk("us-0", "us", region.NewMemory(region.MemoryConfig{Region: "us"}), false, []string{ap.Addr()})
	euStore := region.NewMemory(region.MemoryConfig{Region: region.FallbackRegion("eu"), Replica: true})
	eu := mk("eu-0", "eu", euStore, true, []string{ap.Addr()})
	waitFor(t, 10*time.Second, "eu has asked ap and us for a repair", func() bool {
		eu.rep.mu.Lock()
		defer eu.rep.mu.Unlock()
		_, a := eu.rep.quorum.asked["ap-0"]
		_, u := eu.rep.quorum.asked["us-0"]
		return a && u && memberState(rogue, "eu-0") == "alive"
	})
	lie, err := Encode(KindRepaired, time.Now(), rogue.self(), []region.Total{
		{Key: "k", Window: lim.Window, Bucket: b, Region: "eu", Count: 99999},
		{Key: "k", Window: lim.Window, Bucket: b + 1, Region: "eu", Count: 99999},
	}, 1360)
	if err != nil {
		t.Fatal(err)
	}
	if err := rogue.sendStream(memberOf(t, rogue, "eu-0"), lie[0]); err != nil {
		t.Fatal(err)
	}
	count := func(b int64) uint64 { return storetest.RegionCounts(t, euStore, "k", lim.Window, b)["eu"] }
	waitFor(t, 10*time.Second, "eu's count restored", func() bool { return count(b) > 0 })
	// A frame from ap, handled after the lie, shows both were taken.
	before := counterValue(eu.met.merges)
	fs, _ := Encode(KindFlush, time.Now(), ap.self(), []region.Total{{Key: "settle", Window: lim.Window, Bucket: b, Region: "ap", Count: 1}}, 1360)
	if err := ap.sendStream(memberOf(t, ap, "eu-0"), fs[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "ap's frame merged", func() bool { return counterValue(eu.met.merges) > before })
	if got := count(b); got != 5 {
		t.Errorf("eu's own count restored to %d, want 5 (what ap and us agree on at least)", got)
	}
	if got := count(b + 1); got != 0 {
		t.Errorf("eu's count in the bucket after the request = %d, want 0", got)
	}
}
