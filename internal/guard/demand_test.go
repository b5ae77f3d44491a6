package guard

import (
	"context"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// storeOf returns a store of region a holding n hits of key k for each
// region of counts, spread over the first n ms of the bucket of start.
func storeOf(t *testing.T, l window.Limit, start time.Time, counts map[string]int) *region.Memory {
	t.Helper()
	st := region.NewMemory(region.MemoryConfig{Region: "a"})
	for r, n := range counts {
		var tr window.Trail
		for i := range n {
			tr.Add(int64(i), l.WindowMs(), 1, false)
		}
		tot := region.Total{Key: "k", Window: l.Window, Bucket: start.UnixMilli() / l.WindowMs(), Region: r, Count: uint64(n), Trail: tr}
		if err := st.Merge(context.Background(), []region.Total{tot}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// A region weighs the others by what they were refused too, as their
// nodes report it: told that b was refused 90 hits, a, with b's count
// equal to its own, leaves b the larger share of the headroom.
func TestDemandAsHeard(t *testing.T) {
	l := window.Limit{Limit: 100, Window: 10 * time.Second}
	start := time.UnixMilli(t0.UnixMilli() / 10_000 * 10_000)
	v := &View{Region: "a", Alive: []string{"a", "b"}, Nodes: 1, Horizon: 100 * time.Millisecond}
	now := start.Add(time.Second)
	admitted := func(heard []Demand) int {
		st := storeOf(t, l, start, map[string]int{"b": 10})
		g := New(Config{})
		g.LearnDemand(now, "b", "b1", false, heard)
		learn(t, g, st, now, l, v)
		return admittedOf(t, g, st, now, 60, l, v)
	}
	_, b := l.BucketAt(now.UnixMilli())
	alone := admitted(nil)
	told := admitted([]Demand{{Key: "k", Window: l.Window, Bucket: b, Refused: 90}})
	// Of a headroom of 90: a's share weighs its floor alone against b's
	// count of 10 (about 0.2 of it), or against b's 10 and 90 refused
	// (about 0.08).
	if told >= alone || told > 9 {
		t.Errorf("a admitted %d in a horizon told of b's demand, %d without; want fewer, at most 9", told, alone)
	}
	if told == 0 {
		t.Error("a admitted nothing told of b's demand, want its share")
	}
	// Demand of a bucket two windows old is out of the weights.
	old := admitted([]Demand{{Key: "k", Window: l.Window, Bucket: b - 2, Refused: 90}})
	if old != alone {
		t.Errorf("a admitted %d told of b's demand two buckets ago, want %d as without it", old, alone)
	}
}

// A node's refusals go out once each as they grow (DirtyDemand), count
// in its region's own weight once the others can have heard them, and
// are forgotten two windows after they last grew. A guard whose demand
// is not exchanged counts none of its refusals.
func TestDemandRefusedAndForgotten(t *testing.T) {
	l := window.Limit{Limit: 10, Window: time.Second}
	start := time.UnixMilli(t0.UnixMilli() / 1000 * 1000)
	st := storeOf(t, l, start, map[string]int{"b": 10}) // the window is full
	g := New(Config{})
	g.DirtyDemand(start) // as gossip does with each flush
	v := &View{Region: "a", Alive: []string{"a", "b"}, Nodes: 1, Horizon: 100 * time.Millisecond}
	now := start.Add(100 * time.Millisecond)
	alone := New(Config{})
	if n := admittedOf(t, alone, st, now, 5, l, v); n != 0 {
		t.Fatalf("admitted %d of a full window, want 0", n)
	}
	if ds := alone.DirtyDemand(now); len(ds) != 0 {
		t.Errorf("a guard not exchanging demand recorded %+v", ds)
	}
	if n := admittedOf(t, g, st, now, 5, l, v); n != 0 {
		t.Fatalf("admitted %d of a full window, want 0", n)
	}
	ds := g.DirtyDemand(now.Add(5 * time.Millisecond))
	_, b := l.BucketAt(now.UnixMilli())
	if len(ds) != 1 || ds[0] != (Demand{Key: "k", Window: l.Window, Bucket: b, Refused: 5}) {
		t.Fatalf("DirtyDemand = %+v, want k's 5 refused in bucket %d", ds, b)
	}
	if ds := g.DirtyDemand(now.Add(10 * time.Millisecond)); len(ds) != 0 {
		t.Errorf("DirtyDemand again = %+v, want nothing new", ds)
	}
	s := g.shard("k")
	own := func(at time.Time) uint64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		o, _ := demands(s, "k", l, at, v.Horizon, v.Nodes, nil)
		return o
	}
	if o := own(now.Add(50 * time.Millisecond)); o != 0 {
		t.Errorf("own demand a horizon after the refusals = %d, want 0: the others may not have heard them", o)
	}
	if o := own(now.Add(250 * time.Millisecond)); o != 5 {
		t.Errorf("own demand two horizons and more after the refusals = %d, want 5", o)
	}
	g.Sweep(now.Add(time.Second))
	if o := own(now.Add(time.Second)); o != 5 {
		t.Errorf("own demand in the next bucket = %d, want 5 (the previous bucket's)", o)
	}
	g.Sweep(now.Add(2100 * time.Millisecond))
	s.mu.Lock()
	left := len(s.demand)
	s.mu.Unlock()
	if left != 0 {
		t.Errorf("%d demand records two windows after the last refusal, want 0", left)
	}
}

// A node that refuses a key reads its counts again every window (rather
// than every two), so that its weights follow the demand it reports.
func TestNeedsReadWhenRefusing(t *testing.T) {
	l := window.Limit{Limit: 10, Window: time.Second}
	start := time.UnixMilli(t0.UnixMilli() / 1000 * 1000)
	v := &View{Region: "a", Alive: []string{"a", "b"}, Nodes: 1, Horizon: 100 * time.Millisecond}
	for _, full := range []bool{false, true} {
		counts := map[string]int{"b": 2}
		if full {
			counts["b"] = 10
		}
		st := storeOf(t, l, start, counts)
		g := New(Config{})
		g.DirtyDemand(start)
		now := start.Add(100 * time.Millisecond)
		learn(t, g, st, now, l, v)
		if n := admittedOf(t, g, st, now, 1, l, v); (n == 0) != full {
			t.Fatalf("full %v: admitted %d of 1", full, n)
		}
		later := now.Add(1100 * time.Millisecond)
		if got := g.NeedsRead(later, "k", l, v); got != full {
			t.Errorf("refusing %v: NeedsRead a window after the last read = %v, want %v", full, got, full)
		}
	}
}

// A probe needs the headroom at which its node's part of the region's
// quota holds its hits, by rank, while every region is heard; while one
// is silent (charged), as many times its share as the region has nodes.
func TestProbeCutByRank(t *testing.T) {
	for _, c := range []struct {
		silent []string
		rank   int
		cut    uint64
	}{
		{nil, 1, 0},           // alone at full share, last of two: one free hit
		{nil, 0, 1},           // first of two: two
		{[]string{"b"}, 1, 1}, // b charged: two, whatever the rank
	} {
		v := &View{Region: "a", Alive: []string{"a"}, Silent: c.silent, Nodes: 2, NodeRank: c.rank}
		if cut, whole := probeCut(2, 5, 1, 0, weights{}, v, DefaultFloor); cut != c.cut || !whole {
			t.Errorf("silent %v, rank %d: cut %d (whole %v), want %d", c.silent, c.rank, cut, whole, c.cut)
		}
	}
}

// Another node's report of a key under another window is ignored: it
// cannot wipe the demand this node holds of the key.
func TestDemandOfAnotherWindowIgnored(t *testing.T) {
	l := window.Limit{Limit: 10, Window: 10 * time.Second}
	now := time.UnixMilli(t0.UnixMilli() / 10_000 * 10_000).Add(time.Second)
	_, b := l.BucketAt(now.UnixMilli())
	g := New(Config{})
	g.LearnDemand(now, "b", "b-0", false, []Demand{{Key: "k", Window: l.Window, Bucket: b, Refused: 50}})
	g.LearnDemand(now, "c", "c-0", false, []Demand{{Key: "k", Window: time.Second, Bucket: now.Unix(), Refused: 1}})
	s := g.shard("k")
	s.mu.Lock()
	_, others := demands(s, "k", l, now, 100*time.Millisecond, 1, nil)
	s.mu.Unlock()
	if len(others) != 1 || others[0] != (regionDemand{region: "b", n: 50}) {
		t.Errorf("demand of k after a report under another window = %+v, want b's 50 alone", others)
	}
}
