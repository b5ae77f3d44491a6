package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/rlcluster/rlcluster/internal/gossip"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// A region's store restarting empty (a Redis restarted without its data),
// and the repair that follows, as internal/gossip does it (repair.go,
// restore.go, reconcile.go):
//
//   - The loss: at an instant the region's store is replaced by an empty
//     region.Memory. The region's guards keep their state.
//   - Detection: each node of the region reads the store's epoch marker
//     every second (Config.EpochInterval) at a phase of its own (the
//     schedule draws each node's delay, 1 ms to 1 s), and at its first
//     decision after the loss, which finds Redis's scripts gone
//     (region.Redis.OnReload calls gossip.Node.CheckEpoch), whichever
//     comes first. That decision does not run: it is held (denied, and
//     marked Held, which the guard's Done learns nothing from).
//   - From detection the node holds its decisions (guard.View.Restoring)
//     until a member of every region it asked has answered (an answer
//     with no totals too), or at the most for two horizons less a flush
//     interval (a request's one-way delay and the answer's) plus a
//     second.
//   - At detection the node max-merges back (region.Memory.Restore) its
//     own totals of the buckets that still count (open, or closed less
//     than a window ago), the latest of its own admissions, as restoreOwn
//     does with what it holds dirty, sent last, or kept from a closed
//     bucket. It then asks every member of
//     the other regions that it counts alive (heard within the suspicion
//     timeout) for this region's totals, and, while the repair is open (30
//     s), the members of a region heard again after a silence. A request
//     to a region cut off at that instant is lost; its members still count
//     as asked.
//   - Each member asked answers, one one-way delay later, with the
//     requester's region's totals and its own region's that its region's
//     store holds, in the key's current and previous buckets, and its own
//     latest totals of the buckets that still count (as its gossip node
//     holds them: its store may have lost its counts too, unknown to it
//     yet); the answer
//     is lost when the pair is cut at that instant.
//   - The requester takes each answered total as far as two sources agree
//     (restore.go: a source is a region when the members asked are of two
//     regions or more, else a member; one source alone when only one was
//     asked), skips buckets that began after its request, and max-merges
//     the agreed value into the store with region.Memory.Restore, and
//     merges the answerer's own region's totals as a flush of that region
//     would (region.Memory.Merge).
//   - The other regions' counts come back with those answers, and with
//     their next totals: a flush when they admit again, and, a flush
//     interval after a bucket closes, the reconciliation of the buckets
//     they admitted in (config.Reconcile, set in runs with a restart only:
//     without a loss every total it carries has arrived by flush or by the
//     re-send to a region heard again).
//
// Simplified: the store is down for no time (no fallback to the in-memory
// store meanwhile); every node of a region holds every total its region's
// store merged (gossip merges a remote total on the key's owner node only,
// and a node answers for the buckets it merged or touched); a member
// answers every request at once (gossip answers one member at most once a
// second); requests, answers and reconciliations are lost, not retried,
// when their pair is cut, and prove no liveness; the memberlist push-pull
// exchange of recent reconciled totals is not modelled.
const (
	evLoss      = 3 + iota // region to's store loses every count
	evDetect               // node (to, node) reads the store's new epoch
	evAsk                  // a repair request of (from, fromNode) reaches member (to, node)
	evAnswer               // member (from, fromNode)'s answer reaches (to, node)
	evReconcile            // region to reconciles bucket of key
	evMerge                // a reconciliation's totals reach region to
	evFallback             // node (to, node) starts deciding from its fallback (fallback.go)
	evRecover              // node (to, node)'s store answers again
	evDemand               // node (from, fromNode)'s demand (dem) reaches region to
)

// Gossip's defaults: how long a node accepts repair answers after it
// asked, and how long past one window after its close a bucket matters.
const (
	repairWindowMs = 30_000
	retryMarginMs  = 10_000
)

// newStore returns an empty store of the region named name.
func newStore(name string) *region.Memory {
	return region.NewMemory(region.MemoryConfig{Region: name, MaxKeys: 1 << 22})
}

// member is a node of a region.
type member struct{ region, node int }

// repair is a node's open repair (gossip's repairQuorum), each total's
// answers weighed by gossip.RepairAnswer.
type repair struct {
	since, until int64
	asked        map[member]bool
	answered     map[int]bool // regions a member of which answered
	answers      map[region.BucketRef]*gossip.RepairAnswer
}

