package gossip

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rlcluster/rlcluster/internal/porttest"
	"github.com/rlcluster/rlcluster/internal/region"
)

func TestNewValidates(t *testing.T) {
	store := region.NewMemory(region.MemoryConfig{Region: "eu"})
	cases := []struct {
		name string
		cfg  Config
	}{
		{"no name", Config{Region: "eu", BindAddr: "127.0.0.1:0"}},
		{"no region", Config{Name: "n", BindAddr: "127.0.0.1:0"}},
		{"long region", Config{Name: "n", Region: strings.Repeat("r", MaxRegionLen+1), BindAddr: "127.0.0.1:0"}},
		{"bad bind", Config{Name: "n", Region: "eu", BindAddr: "nope"}},
		{"bad key", Config{Name: "n", Region: "eu", BindAddr: "127.0.0.1:0", SecretKey: []byte("short")}},
		{"negative flush", Config{Name: "n", Region: "eu", BindAddr: "127.0.0.1:0", FlushInterval: -time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := New(c.cfg, store)
			if err == nil {
				_ = n.Close(context.Background())
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("New() error = %v, want ErrConfig", err)
			}
		})
	}
	if _, err := New(Config{Name: "n", Region: "eu"}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("New(nil store) error = %v, want ErrConfig", err)
	}
}

// startNode starts a node on a free loopback port.
func startNode(t *testing.T, name, regionName string, key []byte, join ...string) *Node {
	t.Helper()
	cfg := testConfig()
	cfg.Name, cfg.Region, cfg.BindAddr, cfg.SecretKey, cfg.Join = name, regionName, "127.0.0.1:0", key, join
	cfg.APIAddr = "127.0.0.1:9" + name[len(name)-1:]
	return startTestNode(t, cfg, region.NewMemory(region.MemoryConfig{Region: regionName}))
}

// TestEncryption: with a secret key, a node without it (or with another)
// is refused; one with the same key joins.
func TestEncryption(t *testing.T) {
	key := []byte("0123456789abcdef")
	a := startNode(t, "a1", "eu", key)
	b := startNode(t, "b1", "us", key, a.Addr())
	waitFor(t, 10*time.Second, "b joins a", func() bool { return len(a.Members()) == 2 })
	plain := startNode(t, "c1", "ap", nil)
	if k, err := plain.ml.Join([]string{a.Addr()}); err == nil || k != 0 {
		t.Errorf("unencrypted Join() = %d, %v; want refused", k, err)
	}
	other := startNode(t, "d1", "ap", []byte("fedcba9876543210"))
	if k, err := other.ml.Join([]string{a.Addr()}); err == nil || k != 0 {
		t.Errorf("wrong-key Join() = %d, %v; want refused", k, err)
	}
	if got, want := len(a.Members()), 2; got != want {
		t.Errorf("a has %d members, want %d", got, want)
	}
	ms := b.Members()
	if ms[0].Region != "eu" || ms[0].APIAddr != "127.0.0.1:91" || ms[0].State != "alive" {
		t.Errorf("b.Members()[0] = %+v, want eu, 127.0.0.1:91, alive", ms[0])
	}
}

