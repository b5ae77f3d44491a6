package gossip

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// sharedStore is a region's shared store (a Redis) that can go down: while
// down, every call fails as a Redis that went away does. Closing it is
// left to the test, so that each node's Failover can close its own layers.
type sharedStore struct {
	region.Store
	down atomic.Bool
}

func (s *sharedStore) err() error {
	if s.down.Load() {
		return fmt.Errorf("%w: the shared store is down", region.ErrUnavailable)
	}
	return nil
}

func (s *sharedStore) Check(ctx context.Context, reqs []region.Request, res []region.Result) error {
	if err := s.err(); err != nil {
		return err
	}
	return s.Store.Check(ctx, reqs, res)
}

func (s *sharedStore) Merge(ctx context.Context, totals []region.Total) error {
	if err := s.err(); err != nil {
		return err
	}
	return s.Store.Merge(ctx, totals)
}

func (s *sharedStore) Vectors(ctx context.Context, refs []region.BucketRef) ([][]region.Total, error) {
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.Store.Vectors(ctx, refs)
}

func (s *sharedStore) Close() error { return nil }

// fbNode is a node of TestSimFallbackContention with the store it
// decides with, as rlnode runs one: its own Failover over its region's
// shared store, with an in-memory fallback of its own.
type fbNode struct {
	node   *Node
	region string
	store  region.Store
	g      *guard.Guard
}

// decide decides one hit at now as the decision path does (the guard, the
// store against the limit the guard returns, the guard's record, and the
// replication of an admitted total under the region it counts in).
func (fb *fbNode) decide(key string, lim window.Limit, now time.Time) bool {
	v := fb.node.GuardView(now)
	ok, sl, _ := fb.g.Admit(now, key, lim.Limit, 1, &v)
	if !ok {
		return false
	}
	l := lim
	l.Limit = sl
	res := make([]region.Result, 1)
	if err := fb.store.Check(context.Background(), []region.Request{{Key: key, Limit: l, Hits: 1, Now: now}}, res); err != nil {
		return false
	}
	fb.g.Done(now, key, lim.Limit, 1, &v, &res[0])
	if res[0].Allowed {
		fb.node.Dirty(region.Total{Key: key, Window: lim.Window, Bucket: res[0].Bucket, Region: res[0].LocalRegion,
			Count: res[0].Local, Limit: lim.Limit, Estimate: res[0].Estimate + 1})
	}
	return res[0].Allowed
}

// TestSimFallbackContention: region x has two nodes whose shared store
// (their Redis) is down, so each decides from its own in-memory fallback
// (region.Failover, local policy); region y has two nodes on a store that
// works. All four, with the burst guard, are offered 2.5 times the limit
// each (10x in all) for one key. Every node must learn the others' counts
// (the other region's, and its own region's other fallback's), not only
// the key's owner in x: a node that decides on frozen copies sees the
// others idle and takes the whole limit. The largest count in any trailing
// window of the whole pool, from two windows after the load began, stays
// within 1.10 x the limit, as it does with x's Redis up (the control
// case; both at 60 ms one-way, 1 s windows, on the bubble's clock).
func TestSimFallbackContention(t *testing.T) {
	for _, down := range []bool{false, true} {
		name := map[bool]string{false: "x on its Redis", true: "x on its fallback"}[down]
		t.Run(name, func(t *testing.T) { synctest.Test(t, func(t *testing.T) { fallbackContention(t, down) }) })
	}
}

