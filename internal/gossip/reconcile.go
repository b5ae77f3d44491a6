package gossip

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// pending is a reconciliation batch for one remote region that could not be
// sent yet; it is retried (re-routed each time) until its deadline.
type pending struct {
	region   string
	totals   []region.Total
	deadline time.Time
	next     time.Time
	backoff  time.Duration
}

// vectorChunk bounds the buckets read from the store in one Vectors call.
const vectorChunk = 1000

// reconcileLoop sends the due reconciliations and retries the failed ones
// every FlushInterval.
func (n *Node) reconcileLoop() {
	n.every(n.cfg.FlushInterval, func() {
		n.reconcileDue()
		n.retryPending()
		n.pruneHeard(n.cfg.Now())
	})
}

// reconcileDue reconciles every touched bucket that closed at least Grace
// ago: it reads the bucket's vector from the store and sends this region's
// totals in it (its own and its replicas') to every other region.
func (n *Node) reconcileDue() {
	now := n.cfg.Now()
	cutoff := now.Add(-n.cfg.Grace).UnixMilli()
	var refs []region.BucketRef
	n.mu.Lock()
	for due, set := range n.touched {
		if due > cutoff {
			continue
		}
		for k := range set {
			refs = append(refs, region.BucketRef{Key: k.key, Window: k.window, Bucket: k.bucket})
		}
		n.nTouched -= len(set)
		delete(n.touched, due)
	}
	n.mu.Unlock()
	inChunks(refs, func(chunk []region.BucketRef) { n.reconcile(now, chunk) })
}

// inChunks calls f with s in order, at most vectorChunk items at a time.
func inChunks[T any](s []T, f func([]T)) {
	for len(s) > 0 {
		chunk := s[:min(len(s), vectorChunk)]
		s = s[len(chunk):]
		f(chunk)
	}
}

// storeTimeout bounds each store call the node makes on its own (not on a
// caller's behalf).
const storeTimeout = 5 * time.Second

// vectors reads refs' vectors from the store within storeTimeout.
func (n *Node) vectors(refs []region.BucketRef) ([][]region.Total, error) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	return n.store.Vectors(ctx, refs)
}

// readVectors is vectors for the node's own loops: a failure is counted as
// a store_error drop and logged as msg.
func (n *Node) readVectors(refs []region.BucketRef, msg string) ([][]region.Total, error) {
	vecs, err := n.vectors(refs)
	if err != nil {
		n.met.drop("store_error")
		n.log.Warn(msg, "n", len(refs), "err", err)
	}
	return vecs, err
}

func (n *Node) reconcile(now time.Time, refs []region.BucketRef) {
	vecs, err := n.readVectors(refs, "read vectors for reconciliation")
	if err != nil {
		// Try again next tick while the buckets can still matter.
		n.mu.Lock()
		for _, r := range refs {
			if now.Before(n.expiry(r.Window, r.Bucket)) {
				n.touchLocked(ref{r.Key, r.Window, r.Bucket}, true)
			}
		}
		n.mu.Unlock()
		return
	}
	// Each region reports only its own totals (its own and its replicas'),
	// here as in every flush: a receiver accepts nothing else from it.
	var totals []region.Total
	var deadline time.Time
	for i, v := range vecs {
		for _, t := range v {
			if t.Count > 0 && replicaOf(t.Region, n.cfg.Region) {
				totals = append(totals, t)
			}
		}
		if i < len(refs) {
			if d := n.expiry(refs[i].Window, refs[i].Bucket); d.After(deadline) {
				deadline = d
			}
		}
	}
	if len(totals) == 0 {
		return
	}
	n.keepRecent(totals)
	// And for a repair while they still count: the store's totals hold
	// the hits of the region's every node.
	n.mu.Lock()
	for _, t := range totals {
		dk := dref{ref{t.Key, t.Window, t.Bucket}, t.Region}
		if until := countsUntil(dk, bucketEnd(t.Window, t.Bucket).UnixMilli()); now.UnixMilli() < until {
			if !n.urg.closed.keep(dk, tally{t.Count, t.Trail}, until, n.cfg.MaxDirty) {
				n.met.drop("closed_full")
			}
		}
	}
	n.mu.Unlock()
	v := n.view()
	var wg sync.WaitGroup
	for reg, ms := range v.remote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.sendReconcile(reg, ms, totals, deadline)
		}()
	}
	// A region with no live member now gets its totals once one is back.
	n.memMu.RLock()
	known := map[string]bool{}
	for _, m := range n.members {
		if m.region != "" && m.region != n.cfg.Region {
			known[m.region] = true
		}
	}
	n.memMu.RUnlock()
	for reg := range known {
		if _, ok := v.remote[reg]; !ok {
			n.addPending(&pending{region: reg, totals: totals, deadline: deadline, backoff: n.cfg.FlushInterval})
		}
	}
	wg.Wait()
}

