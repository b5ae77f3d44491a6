package guard

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// BenchmarkAdmitDone is the guard's cost per decision on the request path:
// Admit and Done for keys spread over 1000, three regions alive.
func BenchmarkAdmitDone(b *testing.B) {
	g := New(Config{})
	v := &View{Region: "a", Alive: []string{"a", "b", "c"}, Nodes: 1, Horizon: 80 * time.Millisecond}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	res := region.Result{Decision: window.Decision{Allowed: true, Remaining: 500},
		Regions: []region.RegionCount{{Region: "a", Current: 100}, {Region: "b", Current: 50}}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			now := t0.Add(time.Duration(i) * time.Microsecond)
			k := keys[i%len(keys)]
			if ok, _, _ := g.Admit(now, k, limitOf(1000), 1, v); ok {
				r := res
				g.Done(now, k, limitOf(1000), 1, v, &r)
			}
		}
	})
}

// BenchmarkAdmitDoneTrails is BenchmarkAdmitDone on one hot key of the
// default sliding window at its limit, with the trails of three regions
// (a store's result, as a node gets it), a decision a microsecond: the
// reuse of what leaves and the reserve read the trails at each.
func BenchmarkAdmitDoneTrails(b *testing.B) {
	l := window.Limit{Limit: 1000, Window: 10 * time.Second}
	start := time.UnixMilli(t0.UnixMilli() / 10_000 * 10_000)
	st := region.NewMemory(region.MemoryConfig{Region: "a"})
	for _, r := range []string{"b", "c"} {
		o := region.NewMemory(region.MemoryConfig{Region: r})
		admitSpread(b, o, r, start, 300, l, st)
	}
	admitSpread(b, st, "a", start, 300, l)
	now := start.Add(15 * time.Second)
	res := make([]region.Result, 1)
	if err := st.Check(context.Background(), []region.Request{{Key: "k", Limit: l, Hits: 1, Now: now, Peek: true}}, res); err != nil {
		b.Fatal(err)
	}
	g := New(Config{})
	v := &View{Region: "a", Alive: []string{"a", "b", "c"}, Nodes: 1, Horizon: 80 * time.Millisecond}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		at := now.Add(time.Duration(i) * time.Microsecond)
		if ok, _, _ := g.Admit(at, "k", l, 1, v); ok {
			r := res[0]
			g.Done(at, "k", l, 1, v, &r)
		}
	}
}

// admitSpread admits n hits of key k in st, spread evenly over the
// bucket from start, and merges the region's totals into each of to.
func admitSpread(b *testing.B, st *region.Memory, name string, start time.Time, n int, l window.Limit, to ...*region.Memory) {
	var last region.Result
	for i := range n {
		res := make([]region.Result, 1)
		at := start.Add(time.Duration(i) * l.Window / time.Duration(n))
		if err := st.Check(context.Background(), []region.Request{{Key: "k", Limit: l, Hits: 1, Now: at}}, res); err != nil {
			b.Fatal(err)
		}
		last = res[0]
	}
	tot := []region.Total{{Key: "k", Window: l.Window, Bucket: last.Bucket, Region: name, Count: last.Local, Trail: last.LocalTrail}}
	for _, o := range to {
		if err := o.Merge(context.Background(), tot); err != nil {
			b.Fatal(err)
		}
	}
}
