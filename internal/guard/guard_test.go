package guard

import (
	"context"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

var t0 = time.Unix(1_700_000_000, 0)

func view(alive, silent []string) *View {
	return &View{Region: "a", Alive: alive, Silent: silent, Nodes: 1, Horizon: 100 * time.Millisecond}
}

// admitN runs n one-hit requests for key through g and a store that holds
// est already, returning how many were admitted;
// others of est are region b's.
func admitN(g *Guard, now time.Time, key string, limit uint64, n int, v *View, est *uint64, others uint64) int {
	ok := 0
	for range n {
		adm, lim, _ := g.Admit(now, key, limit, 1, v)
		if !adm {
			continue
		}
		res := region.Result{Decision: window.Decision{Allowed: *est+1 <= lim, Limit: lim, Estimate: *est}}
		if res.Allowed {
			*est++
			ok++
		}
		if *est < lim {
			res.Remaining = lim - *est
		}
		res.Regions = []region.RegionCount{{Region: "a", Current: *est - others}, {Region: "b", Current: others}}
		g.Done(now, key, limit, 1, v, &res)
	}
	return ok
}

func TestAloneIsOff(t *testing.T) {
	g := New(Config{})
	var est uint64
	if got, want := admitN(g, t0, "k", 100, 150, view([]string{"a"}, nil), &est, 0), 100; got != want {
		t.Errorf("admitted %d, want %d (the store alone decides)", got, want)
	}
	if got := g.Keys(); got != 0 {
		t.Errorf("Keys() = %d, want 0", got)
	}
}

func TestBurstShare(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b", "c"}, nil)
	var est uint64
	if got, want := admitN(g, t0, "k", 100, 100, v, &est, 0), 33; got != want {
		t.Errorf("first horizon: admitted %d, want %d = floor(100/3) (a is first in name order)", got, want)
	}
	ok, _, retry := g.Admit(t0.Add(40*time.Millisecond), "k", 100, 1, v)
	if ok || retry != 60*time.Millisecond {
		t.Errorf("Admit within the horizon = %v, retry %v; want denied, 60ms", ok, retry)
	}
	// Next horizon: the others admitted 33 and 34 meanwhile (est 100;
	// say they took less: 90), which may not have arrived: their shares
	// of the first horizon's headroom (67) stay pending, and a admits
	// nothing.
	est = 90
	if got := admitN(g, t0.Add(100*time.Millisecond), "k", 100, 100, v, &est, 57); got != 0 {
		t.Errorf("second horizon: admitted %d, want 0 (the others' shares of the first pending)", got)
	}
	// The horizons after: headroom 10, own weight 33 of 90. The others'
	// shares of each horizon stay pending for the next (a cannot know
	// that they take nothing), so a takes its share of what they leave,
	// horizon by horizon, never more than the 10 left.
	total := 0
	for k := 2; k < 12; k++ {
		total += admitN(g, t0.Add(time.Duration(k)*100*time.Millisecond), "k", 100, 100, v, &est, 57)
	}
	if total < 1 || total > 10 {
		t.Errorf("ten more horizons: admitted %d, want a share of the 10 left (1 to 10)", total)
	}
}

func TestNodesDivideTheShare(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b"}, nil)
	v.Nodes = 2
	var est uint64
	if got, want := admitN(g, t0, "k", 100, 100, v, &est, 0), 25; got != want {
		t.Errorf("admitted %d, want %d = 100/2 regions/2 nodes", got, want)
	}
}

func TestCharge(t *testing.T) {
	tests := []struct {
		name          string
		alive, silent []string
		want          bool
	}{
		{"no split", []string{"a", "b", "c"}, nil, false},
		{"minority", []string{"a"}, []string{"b", "c"}, true},
		{"majority", []string{"b", "c"}, []string{"a"}, true},
		{"half with the smallest", []string{"a"}, []string{"b"}, true},
		{"half without it", []string{"b"}, []string{"a"}, true},
	}
	for _, tt := range tests {
		v := view(tt.alive, tt.silent)
		if got := v.Charge(); got != tt.want {
			t.Errorf("%s: Charge() = %v, want %v", tt.name, got, tt.want)
		}
	}
	// The minority of three charges two silent regions 34 each.
	g := New(Config{})
	v := view([]string{"a"}, []string{"b", "c"})
	ok, lim, _ := g.Admit(t0, "k", 100, 1, v)
	if !ok || lim != 32 {
		t.Errorf("Admit = %v, limit %d; want true, 32", ok, lim)
	}
	// What the estimate already holds of a silent region is not charged
	// twice.
	res := region.Result{Decision: window.Decision{Allowed: true, Remaining: 10, PrevWeight: 0.5},
		Regions: []region.RegionCount{{Region: "a", Current: 1}, {Region: "b", Current: 20, Previous: 20}}}
	g.Done(t0, "k", 100, 1, v, &res)
	if _, lim, _ := g.Admit(t0, "k", 100, 1, v); lim != 100-34-4 {
		t.Errorf("limit %d, want %d (c charged 34, b 34-30)", lim, 100-34-4)
	}
}

func TestSweep(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b"}, nil)
	g.Admit(t0, "k", 10, 1, v)
	g.Sweep(t0.Add(50 * time.Millisecond))
	if got := g.Keys(); got != 1 {
		t.Errorf("Keys() = %d within the horizon, want 1", got)
	}
	g.Sweep(t0.Add(100 * time.Millisecond))
	if got := g.Keys(); got != 0 {
		t.Errorf("Keys() = %d after the horizon, want 0", got)
	}
}

// A region alone at 10x the limit's rate on a short window of the default
// sliding window (the trail counter), the other regions alive but idle:
// the guard in front of a real memory store must leave it at least 0.95 of
// the limit in every trailing window once the load is steady. The span
// counter frees a bunch of admissions over the span they were admitted in
// (here 100 ms per 1 s window), faster than a whole half-bucket's slide,
// and a lone hit left behind by a share below 1 and admitted a horizon
// later starts a new run, which counts the whole bunch late: without
// modelling both, the region kept well under half of the limit.
func TestAloneOnTrailCounter(t *testing.T) {
	g := New(Config{})
	st := region.NewMemory(region.MemoryConfig{Region: "a"})
	v := &View{Region: "a", Alive: []string{"a", "b", "c"}, Nodes: 1, Horizon: 80 * time.Millisecond}
	l := window.Limit{Limit: 100, Window: time.Second}
	start := time.UnixMilli(t0.UnixMilli() / 1000 * 1000)
	var at []int64 // admissions, ms from start
	for ms := int64(0); ms < 6000; ms++ {
		now := start.Add(time.Duration(ms) * time.Millisecond)
		ok, lim, _ := g.Admit(now, "k", l.Limit, 1, v)
		if !ok {
			continue
		}
		sl := l
		sl.Limit = lim
		res := make([]region.Result, 1)
		if err := st.Check(context.Background(), []region.Request{{Key: "k", Limit: sl, Hits: 1, Now: now}}, res); err != nil {
			t.Fatal(err)
		}
		g.Done(now, "k", l.Limit, 1, v, &res[0])
		if res[0].Allowed {
			at = append(at, ms)
		}
	}
	lo, low := 0, 1.0
	for i, ms := range at {
		for at[lo] <= ms-1000 {
			lo++
		}
		if ms >= 2000 {
			low = min(low, float64(i-lo+1)/float64(l.Limit))
		}
	}
	if low < 0.95 {
		t.Errorf("steady min %.3f of the limit, want >= 0.95", low)
	}
}

// A region whose count is the only one known (others alive, all idle)
// still leaves the others their floor shares, since they may burst
// unseen; the first horizon of a burst from idle is shared equally.
func TestQuotaLoneRegion(t *testing.T) {
	v := view([]string{"a", "b", "c"}, nil)
	// f = 100/(3*8) = 4, equal weights: a, first in name order, takes
	// floor(10 * 4/12) = 3.
	if got, others := quota(10, 100, weights{}, v, DefaultFloor); got != 3 || others != 7 {
		t.Errorf("quota from idle = %d (others %d), want 3 (others 7)", got, others)
	}
	// floor(100 * 154 / 162) = 95, the others' floor shares 5.
	if got, others := quota(100, 100, weights{own: 150, sum: 150}, v, DefaultFloor); got != 95 || others != 5 {
		t.Errorf("quota alone = %d (others %d), want 95 (others 5)", got, others)
	}
	// floor(100 * 154 / 172) = 89, the others 11.
	if got, others := quota(100, 100, weights{own: 150, sum: 160}, v, DefaultFloor); got != 89 || others != 11 {
		t.Errorf("quota with another region's 10 = %d (others %d), want 89 (others 11)", got, others)
	}
}

// Every region computes its quota from the same counts: the quotas sum to
// the headroom exactly, whatever the headroom and the weights (rounding
// each share up let every region take a part of one free hit, so that
// the regions took up to R-1 hits more than the headroom per horizon).
func TestQuotasSumToHeadroom(t *testing.T) {
	names := []string{"a", "b", "c"}
	for _, c := range [][3]uint64{{0, 0, 0}, {0, 10, 1}, {5, 7, 0}, {30, 29, 1}, {1, 1, 1}, {100, 3, 50}, {40, 0, 0}, {0, 0, 7}} {
		for h := range uint64(40) {
			var sum uint64
			for i, r := range names {
				v := view(names, nil)
				v.Region = r
				w := weights{own: c[i], sum: c[0] + c[1] + c[2]}
				for j := range i {
					w.before += c[j]
				}
				q, others := quota(h, 60, w, v, DefaultFloor)
				if q+others != h {
					t.Errorf("counts %v, h %d, %s: quota %d + others %d != h", c, h, r, q, others)
				}
				sum += q
			}
			if sum != h {
				t.Errorf("counts %v, h %d: quotas sum to %d, want %d", c, h, sum, h)
			}
		}
	}
}

// A probe past the quota (the first request of a horizon, sent to the
// store to learn the fresh headroom) is decided against a limit lowered so
// that the store admits it only when this node's share of the headroom
// holds it: two regions with equal weights and one free hit do not both
// take it.
func TestProbeWithinShare(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b"}, nil)
	// A first horizon that leaves the headroom at 0 and equal weights.
	res := region.Result{Decision: window.Decision{Allowed: true, Limit: 60, Estimate: 59},
		Regions: []region.RegionCount{{Region: "a", Current: 30}, {Region: "b", Current: 30}}}
	if ok, _, _ := g.Admit(t0, "k", 60, 1, v); !ok {
		t.Fatal("first request denied")
	}
	g.Done(t0, "k", 60, 1, v, &res)
	// Next horizon: the stale headroom is 0, so the request is a probe.
	// a's weight leaves out its own hit not yet sent: 29 of 59, so with
	// f = 60/16 = 3 its share of a headroom x is at least
	// floor(x * 32/65), which holds one hit once x >= 3: the store gets a
	// limit of 60 - 2.
	now := t0.Add(200 * time.Millisecond)
	ok, lim, _ := g.Admit(now, "k", 60, 1, v)
	if !ok || lim != 58 {
		t.Fatalf("probe: Admit = %v, limit %d; want true, 58", ok, lim)
	}
	// The store holds 59: one free hit, which the probe may not take.
	// The denial is the guard's (the full limit would have admitted it):
	// Done says so, with the rest of the horizon to retry after.
	res = region.Result{Decision: window.Decision{Allowed: false, Limit: lim, Estimate: 59},
		Regions: []region.RegionCount{{Region: "a", Current: 30}, {Region: "b", Current: 29}}}
	if got, want := g.Done(now, "k", 60, 1, v, &res), 100*time.Millisecond; got != want {
		t.Errorf("Done after the probe's denial = %v, want %v (a guard denial)", got, want)
	}
	// A probe the full limit denies too is the store's denial.
	full := res
	full.Estimate = 60
	g2 := New(Config{})
	first := region.Result{Decision: window.Decision{Allowed: true, Limit: 60, Estimate: 59},
		Regions: []region.RegionCount{{Region: "a", Current: 30}, {Region: "b", Current: 30}}}
	g2.Admit(t0, "k", 60, 1, v)
	g2.Done(t0, "k", 60, 1, v, &first)
	if ok, lim, _ := g2.Admit(now, "k", 60, 1, v); !ok || lim != full.Limit {
		t.Fatalf("second guard's probe: Admit = %v, limit %d; want true, %d", ok, lim, full.Limit)
	}
	if got := g2.Done(now, "k", 60, 1, v, &full); got != 0 {
		t.Errorf("Done after a denial the full limit makes too = %v, want 0 (the store's)", got)
	}
	// Read against the full limit, the answer left 1 free hit: a, first in
	// name order, gets floor(1 * 32/64) = 0 of it, b the hit.
	if ok, _, _ := g.Admit(now, "k", 60, 1, v); ok {
		t.Error("a second request in the horizon admitted: a's quota of 1 free hit is 0")
	}
	vb := view([]string{"a", "b"}, nil)
	vb.Region = "b"
	gb := New(Config{})
	// b has no answer for the key yet: its first request is a probe, which
	// the store admits only when b's share of the headroom holds it
	// (equal shares of two: 2 free hits).
	ok, lim, _ = gb.Admit(now, "k", 60, 1, vb)
	if !ok || lim != 59 {
		t.Fatalf("b's first request: Admit = %v, limit %d; want true, 59", ok, lim)
	}
	res = region.Result{Decision: window.Decision{Allowed: true, Limit: lim, Estimate: 58, Remaining: 0},
		Regions: []region.RegionCount{{Region: "a", Current: 30}, {Region: "b", Current: 30}}}
	gb.Done(now, "k", 60, 1, vb, &res)
	if got := gb.shard("k").keys["k"].quota; got != 1 {
		t.Errorf("b's quota of 1 free hit = %d, want 1", got)
	}
}

// TestTurn: at any instant at most one of the alive regions may probe a
// limit too small to share, every region gets its turn once per round,
// and a region told to wait is told exactly until its next turn.
func TestTurn(t *testing.T) {
	regions := []string{"a", "b", "c"}
	turns := map[string]int{}
	for ms := int64(0); ms < 6000; ms += 7 {
		now := time.UnixMilli(1_700_000_000_000 + ms)
		owners := 0
		for _, r := range regions {
			v := View{Region: r, Alive: regions, Horizon: 100 * time.Millisecond}
			ok, wait := turn(now, &v)
			if ok {
				owners++
				turns[r]++
				continue
			}
			if got, _ := turn(now.Add(wait), &v); !got {
				t.Fatalf("%s at +%d ms: told to wait %v, not its turn then", r, ms, wait)
			}
			if got, _ := turn(now.Add(wait-time.Millisecond), &v); got {
				t.Fatalf("%s at +%d ms: its turn before the %v it was told to wait", r, ms, wait)
			}
		}
		if owners > 1 {
			t.Fatalf("+%d ms: %d regions' turn at once", ms, owners)
		}
	}
	for _, r := range regions {
		if turns[r] == 0 {
			t.Errorf("%s never had a turn in 6 s", r)
		}
	}
}

// TestQuiet: on a key whose window is known (from a store result), an
// alive region unheard for more than a quarter of the window (and at
// least quietMin) is charged as a silent one for that key: its share,
// ceil(90/3) = 30, comes off the store's limit. A region heard within
// that, or a key with a longer window, is not charged.
func TestQuiet(t *testing.T) {
	v := view([]string{"a", "b", "c"}, nil)
	v.Ages = map[string]time.Duration{"b": 20 * time.Millisecond, "c": 300 * time.Millisecond}
	for _, c := range []struct {
		name string
		wMs  int64
		want uint64
	}{
		{"unknown window", 0, 90},
		{"1 s window: c is quiet", 1000, 60},
		{"2 s window: c is not", 2000, 90},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := New(Config{})
			key := "k"
			if c.wMs > 0 {
				// A first decision gives the guard the key's window.
				g.Admit(t0, key, 90, 1, view([]string{"a", "b", "c"}, nil))
				res := region.Result{Decision: window.Decision{Allowed: true, Limit: 90, Remaining: 89, SubMs: c.wMs}}
				g.Done(t0, key, 90, 1, view([]string{"a", "b", "c"}, nil), &res)
			}
			now := t0.Add(time.Second)
			ok, lim, _ := g.Admit(now, key, 90, 1, v)
			if !ok {
				t.Fatal("denied")
			}
			// The first request of a horizon is a probe, cut to this
			// node's share of the headroom it reads; the charge comes
			// off the limit before the cut.
			if got := lim + g.shard(key).keys[key].cut; got != c.want {
				t.Errorf("store limit before the probe's cut = %d, want %d", got, c.want)
			}
		})
	}
}
