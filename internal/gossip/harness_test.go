package gossip

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// testConfig is LocalConfig for loopback tests with up to 60 ms one-way
// latency, logging errors only (everything with GOSSIP_TEST_LOG set).
func testConfig() Config {
	level := slog.LevelError
	if os.Getenv("GOSSIP_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	var w io.Writer = io.Discard
	if level == slog.LevelDebug {
		w = os.Stderr
	}
	c := LocalConfig()
	c.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	return c
}

type tnode struct {
	name, region string
	node         *Node
	store        region.Store
	dead         atomic.Bool
	skew         atomic.Int64 // added to the node's clock, ns
}

// now is the node's clock: the real time plus its skew.
func (tn *tnode) now() time.Time { return time.Now().Add(time.Duration(tn.skew.Load())) }

// truthKey names one region's count of one bucket.
type truthKey struct {
	key    string
	window time.Duration
	bucket int64
	region string
}

// harness is a pool of real Nodes over loopback sockets behind a
// FaultNetwork, one store per region shared by the region's nodes (as they
// share a Redis).
type harness struct {
	t       *testing.T
	fn      *FaultNetwork
	regions []string
	stores  map[string]region.Store
	nodes   []*tnode
	// readers, when set, are what agree and vectors read a region's counts
	// from instead of its store (a failover store's Redis, say).
	readers map[string]region.Store
	// urgent, when set, has hit tell Dirty the limit and estimate, as the
	// decision path does, so that replication goes by urgency; unset,
	// every admitted total goes at the next flush.
	urgent bool

	mu    sync.Mutex
	truth map[truthKey]uint64 // largest local total Check acknowledged
}

func newHarness(t *testing.T, fn *FaultNetwork, regions []string, perRegion int) *harness {
	t.Helper()
	return newHarnessStores(t, fn, regions, perRegion, newTestStore)
}

// newHarnessStores is newHarness with each region's store made by mk.
func newHarnessStores(t *testing.T, fn *FaultNetwork, regions []string, perRegion int, mk func(*testing.T, string) region.Store) *harness {
	t.Helper()
	return newHarnessWith(t, fn, regions, perRegion, mk, nil)
}

// newHarnessWith is newHarnessStores with each node's configuration
// changed by tweak, when set.
func newHarnessWith(t *testing.T, fn *FaultNetwork, regions []string, perRegion int, mk func(*testing.T, string) region.Store, tweak func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, fn: fn, regions: regions, stores: map[string]region.Store{}, truth: map[truthKey]uint64{}}
	for _, r := range regions {
		h.stores[r] = mk(t, r)
	}
	seed := ""
	for _, r := range regions {
		for i := range perRegion {
			cfg := testConfig()
			cfg.Name = fmt.Sprintf("%s-%d", r, i)
			cfg.Region = r
			cfg.APIAddr = fmt.Sprintf("127.0.0.1:%d", 8000+len(h.nodes))
			cfg.Transport = listenLoopback(t, fn, r)
			if seed != "" {
				cfg.Join = []string{seed}
			}
			tn := &tnode{name: cfg.Name, region: r, store: h.stores[r]}
			cfg.Now = tn.now
			if tweak != nil {
				tweak(&cfg)
			}
			n := startTestNode(t, cfg, h.stores[r])
			if seed == "" {
				seed = n.Addr()
			}
			tn.node = n
			h.nodes = append(h.nodes, tn)
		}
	}
	h.waitAlive(len(h.nodes), 10*time.Second)
	return h
}

// waitAlive polls until every live node sees want members alive and
// returns how long that took.
func (h *harness) waitAlive(want int, timeout time.Duration) time.Duration {
	h.t.Helper()
	return waitAllAlive(h.t, timeout, want, func() []*Node {
		var live []*Node
		for _, tn := range h.nodes {
			if !tn.dead.Load() {
				live = append(live, tn.node)
			}
		}
		return live
	}()...)
}

// listenLoopback opens a transport on a free loopback port: behind fn as a node
// of region reg when fn is set, bare otherwise.
func listenLoopback(t testing.TB, fn *FaultNetwork, reg string) memberlist.NodeAwareTransport {
	t.Helper()
	nt, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if fn == nil {
		return nt
	}
	return NewFaultTransport(nt, fn, reg)
}

// startTestNode starts a node with cfg on st, and closes it when the test
// ends. It is how every test of this package starts a real node.
func startTestNode(t testing.TB, cfg Config, st Store) *Node {
	t.Helper()
	n, err := New(cfg, st)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = n.Close(ctx)
	})
	return n
}

// aliveMembers returns how many members n sees alive, itself included.
func aliveMembers(n *Node) int {
	alive := 0
	for _, m := range n.Members() {
		if m.State == "alive" {
			alive++
		}
	}
	return alive
}

// allSeeAlive reports whether every node in nodes sees want members alive.
func allSeeAlive(want int, nodes ...*Node) bool {
	for _, n := range nodes {
		if aliveMembers(n) != want {
			return false
		}
	}
	return true
}

// waitAllAlive polls until every node in nodes sees want members alive and
// returns how long that took.
func waitAllAlive(t testing.TB, timeout time.Duration, want int, nodes ...*Node) time.Duration {
	t.Helper()
	return waitFor(t, timeout, fmt.Sprintf("every node sees %d members alive", want), func() bool { return allSeeAlive(want, nodes...) })
}

