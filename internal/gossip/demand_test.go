package gossip

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// heardDemand is a node's guard with a record of the demand it learned:
// the refused hits of each sender node (its largest report) and whether
// the node reported it as of this node's region.
type heardDemand struct {
	*guard.Guard
	mu    sync.Mutex
	from  map[string]uint64 // region/node -> refused
	local map[string]bool
}

func (h *heardDemand) LearnDemand(now time.Time, reg, node string, local bool, ds []guard.Demand) {
	h.mu.Lock()
	for _, d := range ds {
		h.from[reg+"/"+node] = max(h.from[reg+"/"+node], d.Refused)
		h.local[reg+"/"+node] = local
	}
	h.mu.Unlock()
	h.Guard.LearnDemand(now, reg, node, local, ds)
}

func (h *heardDemand) heard(from string) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.from[from], h.local[from]
}

// What a node's guard and store refuse reaches the guard of every other
// node of the pool, over real sockets: of the other regions, and of its
// own, as local.
func TestDemandReachesEveryNode(t *testing.T) {
	fn := NewFaultNetwork(1)
	wan(fn, threeRegions, 30*time.Millisecond)
	h := newHarness(t, fn, threeRegions, 2)
	guards := make([]*heardDemand, len(h.nodes))
	for i, tn := range h.nodes {
		guards[i] = &heardDemand{Guard: guard.New(guard.Config{}), from: map[string]uint64{}, local: map[string]bool{}}
		tn.node.ExchangeDemand(guards[i])
	}
	lim := window.Limit{Limit: 3, Window: time.Minute}
	src := h.nodes[0]
	waitFor(t, 10*time.Second, "the pool counts every node (no view joining)", func() bool {
		v := src.node.GuardView(src.now())
		return len(v.Alive) == 3 && v.Joining == 0
	})
	// The hits share one instant: demand is reported per bucket of the
	// window, and hits on both sides of a bucket's end would split it.
	now := src.now()
	refused := 0
	for range 10 {
		if !guardHit(src, guards[0].Guard, "k", lim, now) {
			refused++
		}
	}
	if refused < 7 {
		t.Fatalf("refused %d of 10 at a limit of 3, want at least 7", refused)
	}
	from := src.region + "/" + src.name
	heardAll := func() bool {
		for i := range h.nodes[1:] {
			if n, _ := guards[i+1].heard(from); n != uint64(refused) {
				return false
			}
		}
		return true
	}
	// Demand goes in datagrams, best effort: one lost is made good by
	// the next refusal's, which carries the bucket's total. A loaded
	// machine drops datagrams on loopback too, so the sender refuses
	// again until every node has heard its total.
	ok := false
	for range 20 {
		if _, ok = polltest.Poll(500*time.Millisecond, heardAll); ok {
			break
		}
		if guardHit(src, guards[0].Guard, "k", lim, now) {
			t.Fatal("a hit past the limit was admitted")
		}
		refused++
	}
	if !ok {
		for i, tn := range h.nodes[1:] {
			n, _ := guards[i+1].heard(from)
			t.Errorf("%s heard %d refusals of %s, want %d", tn.name, n, src.name, refused)
		}
		t.FailNow()
	}
	for i, tn := range h.nodes[1:] {
		if _, local := guards[i+1].heard(from); local != (tn.region == src.region) {
			t.Errorf("%s heard %s's demand as local %v, want %v", tn.name, src.name, local, tn.region == src.region)
		}
	}
	if n, _ := guards[0].heard(from); n != 0 {
		t.Errorf("%s heard its own demand back (%d)", src.name, n)
	}
}