// TestJoinRetriesAndCloseLeaves: a node whose seed is not up yet joins once
// it is; Close makes the others see it as left, after sending its dirty
// totals.
func TestJoinRetriesAndCloseLeaves(t *testing.T) {
	seed := porttest.ClosedAddr(t)
	b := startNode(t, "b1", "us", nil, seed) // the seed is not up yet

	cfg := testConfig()
	cfg.Name, cfg.Region, cfg.BindAddr = "a1", "eu", seed
	aStore := region.NewMemory(region.MemoryConfig{Region: "eu"})
	a, err := New(cfg, aStore)
	if err != nil {
		t.Fatalf("New(a1 on %s): %v", seed, err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	took := waitFor(t, 10*time.Second, "b joins the late seed", func() bool { return len(a.Members()) == 2 && len(b.Members()) == 2 })
	// b retries after 50, 100, 200 ms...: its next attempt after the seed
	// came up succeeds.
	checkTiming(t, "joined after the seed came up", took, 4*testConfig().JoinBackoff)

	// A total left dirty at Close is still sent.
	b.Dirty(region.Total{Key: "k", Window: time.Minute, Bucket: time.Now().UnixMilli() / 60000, Count: 42})
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// "left" needs the leaving flag (a metadata update) to reach a before
	// the leave itself; if it does not, a records "dead" and stops trying
	// to reconnect only after an hour.
	state := waitGone(t, a, "b1")
	t.Logf("a records b as %q after its Close", state)
	waitFor(t, 5*time.Second, "a merged b's last total", func() bool {
		v, _ := aStore.Vectors(context.Background(), []region.BucketRef{{Key: "k", Window: time.Minute, Bucket: time.Now().UnixMilli() / 60000}})
		return len(v[0]) == 1 && v[0][0].Region == "us" && v[0][0].Count == 42
	})
}

func TestCollectors(t *testing.T) {
	n := startNode(t, "m1", "eu", nil)
	reg := prometheus.NewPedanticRegistry()
	for _, c := range n.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatalf("Register: %v", err)
		}
	}
	n.Dirty(region.Total{Key: "k", Window: time.Second, Bucket: 1, Count: 1})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, want := range []string{"rlcluster_gossip_messages_sent_total", "rlcluster_gossip_bytes_received_total",
		"rlcluster_gossip_merges_total", "rlcluster_gossip_dropped_total", "rlcluster_gossip_members"} {
		if !got[want] {
			t.Errorf("metric %s missing; have %v", want, got)
		}
	}
}

// TestEchoRepairsALostFlush: a total whose flush is lost reaches the other
// region with the next flush although its key sees no more traffic, long
// before the bucket's reconciliation.
func TestEchoRepairsALostFlush(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testEchoRepairsALostFlush)
}

func testEchoRepairsALostFlush(t *testing.T) {
	fn := NewFaultNetwork(3)
	mn := newMemNet()
	var nodes []*Node
	defer func() {
		for _, n := range nodes {
			_ = n.Close(context.Background())
		}
		time.Sleep(10 * time.Second) // let memberlist's timeouts run out in the bubble
	}()
	mk := func(name, regionName string, join ...string) (*Node, region.Store) {
		nt := mn.transport()
		cfg := testConfig()
		cfg.Name, cfg.Region, cfg.Join = name, regionName, join
		cfg.Transport = NewFaultTransport(nt, fn, regionName)
		cfg.FlushInterval = time.Hour // flushes only when the test says
		store := region.NewMemory(region.MemoryConfig{Region: regionName})
		n, err := New(cfg, store)
		if err != nil {
			t.Fatalf("New(%s): %v", name, err)
		}
		nodes = append(nodes, n)
		return n, store
	}
	a, _ := mk("a1", "eu")
	b, bStore := mk("b1", "us", a.Addr())
	waitFor(t, 10*time.Second, "a and b see each other", func() bool { return len(a.Members()) == 2 && len(b.Members()) == 2 })

	ref := region.BucketRef{Key: "k", Window: time.Hour, Bucket: time.Now().UnixMilli() / 3600000}
	a.Dirty(region.Total{Key: ref.Key, Window: ref.Window, Bucket: ref.Bucket, Count: 7})
	fn.Partition("eu", "us")
	a.flush(false) // lost
	fn.HealAll()
	got := func() uint64 {
		v, _ := bStore.Vectors(context.Background(), []region.BucketRef{ref})
		for _, tt := range v[0] {
			if tt.Region == "eu" {
				return tt.Count
			}
		}
		return 0
	}
	if c := got(); c != 0 {
		t.Fatalf("b holds eu=%d through a partition", c)
	}
	a.flush(false) // the echo
	waitFor(t, 5*time.Second, "b merged the echoed total", func() bool { return got() == 7 })
	// The echo is sent once: a third flush has nothing to send.
	before := a.met.bytesSentTotal()
	a.flush(false)
	if after := a.met.bytesSentTotal(); after != before {
		t.Errorf("a third flush sent %v bytes, want none", after-before)
	}
}