// waitGone polls until n records the member named name as left or dead,
// and returns which.
func waitGone(t testing.TB, n *Node, name string) string {
	t.Helper()
	var state string
	waitFor(t, 10*time.Second, fmt.Sprintf("%s sees %s gone", n.Name(), name), func() bool {
		for _, m := range n.Members() {
			if m.Name == name {
				state = m.State
			}
		}
		return state == "left" || state == "dead"
	})
	return state
}

// waitFor and poll are the one polling helper, polltest's, under the names
// this package's tests call it by.
var (
	waitFor = polltest.Until
	poll    = polltest.Poll
)

// hit decides one hit on key through tn exactly as the API does: Check,
// then Dirty with the new local total when admitted.
func (h *harness) hit(tn *tnode, key string, lim window.Limit) (bool, error) {
	reqs := []region.Request{{Key: key, Limit: lim, Hits: 1, Now: tn.now()}}
	res := make([]region.Result, 1)
	if err := tn.store.Check(context.Background(), reqs, res); err != nil {
		return false, err
	}
	r := res[0]
	if !r.Allowed {
		return false, nil
	}
	reg := tn.region
	if r.LocalRegion != "" {
		reg = r.LocalRegion // a failover store's fallback region
	}
	tk := truthKey{key, lim.Window, r.Bucket, reg}
	h.mu.Lock()
	if r.Local > h.truth[tk] {
		h.truth[tk] = r.Local
	}
	h.mu.Unlock()
	if !tn.dead.Load() {
		t := region.Total{Key: key, Window: lim.Window, Bucket: r.Bucket, Region: reg, Count: r.Local}
		if h.urgent {
			t.Limit, t.Estimate = lim.Limit, r.Estimate+1
		}
		tn.node.Dirty(t)
	}
	return true, nil
}

// bucketVec is one bucket's per-region counts.
type bucketVec map[string]uint64

// truthVecs returns the acknowledged per-region counts of every bucket hit,
// optionally only those that satisfy keep.
func (h *harness) truthVecs(keep func(region.BucketRef) bool) map[region.BucketRef]bucketVec {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[region.BucketRef]bucketVec{}
	for tk, c := range h.truth {
		br := region.BucketRef{Key: tk.key, Window: tk.window, Bucket: tk.bucket}
		if keep != nil && !keep(br) {
			continue
		}
		if out[br] == nil {
			out[br] = bucketVec{}
		}
		out[br][tk.region] = c
	}
	return out
}

// vectors reads the given buckets from one region's store.
func (h *harness) vectors(r string, refs []region.BucketRef) []bucketVec {
	h.t.Helper()
	st := h.stores[r]
	if rd, ok := h.readers[r]; ok {
		st = rd
	}
	vs, err := st.Vectors(context.Background(), refs)
	if err != nil {
		h.t.Fatalf("Vectors(%s): %v", r, err)
	}
	out := make([]bucketVec, len(refs))
	for i, v := range vs {
		out[i] = bucketVec{}
		for _, tt := range v {
			if tt.Count > 0 {
				out[i][tt.Region] = tt.Count
			}
		}
	}
	return out
}

// agree reports whether every region's store holds exactly want for every
// bucket, and describes the first difference.
func (h *harness) agree(want map[region.BucketRef]bucketVec) (bool, string) {
	refs := make([]region.BucketRef, 0, len(want))
	for br := range want {
		refs = append(refs, br)
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].Bucket != refs[j].Bucket {
			return refs[i].Bucket < refs[j].Bucket
		}
		return refs[i].Key < refs[j].Key
	})
	for _, r := range h.regions {
		got := h.vectors(r, refs)
		for i, br := range refs {
			if !sameVec(got[i], want[br]) {
				return false, fmt.Sprintf("region %s bucket %s/%d: got %v, want %v", r, br.Key, br.Bucket, got[i], want[br])
			}
		}
	}
	return true, ""
}

func sameVec(a, b bucketVec) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// sentBytes sums the replication payload bytes every node sent.
func (h *harness) sentBytes() float64 {
	var s float64
	for _, tn := range h.nodes {
		s += tn.node.met.bytesSentTotal()
	}
	return s
}

// wireBytes sums every byte the fault network carried between different
// regions (replication and memberlist's own traffic).
func (h *harness) wireBytes() int64 {
	var s int64
	for k, v := range h.fn.Stats() {
		if k[0] != k[1] {
			s += v.PacketBytes + v.StreamBytes
		}
	}
	return s
}

// waitBucketStart waits until the next bucket of w starts and returns its
// index.
func waitBucketStart(t *testing.T, w time.Duration) int64 {
	t.Helper()
	b := window.Bucket(time.Now().UnixMilli(), w)
	waitFor(t, 2*w, "the next bucket", func() bool { return window.Bucket(time.Now().UnixMilli(), w) > b })
	return b + 1
}

func bucketEndOf(w time.Duration, b int64) time.Time {
	return time.UnixMilli((b + 1) * w.Milliseconds())
}

// held returns a filter of the buckets the stores still hold: every bucket
// for Redis (its TTL is two windows plus a margin), only the newest two of
// each key for the in-memory store.
func (h *harness) held() func(region.BucketRef) bool {
	if storeKeepsAll {
		return nil
	}
	h.mu.Lock()
	newest := map[[2]any]int64{}
	for tk := range h.truth {
		k := [2]any{tk.key, tk.window}
		if b, ok := newest[k]; !ok || tk.bucket > b {
			newest[k] = tk.bucket
		}
	}
	h.mu.Unlock()
	return func(br region.BucketRef) bool { return br.Bucket >= newest[[2]any{br.Key, br.Window}]-1 }
}