// holding reports whether the repair still holds its node's decisions: a
// region asked has not answered yet.
func (rp *repair) holding() bool {
	for m := range rp.asked {
		if !rp.answered[m.region] {
			return true
		}
	}
	return false
}

// sources returns the source of an answer from m and how many sources
// must agree on a value restored.
func (rp *repair) sources(m member) (src string, need int) {
	regions := map[int]bool{}
	for a := range rp.asked {
		regions[a.region] = true
	}
	sourceOf := func(a member) string {
		if len(regions) >= 2 {
			return fmt.Sprintf("region %d", a.region)
		}
		return fmt.Sprintf("member %d/%d", a.region, a.node)
	}
	srcs := map[string]bool{}
	for a := range rp.asked {
		srcs[sourceOf(a)] = true
	}
	return sourceOf(m), min(2, len(srcs))
}

// restart makes region r's store lose every count at atMs; node k of the
// region sees it detect[k] ms later.
func (w *world) restart(r int, atMs int64, detect []int64) {
	w.push(&event{at: atMs, kind: evLoss, to: r})
	for k, d := range detect {
		w.push(&event{at: atMs + d, kind: evDetect, to: r, node: k})
	}
}

// restartEvent handles the events of restart.go's kinds.
func (w *world) restartEvent(e *event) {
	n := w.regions[e.to]
	switch e.kind {
	case evLoss:
		n.store = newStore(n.name)
		for k := range n.lost {
			// A node that joins later reads the new epoch as its first.
			n.lost[k] = n.life[k].from <= w.now
		}
	case evDetect:
		if n.lost[e.node] && w.alive(e.to, e.node) {
			w.requestRepair(e.to, e.node)
		}
	case evAsk:
		w.answerRepair(e)
	case evAnswer:
		w.restore(e)
	case evReconcile:
		w.reconcile(e)
	case evMerge:
		_ = n.store.Merge(context.Background(), e.tot)
	case evFallback:
		w.fallBack(e.to, e.node)
	case evRecover:
		w.recover(e.to, e.node)
	case evDemand:
		from := w.regions[e.from]
		for k, g := range n.guards {
			if e.to != e.from || k != e.fromNode {
				g.LearnDemand(time.UnixMilli(w.now), from.name, strconv.Itoa(e.fromNode), e.to == e.from, e.dem)
			}
		}
	}
}

// cut reports whether the pair (a, b) is partitioned now.
func (w *world) cut(a, b int) bool { return w.cfg.Cut != nil && w.cfg.Cut(a, b, w.now) }

// expired reports whether bucket b of window wd no longer matters now
// (gossip's Node.expiry).
func (w *world) expired(wd time.Duration, b int64) bool {
	_, end := window.BucketSpan(wd, b)
	return w.now >= end+wd.Milliseconds()+retryMarginMs
}

// counts reports whether bucket ref still counts in an estimate now: it
// closed less than a window ago, or is open. A gossip node keeps its own
// totals of such buckets (Node.ownTotals).
func (w *world) counts(ref region.BucketRef) bool {
	_, end := window.BucketSpan(ref.Window, ref.Bucket)
	return w.now < end+ref.Window.Milliseconds()
}

// requestRepair is node k of region r seeing its store's new epoch: it
// merges back its own totals of the open buckets and asks the members of
// the regions it counts alive.
func (w *world) requestRepair(r, k int) {
	n := w.regions[r]
	n.lost[k] = false
	n.losses[k]++
	if v := w.view(r); !v.Off() {
		n.hold[k] = w.now + gossip.RestoreHold(v.Horizon, w.cfg.Flush).Milliseconds()
	}
	n.repairs[k] = &repair{since: w.now, until: w.now + repairWindowMs, asked: map[member]bool{}, answered: map[int]bool{}, answers: map[region.BucketRef]*gossip.RepairAnswer{}}
	own := ownLatest(n, k, w.counts)
	if len(own) > 0 {
		_ = n.store.Restore(context.Background(), own)
	}
	for j := range w.regions {
		if j != r && w.now-n.heard[j] <= w.cfg.Suspicion.Milliseconds() {
			w.ask(r, k, j)
		}
	}
}

