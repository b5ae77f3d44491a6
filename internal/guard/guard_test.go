package guard

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

var t0 = time.Unix(1_700_000_000, 0)

// limitOf is a limit of n per 10 s on the default counter.
func limitOf(n uint64) window.Limit { return window.Limit{Limit: n, Window: 10 * time.Second} }

func view(alive, silent []string) *View {
	return &View{Region: "a", Alive: alive, Silent: silent, Nodes: 1, Horizon: 100 * time.Millisecond}
}

// admitN runs n one-hit requests for key through g and a store that holds
// est already, returning how many were admitted;
// others of est are region b's.
func admitN(g *Guard, now time.Time, key string, limit uint64, n int, v *View, est *uint64, others uint64) int {
	ok := 0
	for range n {
		adm, lim, _ := g.Admit(now, key, limitOf(limit), 1, v)
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
		g.Done(now, key, limitOf(limit), 1, v, &res)
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

// TestHoldRefuses: while the view says the store is being restored, or
// that this node's join may be unknown to the others, every request is
// refused for that reason, retryable after the time left or a horizon,
// whichever is sooner; nothing is reserved and no read is asked for. Once
// the hold ends the key is admitted. Alone, the guard is off and neither
// hold changes anything.
func TestHoldRefuses(t *testing.T) {
	for _, c := range []struct {
		reason Reason
		set    func(v *View, d time.Duration)
	}{
		{Restoring, func(v *View, d time.Duration) { v.Restoring = d }},
		{Joining, func(v *View, d time.Duration) { v.Joining = d }},
	} {
		t.Run(c.reason.String(), func(t *testing.T) {
			g := New(Config{})
			v := view([]string{"a", "b"}, nil)
			v.Horizon = 80 * time.Millisecond
			for _, d := range []time.Duration{30 * time.Millisecond, 500 * time.Millisecond} {
				c.set(v, d)
				for _, key := range []string{"new", "new", "other"} {
					r, _, retry := g.AdmitReason(t0, key, limitOf(100), 1, v)
					if want := min(d, v.Horizon); r != c.reason || retry != want {
						t.Errorf("AdmitReason(%s) held for %v = %v, retry after %v; want %v, %v", key, d, r, retry, c.reason, want)
					}
					if g.NeedsRead(t0, key, limitOf(100), v) {
						t.Errorf("NeedsRead(%s) held for %v: want no read for a request that is refused", key, d)
					}
				}
			}
			if got := g.Keys(); got != 0 {
				t.Errorf("Keys() = %d after refusals while held, want 0", got)
			}
			c.set(v, 0)
			if ok, _, _ := g.Admit(t0, "new", limitOf(100), 1, v); !ok {
				t.Error("Admit refused once the hold ended")
			}
			alone := view([]string{"a"}, nil)
			c.set(alone, time.Second)
			if ok, _, _ := g.Admit(t0, "alone", limitOf(100), 1, alone); !ok {
				t.Error("Admit refused alone while held: the guard is off")
			}
		})
	}
}

// TestHeldLearnsNothing: a result the store held (it lost its counts)
// gives the request's hits back and changes nothing else the guard knows
// of the key, in Done and in Learn.
func TestHeldLearnsNothing(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b"}, nil)
	var est uint64
	admitN(g, t0, "k", 100, 3, v, &est, 0)
	ok, _, _ := g.Admit(t0, "k", limitOf(100), 1, v)
	if !ok {
		t.Fatal("Admit refused the fourth request")
	}
	s := g.shard("k")
	before := *s.keys["k"]
	held := region.Result{Decision: window.Decision{Limit: 100, RetryAfter: 40 * time.Millisecond}, Held: true}
	if retry := g.Done(t0, "k", limitOf(100), 1, v, &held); retry != 0 {
		t.Errorf("Done(held) = %v, want 0", retry)
	}
	g.Learn(t0, "k", limitOf(100), v, &held)
	after := *s.keys["k"]
	if after.used != before.used-1 {
		t.Errorf("used = %d after a held result, want %d (its hit given back)", after.used, before.used-1)
	}
	after.used = before.used
	if !reflect.DeepEqual(after, before) {
		t.Errorf("the key's entry changed with a held result:\n got %+v\nwant %+v", after, before)
	}
}

func TestBurstShare(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b", "c"}, nil)
	var est uint64
	if got, want := admitN(g, t0, "k", 100, 100, v, &est, 0), 33; got != want {
		t.Errorf("first horizon: admitted %d, want %d = floor(100/3) (a is first in name order)", got, want)
	}
	ok, _, retry := g.Admit(t0.Add(40*time.Millisecond), "k", limitOf(100), 1, v)
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
	ok, lim, _ := g.Admit(t0, "k", limitOf(100), 1, v)
	if !ok || lim != 32 {
		t.Errorf("Admit = %v, limit %d; want true, 32", ok, lim)
	}
	// What the estimate already holds of a silent region is not charged
	// twice: half way through the bucket, the two-bucket counter holds
	// 20 + 20/2 of b. (Silent for long: only their equal shares are
	// charged, see charge.)
	v.Ages = map[string]time.Duration{"b": time.Minute, "c": time.Minute}
	half := t0.Add(5 * time.Second)
	two := limitOf(100)
	two.Algorithm = window.SlidingWindowTwoBucket
	res := region.Result{Decision: window.Decision{Allowed: true, Remaining: 10, PrevWeight: 0.5, Bucket: half.UnixMilli() / 10_000, ElapsedMs: 5000},
		Regions: []region.RegionCount{{Region: "a", Current: 1}, {Region: "b", Current: 20, Previous: 20}}}
	g.Done(half, "k", two, 1, v, &res)
	if _, lim, _ := g.Admit(half, "k", two, 1, v); lim != 100-34-4 {
		t.Errorf("limit %d, want %d (c charged 34, b 34-30)", lim, 100-34-4)
	}
}

func TestSweep(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b"}, nil)
	g.Admit(t0, "k", limitOf(10), 1, v)
	g.Sweep(t0.Add(50 * time.Millisecond))
	if got := g.Keys(); got != 1 {
		t.Errorf("Keys() = %d within the horizon, want 1", got)
	}
	g.Sweep(t0.Add(100 * time.Millisecond))
	if got := g.Keys(); got != 0 {
		t.Errorf("Keys() = %d after the horizon, want 0", got)
	}

	// A key read for a request that has not asked yet survives a sweep
	// (a node's runs in the background, between the two) for a second.
	lim := limitOf(10)
	g.Learn(t0, "r", lim, v, &region.Result{Decision: window.Decision{Limit: 10}})
	g.Sweep(t0)
	if g.NeedsRead(t0, "r", lim, v) {
		t.Error("NeedsRead = true after Learn and a sweep, want false")
	}
	g.Sweep(t0.Add(time.Second))
	if got := g.Keys(); got != 0 {
		t.Errorf("Keys() = %d a second after a read no request asked about, want 0", got)
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
		if ok, _ := decide(t, g, st, start.Add(time.Duration(ms)*time.Millisecond), l, v); ok {
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
	// f = weight(100)/(3*8) = 10240/24 = 426, equal weights: a, first in
	// name order at phase 0, takes floor(10 * 426/1278) = 3.
	if got, others := quota(10, 100, weights{}, v, DefaultFloor, 0); got != 3 || others != 7 {
		t.Errorf("quota from idle = %d (others %d), want 3 (others 7)", got, others)
	}
	// weight(150) = 12541: floor(100 * 12967 / 13819) = 93, the others'
	// floor shares 7.
	own := weight(150)
	if got, others := quota(100, 100, weights{own: own, sum: own}, v, DefaultFloor, 0); got != 93 || others != 7 {
		t.Errorf("quota alone = %d (others %d), want 93 (others 7)", got, others)
	}
	// Another region's 10 weighs weight(10) = 3238: floor(100 *
	// 12967 / 17057) = 76, the others 24.
	if got, others := quota(100, 100, weights{own: own, sum: own + weight(10)}, v, DefaultFloor, 0); got != 76 || others != 24 {
		t.Errorf("quota with another region's 10 = %d (others %d), want 76 (others 24)", got, others)
	}
}

// Every region computes its quota from the same counts: the quotas sum to
// the headroom exactly, whatever the headroom, the weights and the phase
// the layout starts at (rounding each share up let every region take a
// part of one free hit, so that the regions took up to R-1 hits more than
// the headroom per horizon).
func TestQuotasSumToHeadroom(t *testing.T) {
	names := []string{"a", "b", "c"}
	for _, ph := range []float64{0, phase(time.Unix(1, 0)), phase(time.Unix(2, 0)), 0.999999} {
		for _, c := range [][3]uint64{{0, 0, 0}, {0, 10, 1}, {5, 7, 0}, {30, 29, 1}, {1, 1, 1}, {100, 3, 50}, {40, 0, 0}, {0, 0, 7}} {
			for h := range uint64(40) {
				var sum uint64
				for i, r := range names {
					v := view(names, nil)
					v.Region = r
					w := weights{own: weight(c[i]), sum: weight(c[0]) + weight(c[1]) + weight(c[2])}
					for j := range i {
						w.before += weight(c[j])
					}
					q, others := quota(h, 60, w, v, DefaultFloor, ph)
					if q+others != h {
						t.Errorf("phase %.3f, counts %v, h %d, %s: quota %d + others %d != h", ph, c, h, r, q, others)
					}
					sum += q
				}
				if sum != h {
					t.Errorf("phase %.3f, counts %v, h %d: quotas sum to %d, want %d", ph, c, h, sum, h)
				}
			}
		}
	}
}

// The spare hit of each horizon's rounding goes to every region in turn
// as the phase moves: with three equal weights and a headroom of 1, each
// region's part holds it in about a third of the seconds (with the
// layout always starting at 0, the region named last took every one).
func TestPhaseRotatesSpareHit(t *testing.T) {
	names := []string{"a", "b", "c"}
	got := map[string]int{}
	for sec := range int64(300) {
		ph := phase(time.Unix(1_700_000_000+sec, 0))
		for i, r := range names {
			v := view(names, nil)
			v.Region = r
			w := weights{own: weight(50), sum: 3 * weight(50), before: uint64(i) * weight(50)}
			if q, _ := quota(1, 60, w, v, DefaultFloor, ph); q == 1 {
				got[r]++
			}
		}
	}
	for _, r := range names {
		if got[r] < 90 || got[r] > 110 {
			t.Errorf("region %s took the spare hit in %d of 300 seconds, want about 100 (all: %v)", r, got[r], got)
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
	if ok, _, _ := g.Admit(t0, "k", limitOf(60), 1, v); !ok {
		t.Fatal("first request denied")
	}
	g.Done(t0, "k", limitOf(60), 1, v, &res)
	// Next horizon: the stale headroom is 0, so the request is a probe.
	// a's weight leaves out its own hit not yet sent: 1024 sqrt(29) =
	// 5514 against b's 1024 sqrt(30) = 5608, so with f = 1024 sqrt(60)/16
	// = 495 its share of a headroom x is at least floor(x * 6009/12112),
	// which holds one hit once x >= 3: the store gets a limit of 60 - 2.
	// (Two seconds on, the quotas' layout starts at phase 0.11: see the
	// spare hit below.)
	now := t0.Add(2*time.Second + 200*time.Millisecond)
	ok, lim, _ := g.Admit(now, "k", limitOf(60), 1, v)
	if !ok || lim != 58 {
		t.Fatalf("probe: Admit = %v, limit %d; want true, 58", ok, lim)
	}
	// The store holds 59: one free hit, which the probe may not take.
	// The denial is the guard's (the full limit would have admitted it):
	// Done says so, with the rest of the horizon to retry after.
	res = region.Result{Decision: window.Decision{Allowed: false, Limit: lim, Estimate: 59},
		Regions: []region.RegionCount{{Region: "a", Current: 30}, {Region: "b", Current: 29}}}
	if got, want := g.Done(now, "k", limitOf(60), 1, v, &res), 100*time.Millisecond; got != want {
		t.Errorf("Done after the probe's denial = %v, want %v (a guard denial)", got, want)
	}
	// A probe the full limit denies too is the store's denial.
	full := res
	full.Estimate = 60
	g2 := New(Config{})
	first := region.Result{Decision: window.Decision{Allowed: true, Limit: 60, Estimate: 59},
		Regions: []region.RegionCount{{Region: "a", Current: 30}, {Region: "b", Current: 30}}}
	g2.Admit(t0, "k", limitOf(60), 1, v)
	g2.Done(t0, "k", limitOf(60), 1, v, &first)
	if ok, lim, _ := g2.Admit(now, "k", limitOf(60), 1, v); !ok || lim != full.Limit {
		t.Fatalf("second guard's probe: Admit = %v, limit %d; want true, %d", ok, lim, full.Limit)
	}
	if got := g2.Done(now, "k", limitOf(60), 1, v, &full); got != 0 {
		t.Errorf("Done after a denial the full limit makes too = %v, want 0 (the store's)", got)
	}
	// Read against the full limit, the answer left 1 free hit. The layout
	// starts at 0.11 of it; a, first in name order, holds the part up to
	// 0.11 + 6009/12112 (its weight 1024 sqrt(29) plus f = 495, over all
	// weights), which holds no whole hit: b takes it.
	if ok, _, _ := g.Admit(now, "k", limitOf(60), 1, v); ok {
		t.Error("a second request in the horizon admitted: a's quota of 1 free hit is 0")
	}
	vb := view([]string{"a", "b"}, nil)
	vb.Region = "b"
	gb := New(Config{})
	// b has no answer for the key yet: its first request is a probe, which
	// the store admits only when b's share of the headroom holds it
	// (equal shares of two: 2 free hits).
	ok, lim, _ = gb.Admit(now, "k", limitOf(60), 1, vb)
	if !ok || lim != 59 {
		t.Fatalf("b's first request: Admit = %v, limit %d; want true, 59", ok, lim)
	}
	res = region.Result{Decision: window.Decision{Allowed: true, Limit: lim, Estimate: 58, Remaining: 0},
		Regions: []region.RegionCount{{Region: "a", Current: 30}, {Region: "b", Current: 30}}}
	gb.Done(now, "k", limitOf(60), 1, vb, &res)
	if got := gb.shard("k").keys["k"].quota; got != 1 {
		t.Errorf("b's quota of 1 free hit = %d, want 1", got)
	}
}

// TestStagger: in every slot the alive regions (three, of one, two and
// three nodes) hold bases that leave room for the nodes of the regions
// ahead of them, and each region is at the head once in three slots; a
// node asks only in the first S - H of a slot; and wait is the time to
// the next slot.
func TestStagger(t *testing.T) {
	regions := []string{"a", "b", "c"}
	nodes := map[string]int{"a": 1, "b": 2, "c": 3}
	const h = 100 * time.Millisecond
	head := map[string]int{}
	for ms := int64(0); ms < 6000; ms += 7 {
		now := time.UnixMilli(1_700_000_000_000 + ms)
		var bases []int
		for _, r := range regions {
			v := View{Region: r, Alive: regions, Nodes: nodes[r], Horizon: h, RegionNodes: nodes}
			base, ok, wait := stagger(now, &v)
			bases = append(bases, int(base))
			if base == 0 {
				head[r]++
			}
			in := now.UnixMilli() % 1000
			if want := in < 1000-h.Milliseconds(); ok != want {
				t.Errorf("+%d ms (%d ms into the slot): may ask %v, want %v", ms, in, ok, want)
			}
			if want := time.Duration(1000-in) * time.Millisecond; wait != want {
				t.Errorf("+%d ms: wait %v, want %v", ms, wait, want)
			}
		}
		// The bases, in order, are 0 and the running sums of the nodes
		// of the regions ahead.
		order := slices.Clone(regions)
		slices.SortFunc(order, func(x, y string) int { return bases[slices.Index(regions, x)] - bases[slices.Index(regions, y)] })
		next := 0
		for _, r := range order {
			if got := bases[slices.Index(regions, r)]; got != next {
				t.Fatalf("+%d ms: %s at base %d, want %d (bases %v)", ms, r, got, next, bases)
			}
			next += nodes[r]
		}
	}
	for _, r := range regions {
		if head[r] == 0 {
			t.Errorf("%s never at the head of the pool in 6 s", r)
		}
	}
}

// TestStaggerUnheardSinceSlot: a region not heard from since the slot
// began may have admitted in the slot before without it arriving (a
// split right after its asks), so each of its nodes adds to the base;
// once heard in the slot it does not.
func TestStaggerUnheardSinceSlot(t *testing.T) {
	regions := []string{"a", "b", "c"}
	nodes := map[string]int{"a": 1, "b": 2, "c": 3}
	const h = 100 * time.Millisecond
	for _, into := range []int64{10, 250, 800} {
		now := time.UnixMilli(1_700_000_000_000 + 5000 + into) // into ms into a slot
		for _, r := range regions {
			v := View{Region: r, Alive: regions, Nodes: nodes[r], Horizon: h, RegionNodes: nodes}
			heard, _, _ := stagger(now, &v)
			for _, o := range regions {
				if o == r {
					continue
				}
				v.Ages = map[string]time.Duration{o: time.Duration(into+1) * time.Millisecond}
				if got, _, _ := stagger(now, &v); got != heard+uint64(nodes[o]) {
					t.Errorf("%d ms into the slot, %s with %s unheard since before it: base %d, want %d", into, r, o, got, heard+uint64(nodes[o]))
				}
				v.Ages[o] = time.Duration(into) * time.Millisecond
				if got, _, _ := stagger(now, &v); got != heard {
					t.Errorf("%d ms into the slot, %s with %s heard at its start: base %d, want %d", into, r, o, got, heard)
				}
			}
		}
	}
}

// TestQuiet: on a key whose window is known (from a store result), an
// alive region unheard for more than a quarter of the window (and at
// least quietMin) is charged as a silent one for that key: its share,
// ceil(90/3) = 30, comes off the store's limit. A region heard within
// that, or a key with a longer window, is not charged. Where c is quiet,
// b reports that it does not hear c either, so the view is not crossed
// (see TestQuietCrossed).
func TestQuiet(t *testing.T) {
	for _, c := range []struct {
		name   string
		window time.Duration
		wMs    int64
		quiet  bool
	}{
		{"new key, 10 s window: c is not quiet", 10 * time.Second, 0, false},
		// A node's first decision of a key counts the shortest bucket a
		// counter of its window may have: half of it.
		{"new key, 1 s window: c is quiet", time.Second, 0, true},
		{"new key, 4 s window: c is not", 4 * time.Second, 0, false},
		{"1 s bucket: c is quiet", 10 * time.Second, 1000, true},
		{"2 s bucket: c is not", 10 * time.Second, 2000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := New(Config{})
			key := "k"
			l := window.Limit{Limit: 90, Window: c.window}
			if c.wMs > 0 {
				// A first decision gives the guard the key's bucket.
				g.Admit(t0, key, l, 1, view([]string{"a", "b", "c"}, nil))
				res := region.Result{Decision: window.Decision{Allowed: true, Limit: 90, Remaining: 89, SubMs: c.wMs}}
				g.Done(t0, key, l, 1, view([]string{"a", "b", "c"}, nil), &res)
			}
			v := view([]string{"a", "b", "c"}, nil)
			v.Ages = map[string]time.Duration{"b": 20 * time.Millisecond, "c": 300 * time.Millisecond}
			want := uint64(90)
			if c.quiet {
				v.Unheard = map[string][]string{"b": {"c"}}
				want -= 30
			}
			now := t0.Add(time.Second)
			ok, lim, _ := g.Admit(now, key, l, 1, v)
			if !ok {
				t.Fatal("denied")
			}
			// The first request of a horizon is a probe, cut to this
			// node's share of the headroom it reads; the charge comes
			// off the limit before the cut.
			if got := lim + g.shard(key).keys[key].cut; got != want {
				t.Errorf("store limit before the probe's cut = %d, want %d", got, want)
			}
		})
	}
}

// TestQuietCrossed: a region quiet here (unheard for more than a quarter
// of the key's bucket) that the other alive regions do not report unheard
// may be cut from this one alone. It then sees this region quiet too, and
// charging each other only an equal share, the two would each admit the
// limit less that share: with six regions, 2 x 5/6 of the limit against
// a bound of 7/6. Until the others report it unheard, the view is
// crossed: every other region is charged its share, ceil(60/6) = 10.
func TestQuietCrossed(t *testing.T) {
	alive := []string{"a", "b", "c", "d", "e", "f"}
	for _, c := range []struct {
		name    string
		unheard map[string][]string
		want    uint64
	}{
		{"nobody else reports f", nil, 60 - 5*10},
		{"one region does not report f", map[string][]string{"b": {"f"}, "c": {"f"}, "d": {"f"}, "e": nil}, 60 - 5*10},
		{"every region reports f", map[string][]string{"b": {"f"}, "c": {"f"}, "d": {"f"}, "e": {"f"}}, 60 - 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := New(Config{})
			l := window.Limit{Limit: 60, Window: time.Second}
			g.Admit(t0, "k", l, 1, view(alive, nil))
			res := region.Result{Decision: window.Decision{Allowed: true, Limit: 60, Remaining: 59, SubMs: 1000}}
			g.Done(t0, "k", l, 1, view(alive, nil), &res)
			v := view(alive, nil)
			v.Ages = map[string]time.Duration{"b": 20 * time.Millisecond, "c": 20 * time.Millisecond, "d": 20 * time.Millisecond, "e": 20 * time.Millisecond, "f": 300 * time.Millisecond}
			v.Unheard = c.unheard
			_, lim, _ := g.Admit(t0.Add(time.Second), "k", l, 1, v)
			if got := lim + g.shard("k").keys["k"].cut; got != c.want {
				t.Errorf("store limit before the probe's cut = %d, want %d", got, c.want)
			}
		})
	}
}

// A view is crossed when the alive regions do not hear what this one
// hears: one cut link (a and c cannot reach each other, b hears both), or
// an alive region that does not hear this one. A clean split is not.
func TestCrossed(t *testing.T) {
	for _, c := range []struct {
		name    string
		alive   []string
		silent  []string
		unheard map[string][]string
		want    bool
	}{
		{"all alive, nothing reported", []string{"a", "b", "c"}, nil, nil, false},
		{"clean split, c alone", []string{"a", "b"}, []string{"c"}, map[string][]string{"b": {"c"}}, false},
		{"cut link a-c: b hears c", []string{"a", "b"}, []string{"c"}, nil, true},
		{"cut link b-c, seen from a", []string{"a", "b", "c"}, nil, map[string][]string{"b": {"c"}, "c": {"b"}}, true},
		{"b does not hear a", []string{"a", "b", "c"}, nil, map[string][]string{"b": {"a"}}, true},
		{"two sides of two", []string{"a", "b"}, []string{"c", "d"}, map[string][]string{"b": {"c", "d"}}, false},
		{"b hears d, which a does not", []string{"a", "b"}, []string{"c", "d"}, map[string][]string{"b": {"c"}}, true},
		{"this region alone", []string{"a"}, []string{"b", "c"}, nil, false},
	} {
		v := &View{Region: "a", Alive: c.alive, Silent: c.silent, Unheard: c.unheard, Nodes: 1, Horizon: 80 * time.Millisecond}
		if got := v.Crossed(); got != c.want {
			t.Errorf("%s: Crossed = %v, want %v", c.name, got, c.want)
		}
		iso := v.Isolated()
		if !c.want {
			if iso != v {
				t.Errorf("%s: Isolated changed a view that is not crossed", c.name)
			}
			continue
		}
		if len(iso.Alive) != 1 || iso.Alive[0] != "a" || len(iso.Silent) != len(c.alive)+len(c.silent)-1 {
			t.Errorf("%s: Isolated = alive %v, silent %v; want a alone, every other region silent", c.name, iso.Alive, iso.Silent)
		}
		// Every other region is charged its share, ceil(limit/R): a keeps
		// the rest.
		r := uint64(len(c.alive) + len(c.silent))
		if got, want := charge(90, 90, nil, nil, 0, limitOf(90), iso, 0), 90-(r-1)*((90+r-1)/r); got != want {
			t.Errorf("%s: charged limit %d, want %d", c.name, got, want)
		}
	}
}

// Until a horizon's first store result, a node admits from the headroom
// the last result read, which lacks all the others admitted since: their
// whole shares of the previous horizon (not the part of them that a fresh
// read would still lack), and after a gap of a horizon or more anything at
// all, so that then only a probe goes out before the answer.
func TestStaleQuota(t *testing.T) {
	v := view([]string{"a", "b"}, nil)
	first := func(g *Guard) {
		ok, lim, _ := g.Admit(t0, "k", limitOf(100), 1, v)
		if !ok {
			t.Fatal("first request denied")
		}
		// The store held 40 (20 each): a's share of the 60 free is about
		// 30, and b's, pending for the next horizon, the rest.
		res := region.Result{Decision: window.Decision{Allowed: true, Limit: lim, Estimate: 40, Remaining: 59},
			Regions: []region.RegionCount{{Region: "a", Current: 21}, {Region: "b", Current: 20}}}
		g.Done(t0, "k", limitOf(100), 1, v, &res)
	}
	before := func(g *Guard, at time.Time) int {
		n := 0
		for range 100 {
			if ok, _, _ := g.Admit(at, "k", limitOf(100), 1, v); ok {
				n++
			}
		}
		return n
	}
	g := New(Config{})
	first(g)
	// 90 ms after the first horizon ended, b's share of it has faded
	// from pending (a fresh read would hold it), but the stale headroom
	// of 59 does not hold it: a takes about half of 59 - 30.
	if got := before(g, t0.Add(190*time.Millisecond)); got < 1 || got > 16 {
		t.Errorf("admitted %d before the horizon's first answer, want 1 to 16 (a's share of the stale headroom less b's share)", got)
	}
	g = New(Config{})
	first(g)
	if got := before(g, t0.Add(250*time.Millisecond)); got != 1 {
		t.Errorf("admitted %d before the first answer after a gap of a horizon, want 1 (the probe)", got)
	}
}

// TestStaggerApart: when a region's nodes do not share a store (a node of
// it on its fallback), each node takes its own place after the regions
// ahead. Two regions of three nodes, a limit of 1, an empty window, every
// node asking at once on a store of its own: sharing the place of their
// region, the head region's three nodes each took a hit (3, against the
// bound of L + 1 = 2); in turn, its first node asks at base 0, its second
// at 1 (0 with the one hit of slack) and its third at 2 (1), and the pool
// takes 2.
func TestStaggerApart(t *testing.T) {
	var views []*View
	for rank := range 3 {
		for _, r := range []string{"a", "b"} {
			views = append(views, &View{Region: r, Alive: []string{"a", "b"}, Nodes: 3, Horizon: 100 * time.Millisecond, Apart: true, NodeRank: rank})
		}
	}
	if total := askAtOnce(1, 0, views, func(v *View) string { return fmt.Sprint(v.Region, v.NodeRank) }); total != 2 {
		t.Errorf("six nodes apart at once admitted %d of a limit of 1, want 2 (the limit and the one more the bound allows)", total)
	}
}

// askAtOnce has a node of each view ask for one hit of limit at once, 200
// ms into a stagger slot, each with a guard of its own, and returns the
// hits admitted: a node's store (storeOf names it; nodes of a region that
// share one give the same name) holds held and the admissions made on
// it in the round.
func askAtOnce(limit, held uint64, views []*View, storeOf func(*View) string) int {
	now := time.UnixMilli(1_700_000_000_000 + 200)
	total := 0
	mine := map[string]uint64{}
	for _, v := range views {
		adm, lim, _ := New(Config{}).Admit(now, "k", limitOf(limit), 1, v)
		if st := storeOf(v); adm && held+mine[st]+1 <= lim {
			mine[st]++
			total++
		}
	}
	return total
}

// TestStaggeredSmallLimit: every hit of a limit smaller than the pool
// (5 for three regions of two nodes) is decided against the limit less
// the region's base (less the one hit past the limit that the bound
// allows, max(1.10 L, L + 1)), once per node and slot: six nodes asking
// at once on an empty window, each region's store seeing only its own
// region's hits, take the limit and one more, and a node asks
// once at a time and, once it took its hit, is told to wait for the next
// slot. On a window holding the limit less one, they take at most two.
func TestStaggeredSmallLimit(t *testing.T) {
	regions := []string{"a", "b", "c"}
	now := time.UnixMilli(1_700_000_000_000 + 200) // 200 ms into a slot
	total := 0
	est := map[string]uint64{}
	for i := range 6 {
		r := regions[i/2]
		g := New(Config{})
		v := &View{Region: r, Alive: regions, Nodes: 2, Horizon: 100 * time.Millisecond}
		adm, lim, _ := g.Admit(now, "k", limitOf(5), 1, v)
		if !adm {
			continue // its base is past the headroom
		}
		if again, _, _ := g.Admit(now, "k", limitOf(5), 1, v); again {
			t.Errorf("node %d: a second ask while the first is in flight admitted", i)
		}
		res := region.Result{Decision: window.Decision{Allowed: est[r]+1 <= lim, Limit: lim, Estimate: est[r]}}
		if res.Allowed {
			est[r]++
			total++
		}
		g.Done(now, "k", limitOf(5), 1, v, &res)
		if !res.Allowed {
			continue
		}
		later := now.Add(300 * time.Millisecond)
		if again, _, wait := g.Admit(later, "k", limitOf(5), 1, v); again || wait != 500*time.Millisecond {
			t.Errorf("node %d: a second hit in the slot admitted %v, wait %v; want refused until the next slot (500ms)", i, again, wait)
		}
	}
	if total != 6 {
		t.Errorf("six nodes at once admitted %d of a limit of 5 (per region %v), want 6 (the limit and the one more the bound allows)", total, est)
	}
	var views []*View
	for i := range 6 {
		views = append(views, &View{Region: regions[i/2], Alive: regions, Nodes: 2, Horizon: 100 * time.Millisecond})
	}
	if total := askAtOnce(5, 4, views, func(v *View) string { return v.Region }); total > 2 {
		t.Errorf("six nodes at once on a window holding 4 of 5 admitted %d, want at most 2 (the headroom and one more)", total)
	}
}

// TestLateRegionsHeld: region b, alive, has not been heard from for longer
// than a heartbeat and a horizon (a split nobody has detected yet, say).
// What it admits meanwhile reaches no estimate here, and by shares
// re-read every horizon a would take, horizon after horizon, nearly the
// whole headroom it sees, as b may on its side. Its share of the headroom
// a first read since b turned late stays held until b is heard again:
// over thirty horizons a admits at most the headroom less b's share
// (100 less 34), and once b is heard again, the rest.
func TestLateRegionsHeld(t *testing.T) {
	run := func(bAge time.Duration) int {
		g := New(Config{})
		v := view([]string{"a", "b", "c"}, nil)
		v.Heartbeat = 100 * time.Millisecond
		v.Ages = map[string]time.Duration{"b": bAge, "c": 0}
		var est uint64
		total := 0
		for k := range 30 {
			total += admitN(g, t0.Add(time.Duration(k)*100*time.Millisecond), "k", 100, 100, v, &est, 0)
		}
		return total
	}
	heard := run(0)
	if heard <= 66 {
		t.Fatalf("b heard: a admitted %d in thirty horizons, want more than 66 (the case must take more without the hold)", heard)
	}
	late := run(500 * time.Millisecond)
	t.Logf("a admitted %d in thirty horizons with b late, %d with b heard", late, heard)
	if late > 66 {
		t.Errorf("b late: a admitted %d in thirty horizons, want at most 66 (100 less b's share, 34)", late)
	}
	if late < 50 {
		t.Errorf("b late: a admitted %d in thirty horizons, want its side's part of the headroom (66, or near it)", late)
	}
	// Not late: unheard for a heartbeat and less than a horizon more.
	if got := run(190 * time.Millisecond); got <= 66 {
		t.Errorf("b unheard for 190 ms (a heartbeat of 100 ms and less than a horizon of 100 ms): a admitted %d, want more than 66 (not held)", got)
	}
}

// TestStaggerWaitsAfterGrowth: a node joined, and the pool of six nodes
// grew past a limit of 5 at View.Grown: the others decided by their
// shares until then, and what they took in the last horizon may not have
// arrived. For a horizon after it a staggered ask is refused, retryable
// when the horizon ends; then the stagger decides as before.
func TestStaggerWaitsAfterGrowth(t *testing.T) {
	regions := []string{"a", "b", "c"}
	now := time.UnixMilli(1_700_000_000_000 + 200) // 200 ms into a slot
	v := &View{Region: "a", Alive: regions, Nodes: 2, Horizon: 100 * time.Millisecond, Grown: now.Add(-40 * time.Millisecond)}
	g := New(Config{})
	if adm, _, wait := g.Admit(now, "k", limitOf(5), 1, v); adm || wait != 60*time.Millisecond {
		t.Errorf("40 ms after the pool grew: Admit = %v, wait %v; want refused for 60ms (the horizon's rest)", adm, wait)
	}
	later := now.Add(60 * time.Millisecond)
	if adm, _, _ := New(Config{}).Admit(later, "k", limitOf(5), 1, v); !adm {
		t.Errorf("a horizon after the pool grew: refused, want the stagger's ask (a is first in its rotation)")
	}
	v.Grown = time.Time{}
	if adm, _, _ := New(Config{}).Admit(now, "k", limitOf(5), 1, v); !adm {
		t.Errorf("a pool that never grew: refused, want the stagger's ask")
	}
}

// TestAdmitRoom: a request refused for this node's share of the horizon
// learns how many hits the quota holds still, and a request of that many
// goes to the store; a refusal for anything else reports no room.
func TestAdmitRoom(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b", "c"}, nil)
	var est uint64
	if got := admitN(g, t0, "k", 100, 20, v, &est, 0); got != 20 {
		t.Fatalf("admitted %d of 20 single hits, want 20 (the share is 33)", got)
	}
	r, _, _, room := g.AdmitRoom(t0, "k", limitOf(100), 20, v)
	if r != Share || room != 13 {
		t.Fatalf("20 hits past 20 of a share of 33: %v, room %d; want %v, room 13", r, room, Share)
	}
	if r, _, _, room := g.AdmitRoom(t0, "k", limitOf(100), room, v); r != Admitted || room != 0 {
		t.Errorf("the room's 13 hits: %v, room %d; want %v, room 0", r, room, Admitted)
	}
	if r, _, _, room := g.AdmitRoom(t0, "k", limitOf(100), 1, v); r != Share || room != 0 {
		t.Errorf("one hit past the spent share: %v, room %d; want %v, room 0", r, room, Share)
	}
	joining := view([]string{"a", "b", "c"}, nil)
	joining.Joining = 1
	if r, _, _, room := g.AdmitRoom(t0, "j", limitOf(100), 5, joining); r != Joining || room != 0 {
		t.Errorf("a joining view: %v, room %d; want %v, room 0", r, room, Joining)
	}
}

// TestShareOfANode: the share a node's quota leases size their parts by
// is its region's, divided among the region's alive nodes as the quotas
// of a horizon are: two nodes of a region leasing the region's share
// each would lease twice what the guard admits.
func TestShareOfANode(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b", "c"}, nil)
	if got := g.Share(t0, "k", limitOf(100), v); math.Abs(got-1.0/3) > 1e-9 {
		t.Errorf("one node of three regions: share %v, want 1/3", got)
	}
	v.Nodes = 2
	if got := g.Share(t0, "k", limitOf(100), v); math.Abs(got-1.0/6) > 1e-9 {
		t.Errorf("one of two nodes of three regions: share %v, want 1/6", got)
	}
	if got := g.Share(t0, "k", limitOf(100), view([]string{"a"}, nil)); got != 1 {
		t.Errorf("alone: share %v, want 1", got)
	}
}
