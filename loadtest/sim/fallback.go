package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/rlcluster/rlcluster/internal/region"
)

// A node deciding from its in-memory fallback while its region's store
// (Redis) does not answer it, as rlnode does under --on-store-failure=local
// (region.Failover, internal/gossip's apart.go):
//
//   - From the instant its breaker opens the node decides against a
//     region.Memory of its own, which outlives its outages and into which
//     every store decision of the node is mirrored (the counts the result
//     read, its replica's written-back count among them), and counts its
//     admissions under a replica of its own, region~node. As it starts
//     counting apart, the others send it their open totals (here: what
//     the region's store holds then, merged).
//   - It counts apart: every flush interval its replica's totals go to
//     every region, its own region's store included (its region's other
//     nodes merge them), and it takes in what its region's other nodes
//     admitted (their dirty totals at the same flush) as well as every
//     other region's totals as they arrive.
//   - When the store answers again, the fallback's totals are written
//     back into it and the node decides on the store again.
//
// Simplified: the others learn that the node counts apart at once
// (rlnode's take a flush interval, a gossip interval and the one-way
// delay), and exchanges within a region take no time.

// fallback is node Node of region Region deciding from its fallback from
// FromMs to ToMs after the run's start.
type fallback struct {
	Region, Node int
	FromMs, ToMs int64
}

func (f fallback) String() string {
	return fmt.Sprintf("fallback %d/%d %d-%d ms", f.Region, f.Node, f.FromMs, f.ToMs)
}

// genFallbacks draws s's fallbacks from a stream of their own (after the
// rest, so that every other part of a seed's schedule is the same as
// before they were drawn): one schedule in four has one or two, each of
// a node the region has from the start, for 100 ms to two windows.
func genFallbacks(s *schedule) {
	rf := rand.New(rand.NewPCG(s.Seed, 0xfa11bac))
	if rf.IntN(4) != 0 {
		return
	}
	wm := s.Window.Milliseconds()
	span := int64(s.Windows) * wm
	for range 1 + rf.IntN(2) {
		f := fallback{Region: rf.IntN(s.Regions), Node: rf.IntN(s.Nodes), FromMs: rf.Int64N(span)}
		f.ToMs = min(span, f.FromMs+100+rf.Int64N(2*wm))
		s.Fallbacks = append(s.Fallbacks, f)
	}
	slices.SortStableFunc(s.Fallbacks, func(a, b fallback) int { return cmp.Compare(a.FromMs, b.FromMs) })
}

// withoutFallbacks returns s without its fallbacks.
func (s schedule) withoutFallbacks() schedule {
	s.Fallbacks = nil
	return s
}

// fallbacks schedules fs (at startMs plus their times).
func (w *world) fallbacks(fs []fallback, startMs int64) {
	for _, f := range fs {
		w.push(&event{at: startMs + f.FromMs, kind: evFallback, to: f.Region, node: f.Node})
		w.push(&event{at: startMs + f.ToMs, kind: evRecover, to: f.Region, node: f.Node})
	}
}

// replica is the name node k of n counts under on its fallback.
func replica(n *node, k int) string { return fmt.Sprintf("%s~%d", n.name, k) }

// fallBack starts node k of region r deciding from a fallback that holds
// what the region's store holds now (a node already on one stays on it).
func (w *world) fallBack(r, k int) {
	n := w.regions[r]
	if n.fb[k] != nil {
		return
	}
	fb := n.mirrors[k]
	_ = fb.Merge(context.Background(), w.storeTotals(n.store))
	n.fb[k] = fb
}

// mirror copies a store decision of node k of region r into the node's
// fallback store, as region.Failover's mirror does: every region's count
// the result read, in its bucket and the one before, its own replica's
// included (Restore).
func (w *world) mirror(r, k int, q region.Request, res region.Result) {
	var tot []region.Total
	for _, rc := range res.Regions {
		if rc.Current > 0 {
			tot = append(tot, region.Total{Key: q.Key, Window: q.Limit.Window, Bucket: res.Bucket, Region: rc.Region, Count: rc.Current, Trail: rc.CurrentTrail})
		}
		if rc.Previous > 0 {
			tot = append(tot, region.Total{Key: q.Key, Window: q.Limit.Window, Bucket: res.Bucket - 1, Region: rc.Region, Count: rc.Previous, Trail: rc.PreviousTrail})
		}
	}
	if len(tot) > 0 {
		_ = w.regions[r].mirrors[k].Restore(context.Background(), tot)
	}
}

// recover writes node k of region r's fallback totals back into the
// region's store, and has the node decide on the store again.
func (w *world) recover(r, k int) {
	n := w.regions[r]
	fb := n.fb[k]
	if fb == nil {
		return
	}
	name := replica(n, k)
	var mine []region.Total
	for _, t := range w.storeTotals(fb) {
		if t.Region == name {
			mine = append(mine, t)
		}
	}
	_ = n.store.Merge(context.Background(), mine)
	n.fb[k] = nil
}

// storeTotals returns every total st holds of the keys admitted so far,
// in their current and previous buckets.
func (w *world) storeTotals(st *region.Memory) []region.Total {
	vecs, _ := st.Vectors(context.Background(), w.openRefs())
	var tot []region.Total
	for _, v := range vecs {
		for _, t := range v {
			if t.Count > 0 {
				tot = append(tot, t)
			}
		}
	}
	return tot
}

// openRefs returns the current and previous buckets of every key
// admitted so far, in key order.
func (w *world) openRefs() []region.BucketRef {
	wd := w.cfg.Limit.Window
	_, cur := w.cfg.Limit.BucketAt(w.now)
	var refs []region.BucketRef
	for _, key := range slices.Sorted(maps.Keys(w.admitted)) {
		refs = append(refs, region.BucketRef{Key: key, Window: wd, Bucket: cur - 1}, region.BucketRef{Key: key, Window: wd, Bucket: cur})
	}
	return refs
}

// mergeApart gives the fallbacks of region r's nodes tot, totals that
// reached the region (a delivery, or its own nodes' at a flush); a
// fallback skips its own replica's.
func (w *world) mergeApart(r int, tot []region.Total) {
	n := w.regions[r]
	for k, fb := range n.fb {
		if fb == nil {
			continue
		}
		name := replica(n, k)
		var in []region.Total
		for _, t := range tot {
			if t.Region != name {
				in = append(in, t)
			}
		}
		if len(in) > 0 {
			_ = fb.Merge(context.Background(), in)
		}
	}
}

// replicaOf reports whether name is region's own or one of its replicas
// (region~id), as gossip's replicaOf does.
func replicaOf(name, region string) bool {
	r, _, _ := strings.Cut(name, "~")
	return r == region
}
