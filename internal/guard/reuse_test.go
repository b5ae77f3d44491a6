package guard

import (
	"context"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// admitInto admits n hits of key k in st, one every step from from,
// without a guard, and merges the region's totals into each of to, as
// replication would.
func admitInto(t *testing.T, st *region.Memory, name string, from time.Time, step time.Duration, n int, l window.Limit, to ...*region.Memory) {
	t.Helper()
	var last region.Result
	for i := range n {
		res := make([]region.Result, 1)
		if err := st.Check(context.Background(), []region.Request{{Key: "k", Limit: l, Hits: 1, Now: from.Add(time.Duration(i) * step)}}, res); err != nil {
			t.Fatal(err)
		}
		if !res[0].Allowed {
			t.Fatalf("%s: hit %d refused", name, i)
		}
		last = res[0]
	}
	tot := []region.Total{{Key: "k", Window: l.Window, Bucket: last.Bucket, Region: name, Count: last.Local, Trail: last.LocalTrail}}
	for _, o := range to {
		if err := o.Merge(context.Background(), tot); err != nil {
			t.Fatal(err)
		}
	}
}

// reuseView is region a's view with b and c alive and just heard.
func reuseView() *View {
	return &View{Region: "a", Alive: []string{"a", "b", "c"}, Nodes: 1, Horizon: 80 * time.Millisecond,
		Ages: map[string]time.Duration{"b": 10 * time.Millisecond, "c": 10 * time.Millisecond}}
}

// ownLeaving returns region a's store for a limit of 100 per 10 s from
// the bucket that starts at start: b admitted 50 at 5 s, heard by a, and
// a 50 of its own from 1 s on, one a millisecond, which leave from 11 s
// on.
func ownLeaving(t *testing.T) (a *region.Memory, l window.Limit, start time.Time) {
	l = window.Limit{Limit: 100, Window: 10 * time.Second}
	start = time.UnixMilli(t0.UnixMilli() / 10_000 * 10_000)
	a = region.NewMemory(region.MemoryConfig{Region: "a"})
	b := region.NewMemory(region.MemoryConfig{Region: "b"})
	admitInto(t, b, "b", start.Add(5*time.Second), time.Millisecond, 50, l, a)
	admitInto(t, a, "a", start.Add(time.Second), time.Millisecond, 50, l)
	return a, l, start
}

// As a region's own admissions leave the window, its node admits in
// their place at once, whatever its share of the headroom: the count
// does not grow by it. Without reuse, the node took only its share of
// what left, and refused the rest while the window was not full
// (docs/design.md, "Reuse").
func TestReuseInPlace(t *testing.T) {
	a, l, start := ownLeaving(t)
	// A request comes in each millisecond as a's hits leave.
	g := New(Config{})
	n := admittedOf(t, g, a, start.Add(11*time.Second), 50, l, reuseView())
	if n < 48 {
		t.Errorf("admitted %d of 50 as a's own hits left, want at least 48", n)
	}
	// All but the probe that began the horizon, which read the weights.
	if r := g.Reused(); r+2 < uint64(n) || r > uint64(n) {
		t.Errorf("Reused() = %d of %d admitted, want all but at most 2", r, n)
	}
}

// A region whose nodes decide apart (one on its fallback store) does not
// reuse: its nodes hear each other a flush later, and each would reuse
// what left unheard by the others.
func TestNoReuseApart(t *testing.T) {
	a, l, start := ownLeaving(t)
	v := reuseView()
	v.Apart = true
	if n := admittedOf(t, New(Config{}), a, start.Add(11*time.Second), 50, l, v); n > 30 {
		t.Errorf("admitted %d of 50 apart, want at most its share (30)", n)
	}
}

// What another alive region's admissions leave of the window may be
// reused there, unheard yet: it is held from the shares for a horizon and
// the reuse's reach, then shared. Without the hold, the node took its
// share of what left, while b could have admitted all of it in their
// place (docs/design.md, "Reuse").
func TestReuseReserved(t *testing.T) {
	l := window.Limit{Limit: 100, Window: 10 * time.Second}
	start := time.UnixMilli(t0.UnixMilli() / 10_000 * 10_000)
	a := region.NewMemory(region.MemoryConfig{Region: "a"})
	b := region.NewMemory(region.MemoryConfig{Region: "b"})
	admitInto(t, b, "b", start.Add(time.Second), time.Millisecond, 50, l, a)
	admitInto(t, a, "a", start.Add(5*time.Second), time.Millisecond, 50, l)
	g := New(Config{})
	v := reuseView()
	if n := admittedOf(t, g, a, start.Add(11*time.Second), 50, l, v); n > 1 {
		t.Errorf("admitted %d as b's hits left, want at most 1 (b may reuse them)", n)
	}
	// b was heard from since and admitted nothing: what left is shared.
	from := start.Add(11*time.Second + v.Horizon + reuseAge + 50*time.Millisecond)
	if n := admittedOf(t, g, a, from, 200, l, v); n < 10 {
		t.Errorf("admitted %d once b's hits were past the reuse's reach, want at least 10 (a's share)", n)
	}
}

// The reserve reads only the other alive regions' trails, from the start
// of the bucket on; what leaves in a bucket's last blackout is not
// reusable.
func TestReserveAndBlackout(t *testing.T) {
	l := window.Limit{Limit: 1000, Window: 10 * time.Second}
	start := time.UnixMilli(t0.UnixMilli() / 10_000 * 10_000)
	at := func(ms int64) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	a := region.NewMemory(region.MemoryConfig{Region: "a"})
	for _, r := range []string{"b", "s"} {
		st := region.NewMemory(region.MemoryConfig{Region: r})
		admitInto(t, st, r, at(9500), 0, 100, l, a)
	}
	admitInto(t, a, "a", at(9500), 0, 100, l)
	admitInto(t, a, "a", at(9900), 0, 50, l)
	v := &View{Region: "a", Alive: []string{"a", "b"}, Silent: []string{"s"}, Nodes: 1, Horizon: 80 * time.Millisecond}
	now := at(10_000)
	res := make([]region.Result, 1)
	if err := a.Check(context.Background(), []region.Request{{Key: "k", Limit: l, Hits: 1, Now: now, Peek: true}}, res); err != nil {
		t.Fatal(err)
	}
	tr := newTrails(now, l, 0, &res[0], v)
	if tr == nil {
		t.Fatal("no trails")
	}
	// The hits of 9.5 s leave at 19.5 s: b's are within the reach (80 ms
	// + reuseAge) until 19.68 s, the silent region's and a's never count.
	for _, c := range []struct {
		ms   int64
		want uint64
	}{{19_499, 0}, {19_500, 100}, {19_679, 100}, {19_680, 0}} {
		if got, ok := tr.reserve(at(c.ms), v.Horizon, nil); !ok || got != c.want {
			t.Errorf("reserve at %d ms = %d (ok %v), want %d", c.ms, got, ok, c.want)
		}
	}
	if _, ok := tr.reserve(at(30_050), v.Horizon, nil); ok {
		t.Error("reserve two buckets on is ok, want not: the trails do not hold its bucket")
	}
	// a's own: the 100 of 9.5 s are reusable as they leave; the 50 of
	// 9.9 s leave in the bucket's last blackout (2 x 80 ms + reuseAge),
	// and are not.
	if got := tr.reusable(at(19_400), at(19_600), v.Horizon); got != 100 {
		t.Errorf("reusable from 19.4 s to 19.6 s = %d, want 100", got)
	}
	if got := tr.reusable(at(19_800), at(20_000), v.Horizon); got != 0 {
		t.Errorf("reusable in the blackout = %d, want 0", got)
	}
	if got := tr.leavingOf(ownRegion, at(19_800), at(20_000)); got != 50 {
		t.Errorf("a's own leaving from 19.8 s to 20 s = %d, want 50", got)
	}
}

// reuseShare is all of what leaves while a region's part of the count is
// within its share, and the square root of its share over its part
// beyond, in 1/1024.
func TestReuseShare(t *testing.T) {
	for _, c := range []struct{ own, others, num, den, want uint64 }{
		{0, 10, 1, 3, unit},
		{10, 20, 1, 3, unit},
		{20, 20, 1, 3, 836}, // sqrt(2/3)
		{30, 0, 1, 3, 591},  // sqrt(1/3)
		{10, 10, 1, 1, unit},
	} {
		if got := reuseShare(c.own, c.others, c.num, c.den); got != c.want {
			t.Errorf("reuseShare(%d, %d, %d/%d) = %d, want %d", c.own, c.others, c.num, c.den, got, c.want)
		}
	}
}

// A request of more hits than credits can count (hits x nodes x unit past
// 64 bits, on a limit near the largest allowed) takes nothing: the need
// saturates rather than wrapping to nothing.
func TestReuseHugeRequest(t *testing.T) {
	e := &entry{}
	e.reuse(t0, 1<<53, &View{Nodes: 4})
	if e.reuseQ != 0 {
		t.Errorf("reused %d hits with no credits, want 0", e.reuseQ)
	}
}

// demandPart is this region's count and refused hits over every alive
// region's, as counts tallies them (a replica of a region, "b~n1", counts
// as the region; a silent region not at all); with nothing counted the
// part is the whole.
func TestDemandPart(t *testing.T) {
	res := &region.Result{Regions: []region.RegionCount{
		{Region: "a", Current: 10, Previous: 20},
		{Region: "b", Current: 5},
		{Region: "b~n1", Current: 5},
		{Region: "d", Current: 400},
	}}
	v := &View{Region: "a", Alive: []string{"a", "b", "c"}, Silent: []string{"d"}, Nodes: 1}
	dem := []regionDemand{{region: "b", n: 20}, {region: "c", n: 30}, {region: "d", n: 50}}
	var seen []regionCount
	c, _ := counts(res, v, &seen, 0, dem)
	if num, den := demandPart(c.own, 0, c.asked); num != 30 || den != 90 {
		t.Errorf("demandPart = %d/%d, want 30/90 (a's 30 of 30 + 30 for b + 30 for c)", num, den)
	}
	// A busy region beside two that ask for little has the part it asks
	// for: it reuses all of its own while its part of the count is no more.
	c, _ = counts(res, v, &seen, 0, nil)
	if num, den := demandPart(c.own, 500, c.asked); num != 530 || den != 540 {
		t.Errorf("demandPart with refusals = %d/%d, want 530/540", num, den)
	}
	if got := reuseShare(530, 10, 530, 540); got != unit {
		t.Errorf("reuseShare of a busy region at its part of the demand = %d, want %d (all)", got, unit)
	}
	if num, den := demandPart(0, 0, 0); num != 1 || den != 1 {
		t.Errorf("demandPart with nothing counted = %d/%d, want 1/1", num, den)
	}
}