// sendReconcile sends totals to their owners in one region over TCP and
// queues what failed for a retry.
func (n *Node) sendReconcile(reg string, ms []*member, totals []region.Total, deadline time.Time) {
	var mu sync.Mutex
	var failed []region.Total
	var wg sync.WaitGroup
	for dest, group := range route(totals, ms) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.sendReliable(KindReconcile, dest, group); err != nil {
				n.log.Debug("reconcile send failed, will retry", "to", dest.node.Name, "err", err)
				mu.Lock()
				failed = append(failed, group...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		n.addPending(&pending{region: reg, totals: failed, deadline: deadline, backoff: n.cfg.FlushInterval})
	}
}

func (n *Node) addPending(p *pending) {
	p.next = time.Now().Add(p.backoff)
	n.pendMu.Lock()
	defer n.pendMu.Unlock()
	if len(n.pending) >= 1024 {
		n.met.drop("retry_full")
		return
	}
	n.pending = append(n.pending, p)
}

// retryPending resends the failed reconciliation batches that are due.
func (n *Node) retryPending() {
	now := time.Now()
	clock := n.cfg.Now()
	var due []*pending
	n.pendMu.Lock()
	keep := n.pending[:0]
	for _, p := range n.pending {
		switch {
		case clock.After(p.deadline):
			n.met.drop("retry_expired")
		case now.Before(p.next):
			keep = append(keep, p)
		default:
			due = append(due, p)
		}
	}
	n.pending = keep
	n.pendMu.Unlock()
	if len(due) == 0 {
		return
	}
	v := n.view()
	for _, p := range due {
		ms := v.remote[p.region]
		if len(ms) == 0 {
			p.backoff = min(2*p.backoff, 2*time.Second)
			n.addPending(p)
			continue
		}
		var failed []region.Total
		for dest, group := range route(p.totals, ms) {
			if err := n.sendReliable(KindReconcile, dest, group); err != nil {
				failed = append(failed, group...)
			}
		}
		if len(failed) > 0 {
			p.totals = failed
			p.backoff = min(2*p.backoff, 2*time.Second)
			n.addPending(p)
		}
	}
}

// touchLocked adds k to the buckets this node reconciles once k's bucket
// closes: at most MaxTouched of them, unless always (a bucket taken out of
// the set to be reconciled and put back). added reports a bucket new to
// the set; full, one refused because the set is full (counted as a drop).
// n.mu must be held.
func (n *Node) touchLocked(k ref, always bool) (added, full bool) {
	_, due := window.BucketSpan(k.window, k.bucket)
	set := n.touched[due]
	if set == nil {
		set = map[ref]struct{}{}
		n.touched[due] = set
	}
	if _, ok := set[k]; ok {
		return false, false
	}
	if !always && n.nTouched >= n.cfg.MaxTouched {
		n.met.drop("touched_full")
		return false, true
	}
	set[k] = struct{}{}
	n.nTouched++
	return true, false
}

// bucketStart returns the first instant of the bucket (w, b), Unix ms.
func bucketStart(w time.Duration, b int64) int64 {
	start, _ := window.BucketSpan(w, b)
	return start
}

// bucketEnd returns the end of the bucket (w, b): (b+1)*W, or a calendar
// bucket's (window.BucketSpan).
func bucketEnd(w time.Duration, b int64) time.Time {
	_, end := window.BucketSpan(w, b)
	return time.UnixMilli(end)
}

// expiry is when a closed bucket stops mattering: one window after it
// closes (its successor has closed; it is out of every estimate) plus
// RetryMargin. A store keeps a bucket at least that long (the Redis store:
// two windows plus its TTL margin after the bucket's last increment, which
// is after the bucket began), so totals merged before expiry never
// re-create a bucket the store has dropped.
func (n *Node) expiry(w time.Duration, b int64) time.Time {
	return bucketEnd(w, b).Add(max(w, -w) + n.cfg.RetryMargin)
}

// keepRecent adds reconciled totals to the bounded ring that push-pull
// carries.
func (n *Node) keepRecent(ts []region.Total) {
	n.stateMu.Lock()
	defer n.stateMu.Unlock()
	for _, t := range ts {
		n.recent.push(t)
	}
}

// localState encodes the recent reconciled totals of buckets that have not
// expired, newest first, in one frame of at most
// MaxStateBytes. memberlist does not say which member the frame goes to:
// its trails are fine only when every member this node sees reads them and
// the exchange is not a join (whose peer this node may not know yet).
func (n *Node) localState(join bool) []byte {
	now := n.cfg.Now()
	ts := n.recentTotals(math.MaxInt)
	if len(ts) == 0 {
		return nil
	}
	enc := Encode
	if !join && n.allFine() {
		enc = EncodeFine
	}
	frames, err := enc(KindState, now, n.self(), ts, n.cfg.MaxStateBytes)
	if err != nil || len(frames) == 0 {
		return nil
	}
	n.met.sent(KindState, len(frames[0]))
	return frames[0]
}
