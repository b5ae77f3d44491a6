package gossip

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// guardHit decides one hit at now (tn's clock) as the decision path does:
// the guard, the store against the limit the guard returns, the guard's
// record, and the replication of an admitted total.
func guardHit(tn *tnode, g *guard.Guard, key string, lim window.Limit, now time.Time) bool {
	v := tn.node.GuardView(now)
	ok, sl, _ := g.Admit(now, key, lim, 1, &v)
	if !ok {
		return false
	}
	l := lim
	l.Limit = sl
	res := make([]region.Result, 1)
	if err := tn.store.Check(context.Background(), []region.Request{{Key: key, Limit: l, Hits: 1, Now: now}}, res); err != nil {
		return false
	}
	g.Done(now, key, lim, 1, &v, &res[0])
	if res[0].Allowed {
		tn.node.Dirty(region.Total{Key: key, Window: lim.Window, Bucket: res[0].Bucket, Count: res[0].Local, Limit: lim.Limit, Estimate: res[0].Estimate + 1})
	}
	return res[0].Allowed
}

// Three regions 60 ms apart (one-way) over real sockets: 100 requests
// released at the same instant in each region for a limit of 100 per 10 s
// admit at most 110 with the guard, and about 300 without. With the guard
// each region then keeps asking for a second, a dozen horizons, by which
// the pool must have reached 90: on a loaded machine 100 asks alone may
// fall in too few horizons to fill it.
func TestGuardBurst(t *testing.T) {
	fn := NewFaultNetwork(1)
	wan(fn, threeRegions, 60*time.Millisecond)
	h := newHarness(t, fn, threeRegions, 1)
	waitFor(t, 10*time.Second, "every region alive in every guard view with a measured delay", func() bool {
		for _, tn := range h.nodes {
			v := tn.node.GuardView(tn.now())
			if len(v.Alive) != 3 || v.Horizon < 80*time.Millisecond || v.Horizon >= guard.JoinOneWay {
				return false
			}
		}
		return true
	})
	lim := window.Limit{Limit: 100, Window: 10 * time.Second}
	burst := func(key string, guarded bool) int64 {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, tn := range h.nodes {
			g := guard.New(guard.Config{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				t0 := time.Now()
				for i := 0; i < 100 || (guarded && time.Since(t0) < time.Second); i++ {
					var ok bool
					if guarded {
						ok = guardHit(tn, g, key, lim, tn.now())
					} else {
						ok, _ = h.hit(tn, key, lim)
					}
					if ok {
						admitted.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		return admitted.Load()
	}
	// Without the guard each region admits what it decides before the
	// others' counts arrive: about 300 when the three bursts start
	// together, less when a loaded machine staggers them.
	if got := burst("unguarded", false); got <= 110 {
		t.Errorf("without the guard: %d admitted, want more than 110 (the burst must beat replication)", got)
	}
	got := burst("guarded", true)
	if got > 110 || got < 90 {
		t.Errorf("with the guard: %d admitted, want 90 to 110", got)
	}
	t.Logf("burst of 3 x 100 against 100: %d admitted with the guard", got)
}

// maxTrailing returns the largest count of the instants ts in a trailing
// window (e-w, e] ending at one of the instants ends from the instant from
// on, on the millisecond clock the counters decide on (a hit at 1000.9 ms
// and one at 2000.1 ms are a whole 1 s window apart to them). Every side
// of a split is counted in the windows ending at any admission of the
// pool, so that the pool's count in a window is never more than the
// sides' maxima together.
func maxTrailing(ts, ends []time.Time, w time.Duration, from time.Time) int {
	ts, ends = slices.Clone(ts), slices.Clone(ends)
	slices.SortFunc(ts, time.Time.Compare)
	slices.SortFunc(ends, time.Time.Compare)
	best, lo, hi := 0, 0, 0
	for _, e := range ends {
		for hi < len(ts) && ts[hi].UnixMilli() <= e.UnixMilli() {
			hi++
		}
		for lo < hi && ts[lo].UnixMilli() <= e.UnixMilli()-w.Milliseconds() {
			lo++
		}
		if !e.Before(from) {
			best = max(best, hi-lo)
		}
	}
	return best
}

// Three regions 60 ms apart over real sockets (Redis stores), region ap
// cut off from eu and us. With the guard the minority (ap) charges each
// silent region its share and admits at most L - 2 ceil(L/3) = L/3 in any
// trailing window, while the majority keeps the whole limit L; without it
// the minority admits about the whole limit on its own (offered twice as
// much, so that its demand is not what stops it). Two keys:
//
//   - "solo", on the strict counter, driven by the minority and by one
//     majority region (100 hits/s against 60 per second);
//   - "guarded", on the default counter, driven by both majority regions
//     (50 hits/s each), which do not admit what one replication delay
//     hides from each other: each takes the other's share of the
//     previous horizon's headroom off its own until it arrives, the
//     shares are rounded so that they sum to the headroom, and the first
//     request of a horizon, which goes to the store to read the headroom,
//     is admitted only within its region's share.
//
// For both keys the test asserts the goal itself, in every trailing
// window that ends after the first two seconds (a cold start errs on its
// own), with both sides counted in the same windows: the pool within
// (1 + 1/R) x L = 80, the majority within L = 60 and the minority within
// its share, 20. The only rounding left is the minority's share, L -
// ceil(L/R), which is L/R exactly here. TestSplit in loadtest/sim
// runs the same load on a virtual clock, over 160 phases.
func TestGuardPartition(t *testing.T) {
	fn := NewFaultNetwork(2)
	wan(fn, threeRegions, 60*time.Millisecond)
	h := newHarness(t, fn, threeRegions, 1)
	a := threeRegions[0]
	for _, other := range threeRegions[1:] {
		fn.Partition(a, other)
	}
	waitFor(t, 10*time.Second, "both sides of the split see the other silent", func() bool {
		for _, tn := range h.nodes {
			v := tn.node.GuardView(tn.now())
			if want := map[bool]int{true: 2, false: 1}[tn.region == a]; len(v.Silent) != want {
				return false
			}
		}
		return true
	})
	lim := window.Limit{Limit: 60, Window: time.Second}
	strict := lim
	strict.Strict = true
	var mu sync.Mutex
	type side struct{ guarded, unguarded, solo []time.Time }
	sides := map[bool]*side{true: {}, false: {}} // minority?
	stop := make(chan struct{})
	began := time.Now()
	var wg sync.WaitGroup
	for _, tn := range h.nodes {
		g, gs := guard.New(guard.Config{}), guard.New(guard.Config{})
		every := 20 * time.Millisecond
		if tn.region == a {
			every = 30 * time.Millisecond
		}
		s := sides[tn.region == a]
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick(stop, every, func(int) bool {
				// Admissions are stamped with the instant they were
				// decided at, so that a slow call cannot move one
				// into another's trailing window.
				if now := tn.now(); guardHit(tn, g, "guarded", lim, now) {
					mu.Lock()
					s.guarded = append(s.guarded, now)
					mu.Unlock()
				}
				if tn.region != threeRegions[2] { // the minority and one majority region
					for range 2 {
						if now := tn.now(); guardHit(tn, gs, "solo", strict, now) {
							mu.Lock()
							s.solo = append(s.solo, now)
							mu.Unlock()
						}
					}
				}
				for range 2 { // twice the offer: without the guard, demand must not be what stops the minority
					if ok, _ := h.hit(tn, "unguarded", lim); ok {
						mu.Lock()
						s.unguarded = append(s.unguarded, time.Now())
						mu.Unlock()
					}
				}
				return true
			})
		}()
	}
	time.Sleep(4 * time.Second) // the load's duration, not a wait for a condition
	close(stop)
	wg.Wait()
	from := began.Add(2 * lim.Window)
	min, maj := sides[true], sides[false]
	// ratios returns the minority's, the majority's and the pool's
	// largest trailing windows over the limit.
	ratios := func(mi, ma []time.Time) (float64, float64, float64) {
		all := slices.Concat(mi, ma)
		r := func(ts []time.Time) float64 {
			return float64(maxTrailing(ts, all, lim.Window, from)) / float64(lim.Limit)
		}
		return r(mi), r(ma), r(all)
	}
	minOn, majOn, allOn := ratios(min.guarded, maj.guarded)
	minOff, _, allOff := ratios(min.unguarded, maj.unguarded)
	soloMin, soloMaj, soloAll := ratios(min.solo, maj.solo)
	t.Logf("partition, %s cut off: max trailing window over the limit with the guard: minority %.3f, majority %.3f, all %.3f (one majority region active, strict counter: minority %.3f, majority %.3f, all %.3f); without: minority %.3f, all %.3f",
		a, minOn, majOn, allOn, soloMin, soloMaj, soloAll, minOff, allOff)
	share := float64(lim.Limit-2*((lim.Limit+2)/3)) / float64(lim.Limit) // L - (R-1) ceil(L/R), over L
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"one majority region active: the pool", soloAll, 1 + 1.0/3},
		{"one majority region active: the majority", soloMaj, 1},
		{"one majority region active: the minority", soloMin, share},
		{"both majority regions active: the pool", allOn, 1 + 1.0/3},
		{"both majority regions active: the majority", majOn, 1},
		{"both majority regions active: the minority", minOn, share},
	} {
		if c.got > c.want+1e-9 { // ratios of whole hits: only float rounding below a hit
			t.Errorf("with the guard, %s admitted %.3f x the limit in a trailing window, want <= %.3f", c.what, c.got, c.want)
		}
	}
	if minOff < 0.8 {
		t.Errorf("without the guard: the minority admitted %.3f x the limit, want >= 0.8 (the test must show the problem)", minOff)
	}
}

// TestGuardViewPool: every node of three regions of two nodes each
// counts two alive nodes in every region (guard.View.RegionNodes), which
// the guard's stagger takes its bases from, and its place among its
// region's nodes (NodeRank: 0 and 1 in each region); none counts apart,
// as they share their region's store.
func TestGuardViewPool(t *testing.T) {
	fn := NewFaultNetwork(1)
	wan(fn, threeRegions, 10*time.Millisecond)
	h := newHarness(t, fn, threeRegions, 2)
	want := map[string]int{}
	for _, r := range threeRegions {
		want[r] = 2
	}
	waitFor(t, 10*time.Second, "every node counting two alive nodes in each region", func() bool {
		for _, tn := range h.nodes {
			if v := tn.node.GuardView(tn.now()); !maps.Equal(v.RegionNodes, want) {
				return false
			}
		}
		return true
	})
	ranks := map[string][]int{}
	for _, tn := range h.nodes {
		v := tn.node.GuardView(tn.now())
		ranks[tn.region] = append(ranks[tn.region], v.NodeRank)
		if v.Apart {
			t.Errorf("%s counts its region apart, though its nodes share a store", tn.name)
		}
	}
	for r, got := range ranks {
		if slices.Sort(got); !slices.Equal(got, []int{0, 1}) {
			t.Errorf("region %s: node ranks %v, want 0 and 1", r, got)
		}
	}
}

// TestGuardViewJoining: a node holds its guarded decisions
// (guard.View.Joining) until the instant it announced that the members
// count it from (Node.countFrom: Config.joinCountHold from its start, or
// from its first attempt to join a seed) and for guard.JoinHold from that
// join, whichever ends later, when its region has other nodes to split
// its quota with; a node alone in its region holds none.
func TestGuardViewJoining(t *testing.T) {
	fn := NewFaultNetwork(1)
	wan(fn, []string{"eu", "us"}, 10*time.Millisecond)
	h := newHarness(t, fn, []string{"eu", "us"}, 2)
	seed, joiner := h.nodes[0].node, h.nodes[1].node // eu-0, and eu-1, which joined it
	hold := func(n *Node, at time.Time) (joining, want time.Duration) {
		v := n.GuardView(at)
		joined := time.Unix(0, n.joinedAt.Load())
		return v.Joining, max(joined.Add(guard.JoinHold(n.cfg.GossipInterval, v.Horizon)).Sub(at), time.UnixMilli(n.countFrom.Load()).Sub(at))
	}
	// The seed joined nobody: it holds from its start.
	if got, want := hold(seed, seed.started); got != want || want < seed.cfg.joinCountHold()-time.Millisecond {
		t.Errorf("the seed at its start: Joining = %v, want %v, at least the announced hold %v", got, want, seed.cfg.joinCountHold())
	}
	if got, want := hold(seed, seed.started.Add(time.Second)); got != 0 || want > 0 {
		t.Errorf("the seed a second after its start: Joining = %v (hold %v), want 0", got, want)
	}
	joined := time.Unix(0, joiner.joinedAt.Load())
	if !joined.After(joiner.started) {
		t.Fatalf("joinedAt %v is not after the node's start %v, though it joined a seed", joined, joiner.started)
	}
	got, want := hold(joiner, joined)
	if got != want || got < guard.JoinHold(joiner.cfg.GossipInterval, joiner.GuardView(joined).Horizon) {
		t.Errorf("at its join: Joining = %v, want %v, at least JoinHold", got, want)
	}
	if got, _ := hold(joiner, joined.Add(want)); got != 0 {
		t.Errorf("a hold after its join: Joining = %v, want 0", got)
	}

	alone := newHarness(t, NewFaultNetwork(1), []string{"eu", "us"}, 1).nodes[1].node
	if got, _ := hold(alone, time.Unix(0, alone.joinedAt.Load())); got != 0 {
		t.Errorf("a node alone in its region, at its join: Joining = %v, want 0", got)
	}
}

// A node measures the round trip to every region itself, without
// waiting for memberlist's probes: they reach one random member per probe
// interval (2 s by default), so after a node starts, for seconds, the
// probes have measured some regions' delays and not others' (before one
// is, the horizon allows the longest delay: TestGuardViewUnmeasured).
// Three regions 100 ms apart, probes an hour apart: every view's horizon
// comes down to the measured delay within seconds, and then a burst of
// 100 at once in each region for a limit of 100 per 10 s admits at most
// 110, as in TestGuardBurst.
func TestGuardBurstBeforePing(t *testing.T) {
	fn := NewFaultNetwork(1)
	wan(fn, threeRegions, 100*time.Millisecond)
	h := newHarnessWith(t, fn, threeRegions, 1, newTestStore, func(c *Config) {
		c.ProbeInterval = time.Hour // no probe, and so no round trip, within the test
	})
	waitFor(t, 10*time.Second, "every region alive in every guard view", func() bool {
		for _, tn := range h.nodes {
			if v := tn.node.GuardView(tn.now()); len(v.Alive) != 3 {
				return false
			}
		}
		return true
	})
	// Until measured, a region's delay counts as the longest allowed for;
	// a node pings each region it has no round trip to within a heartbeat
	// of hearing it, so the horizon soon comes down to the delay measured.
	waitFor(t, 5*time.Second, "every region's round trip measured by a ping", func() bool {
		for _, tn := range h.nodes {
			if v := tn.node.GuardView(tn.now()); v.Horizon >= guard.JoinOneWay {
				return false
			}
		}
		return true
	})
	lim := window.Limit{Limit: 100, Window: 10 * time.Second}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, tn := range h.nodes {
		g := guard.New(guard.Config{})
		wg.Go(func() {
			<-start
			for range 100 {
				if guardHit(tn, g, "k", lim, tn.now()) {
					admitted.Add(1)
				}
			}
			// Keep asking for a second, as TestGuardBurst does.
			for t0 := time.Now(); time.Since(t0) < time.Second; {
				if guardHit(tn, g, "k", lim, tn.now()) {
					admitted.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := admitted.Load(); got > 110 || got < 90 {
		t.Errorf("burst of 3 x 100 against 100 with no probe: %d admitted, want 90 to 110", got)
	}
	for _, tn := range h.nodes {
		if v := tn.node.GuardView(tn.now()); v.Horizon < 100*time.Millisecond {
			t.Errorf("%s: horizon %v, want at least the one-way delay (100ms)", tn.name, v.Horizon)
		}
	}
}