// ownLatest returns node k of n's latest own totals (see node.sent) of
// the buckets keep accepts, in key and bucket order.
func ownLatest(n *node, k int, keep func(region.BucketRef) bool) []region.Total {
	var own []region.Total
	for ref, t := range n.sent[k] {
		if keep(ref) {
			own = append(own, t)
		}
	}
	slices.SortFunc(own, func(a, b region.Total) int { return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Bucket, b.Bucket)) })
	return own
}

// ask sends node k of region r's repair request to every member of
// region j.
func (w *world) ask(r, k, j int) {
	rp := w.regions[r].repairs[k]
	for m := range w.regions[j].guards {
		if !w.alive(j, m) {
			continue
		}
		rp.asked[member{j, m}] = true
		if !w.cut(r, j) {
			w.push(&event{at: w.now + w.delayMs(), kind: evAsk, to: j, node: m, from: r, fromNode: k})
		}
	}
}

// askAgain asks the members of region j, heard again by region r after a
// silence, for every repair of r's nodes still open.
func (w *world) askAgain(r, j int) {
	for k, rp := range w.regions[r].repairs {
		if rp != nil && w.now < rp.until {
			w.ask(r, k, j)
		}
	}
}

// answerRepair is member (e.to, e.node) answering a repair request of
// (e.from, e.fromNode): the requester's region's totals its store holds.
func (w *world) answerRepair(e *event) {
	n, name := w.regions[e.to], w.regions[e.from].name
	wd := w.cfg.Limit.Window
	vecs, _ := n.store.Vectors(context.Background(), w.openRefs())
	var tot []region.Total
	for _, v := range vecs {
		for _, t := range v {
			if (replicaOf(t.Region, name) || replicaOf(t.Region, n.name)) && t.Count > 0 && !w.expired(wd, t.Bucket) {
				tot = append(tot, t)
			}
		}
	}
	// And the answering node's own latest totals (dirty or sent last):
	// its store may have lost its counts too, and not know it yet.
	tot = append(tot, ownLatest(n, e.node, w.counts)...)
	if !w.cut(e.to, e.from) { // an empty answer too: it ends the hold
		w.push(&event{at: w.now + w.delayMs(), kind: evAnswer, to: e.from, node: e.fromNode, from: e.to, fromNode: e.node, tot: tot})
	}
}

// restore is node (e.to, e.node) taking member (e.from, e.fromNode)'s
// answer: each total as far as two sources agree, in the buckets that
// began no later than its request.
func (w *world) restore(e *event) {
	n := w.regions[e.to]
	rp := n.repairs[e.node]
	m := member{e.from, e.fromNode}
	if rp == nil || w.now >= rp.until || !rp.asked[m] {
		return
	}
	src, need := rp.sources(m)
	defer func() { rp.answered[e.from] = true }()
	var ts, theirs []region.Total
	for _, t := range e.tot {
		if t.Region != n.name {
			theirs = append(theirs, t) // the answerer's own, merged as a flush's
			continue
		}
		start, _ := window.BucketSpan(t.Window, t.Bucket)
		if t.Count == 0 || w.expired(t.Window, t.Bucket) || start > rp.since {
			continue
		}
		ref := region.BucketRef{Key: t.Key, Window: t.Window, Bucket: t.Bucket}
		a := rp.answers[ref]
		if a == nil {
			a = &gossip.RepairAnswer{}
			rp.answers[ref] = a
		}
		if r, ok := a.Offer(src, t, need); ok {
			ts = append(ts, r)
		}
	}
	if len(ts) > 0 {
		_ = n.store.Restore(context.Background(), ts)
	}
	if len(theirs) > 0 {
		_ = n.store.Merge(context.Background(), theirs)
	}
}

// reconcile sends region e.to's own total of a closed bucket to every
// region it is not cut from.
func (w *world) reconcile(e *event) {
	n := w.regions[e.to]
	ref := region.BucketRef{Key: e.key, Window: w.cfg.Limit.Window, Bucket: e.bucket}
	delete(n.touched, ref)
	vecs, _ := n.store.Vectors(context.Background(), []region.BucketRef{ref})
	var tot []region.Total
	for _, v := range vecs {
		for _, t := range v {
			if t.Region == n.name && t.Count > 0 {
				tot = append(tot, t)
			}
		}
	}
	if len(tot) == 0 {
		return
	}
	for j := range w.regions {
		if j != e.to && !w.cut(e.to, j) {
			w.push(&event{at: w.now + w.delayMs(), kind: evMerge, to: j, tot: tot})
		}
	}
}