// TestAttackDemandOfAnotherRegion: a member may report demand only for
// its own region, of a window of fixed length and without a trail:
// a frame with an entry of another region's, a calendar bucket or a trail
// is dropped whole and nothing of it is learned.
func TestAttackDemandOfAnotherRegion(t *testing.T) {
	p := newAttackPool(t)
	heard := &heardDemand{Guard: guard.New(guard.Config{}), from: map[string]uint64{}, local: map[string]bool{}}
	p.victim.ExchangeDemand(heard)
	now := time.Now()
	b := now.UnixMilli() / 60_000
	var tr window.Trail
	tr.Add(1, 60_000, 1, false)
	for _, tot := range []region.Total{
		{Key: "alice", Window: time.Minute, Bucket: b, Region: "eu", Count: 1e15},
		{Key: "alice", Window: time.Minute, Bucket: b, Region: "evil~1", Count: 1e15},
		{Key: "alice", Window: time.Minute, Bucket: b, Region: "evil", Count: 1, Trail: tr},
		{Key: "alice", Window: -time.Hour, Bucket: now.Truncate(time.Hour).UnixMilli(), Region: "evil", Count: 5},
	} {
		fs, err := Encode(KindDemand, time.Now(), p.rogue.self(), []region.Total{tot}, 1360)
		if err != nil {
			t.Fatal(err)
		}
		p.sendAsRogue(t, fs[0])
	}
	p.settle(t)
	if got := p.victim.met.dropCount("bad_demand") + p.victim.met.dropCount("foreign_region"); got != 4 {
		t.Errorf("dropped(bad_demand) + dropped(foreign_region) = %v, want 4", got)
	}
	if n, _ := heard.heard("eu/evil-0"); n != 0 {
		t.Errorf("learned %d refused of eu from evil-0, want nothing", n)
	}
	// Its own region's demand it may report.
	fs, err := Encode(KindDemand, time.Now(), p.rogue.self(), []region.Total{{Key: "alice", Window: time.Minute, Bucket: b, Region: "evil", Count: 7}}, 1360)
	if err != nil {
		t.Fatal(err)
	}
	p.sendAsRogue(t, fs[0])
	waitFor(t, 5*time.Second, "the rogue's own demand learned", func() bool {
		n, _ := heard.heard("evil/evil-0")
		return n == 7
	})
}

// Three regions 60 ms apart over real sockets, each node's guard
// exchanging demand, offered 10x a limit of 10 per 1 s evenly, the first
// region from 300 ms before the others: every region gets at least a
// tenth of what the pool admits from the second second on, and the pool
// stays within the limit. Jitter keeps the real cluster from the
// simulator's starved fixed points (TestNoneStarved), so without the
// exchange this test passes too: it guards what demand must not break
// rather than showing what it mends (docs/design.md, "Demand", has the
// runs with and without it).
func TestDemandNoneStarvedOverSockets(t *testing.T) {
	fn := NewFaultNetwork(1)
	wan(fn, threeRegions, 60*time.Millisecond)
	h := newHarness(t, fn, threeRegions, 1)
	guards := make([]*guard.Guard, len(h.nodes))
	for i, tn := range h.nodes {
		guards[i] = guard.New(guard.Config{})
		tn.node.ExchangeDemand(guards[i])
	}
	waitFor(t, 10*time.Second, "every region alive in every guard view, none joining", func() bool {
		for _, tn := range h.nodes {
			v := tn.node.GuardView(tn.now())
			if len(v.Alive) != 3 || v.Joining > 0 || v.Horizon >= guard.JoinOneWay {
				return false
			}
		}
		return true
	})
	lim := window.Limit{Limit: 10, Window: time.Second}
	start := time.Now()
	const run = 8 * time.Second
	from := start.Add(2 * time.Second)
	admitted := make([]int, len(h.nodes))
	var wg sync.WaitGroup
	for i, tn := range h.nodes {
		wg.Go(func() {
			at := start
			if i > 0 {
				at = at.Add(300 * time.Millisecond)
			}
			for ; at.Before(start.Add(run)); at = at.Add(30 * time.Millisecond) {
				time.Sleep(time.Until(at))
				if readHit(t, tn, guards[i], "k", lim, tn.now()) && !time.Now().Before(from) {
					admitted[i]++
				}
			}
		})
	}
	wg.Wait()
	sum := 0
	for _, n := range admitted {
		sum += n
	}
	t.Logf("admitted per region from the second second on: %v", admitted)
	if sum == 0 {
		t.Fatal("nothing admitted")
	}
	for i, n := range admitted {
		if 10*n < sum {
			t.Errorf("region %s admitted %d of %d (per region %v), want at least a tenth", h.nodes[i].region, n, sum, admitted)
		}
	}
	// Six seconds of a limit of 10 per 1 s: at most 70 in any six
	// seconds and the window before them.
	if sum > 70 {
		t.Errorf("admitted %d in six seconds at a limit of 10 per 1 s, want at most 70", sum)
	}
}

// readHit is guardHit with the read the decision path makes first when
// the guard asks for it (NeedsRead, a Peek of the store, Learn).
func readHit(t *testing.T, tn *tnode, g *guard.Guard, key string, lim window.Limit, now time.Time) bool {
	v := tn.node.GuardView(now)
	if g.NeedsRead(now, key, lim, &v) {
		res := make([]region.Result, 1)
		if err := tn.store.Check(context.Background(), []region.Request{{Key: key, Limit: lim, Hits: 1, Now: now, Peek: true}}, res); err != nil {
			t.Error(err)
			return false
		}
		g.Learn(now, key, lim, &v, &res[0])
	}
	return guardHit(tn, g, key, lim, now)
}