func fallbackContention(t *testing.T, down bool) {
	{
		const (
			oneWay = 60 * time.Millisecond
			L      = 100
			W      = time.Second
		)
		regions := []string{"x", "y"}
		fn, mn := NewFaultNetwork(7), newMemNet()
		wan(fn, regions, oneWay)
		shared := map[string]*sharedStore{}
		var nodes []*fbNode
		var stores []region.Store
		seed := ""
		for _, r := range regions {
			shared[r] = &sharedStore{Store: region.NewMemory(region.MemoryConfig{Region: r})}
			for i := range 2 {
				f, err := region.NewFailover(shared[r], region.NewMemory(region.MemoryConfig{Region: region.FallbackRegion(r)}),
					region.FailoverConfig{Region: r})
				if err != nil {
					t.Fatal(err)
				}
				stores = append(stores, f)
				cfg := testConfig()
				cfg.Name, cfg.Region = fmt.Sprintf("%s-%d", r, i), r
				cfg.Transport = NewFaultTransport(mn.transport(), fn, r)
				if seed != "" {
					cfg.Join = []string{seed}
				}
				n, err := New(cfg, f)
				if err != nil {
					t.Fatalf("New(%s): %v", cfg.Name, err)
				}
				if seed == "" {
					seed = n.Addr()
				}
				nodes = append(nodes, &fbNode{node: n, region: r, store: f, g: guard.New(guard.Config{})})
			}
		}
		defer func() {
			for _, fb := range nodes {
				_ = fb.node.Close(context.Background())
			}
			for _, st := range stores {
				_ = st.Close()
			}
			time.Sleep(max(2*testConfig().TCPTimeout, 10*time.Second)) // see sim.close
		}()
		all := make([]*Node, len(nodes))
		for i, fb := range nodes {
			all[i] = fb.node
		}
		waitAllAlive(t, 30*time.Second, len(nodes), all...)

		// x's Redis goes down: each x node opens its breaker after a few
		// failed calls and decides from its fallback from then on.
		shared["x"].down.Store(down)
		for _, fb := range nodes[:2] {
			for range 3 {
				_ = fb.store.Check(context.Background(), []region.Request{{Key: "probe", Limit: window.Limit{Limit: 1, Window: W}, Hits: 1, Now: time.Now(), Peek: true}}, make([]region.Result, 1))
			}
			if got := fb.store.(*region.Failover).Status().Mode; (got == region.ModeFallback) != down {
				t.Fatalf("%s: store mode %v, want fallback %v", fb.node.Name(), got, down)
			}
		}
		time.Sleep(time.Second) // the outage's start settles (a phase's length)

		lim := window.Limit{Limit: L, Window: W}
		const every = 4 * time.Millisecond // 250 per second per node: 10x the limit in all
		var mu sync.Mutex
		admitted := map[string][]time.Time{}
		stop := make(chan struct{})
		began := time.Now()
		var wg sync.WaitGroup
		for _, fb := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick(stop, every, func(int) bool {
					if now := time.Now(); fb.decide("contended", lim, now) {
						mu.Lock()
						admitted[fb.node.Name()] = append(admitted[fb.node.Name()], now)
						mu.Unlock()
					}
					return true
				})
			}()
		}
		time.Sleep(6 * W) // the load's duration
		close(stop)
		wg.Wait()

		from := began.Add(2 * W)
		var pool []time.Time
		for _, ts := range admitted {
			pool = append(pool, ts...)
		}
		ratio := func(ts []time.Time) float64 { return float64(maxTrailing(ts, pool, W, from)) / L }
		byRegion := map[string][]time.Time{}
		for _, fb := range nodes {
			byRegion[fb.region] = append(byRegion[fb.region], admitted[fb.node.Name()]...)
		}
		names := slices.Sorted(func(yield func(string) bool) {
			for name := range admitted {
				if !yield(name) {
					return
				}
			}
		})
		var per []string
		for _, name := range names {
			per = append(per, fmt.Sprintf("%s %.2f", name, ratio(admitted[name])))
		}
		got := ratio(pool)
		t.Logf("%s, y on its store, 10x a limit of %d per %v: the largest trailing window held %.3f x the limit (x %.3f, y %.3f; %v)",
			map[bool]string{false: "x on its Redis", true: "x on its fallback"}[down], L, W, got, ratio(byRegion["x"]), ratio(byRegion["y"]), per)
		if got > 1.10 {
			t.Errorf("the pool admitted %.3f x the limit in a trailing window, want <= 1.10", got)
		}
		if got < 0.9 {
			t.Errorf("the pool admitted at most %.3f x the limit in a trailing window, want >= 0.9 (the limit stays usable)", got)
		}
	}
}
