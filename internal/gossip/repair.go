package gossip

import (
	"context"
	"sync"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
)

// Self-repair and re-sending after a (re)join.
//
// Other regions hold this region's totals: each max-merged what this
// region reported into its own store. When this region's store loses its
// counts (a Redis restarted empty or flushed, detected by Config.Epoch), or
// a node starts on an empty store of its own (Config.OwnStore), the node
// asks every member of the other regions, and its own region's members
// with stores of their own, to send back what they hold of this region
// (KindRepair). Each answers with those totals (KindRepaired) for the
// buckets it has merged or touched that have not expired, and the node
// max-merges them into its store, its own region's count included
// (Restorer), as far as two sources agree (restore.go). Every such total
// is one this region once reported, so the merge never takes a count
// above what the region really admitted (invariant 1); hits admitted
// between the loss and the repair may be under-counted by as many (max,
// not sum), and so may those one source heard and the others not yet.
// Each answer also carries the answerer's own region's totals, which the
// store lost as well and which would otherwise come back only with that
// region's next send.
//
// A loss is found at the node's next read of the epoch (EpochInterval),
// or sooner: at its first decision after a Redis restart, which finds the
// scripts gone (CheckEpoch, through region.Redis.OnReload), and when a
// decision returns a count of this region below one the node holds
// (suspectLoss). From then the node holds its decisions (the guard's
// View.Restoring) until a member of every region asked has answered
// (requestRepair has the longest it waits), so that it does not decide
// on a store that holds nothing. Every member answers, with an empty
// answer when it holds nothing to send.
//
// When a member comes alive (a new node, or one back from a partition), the
// node sends its own region's totals of every bucket it has touched and not
// yet reconciled (the open buckets and those just closed) to the owners in
// that member's region at once, and retries at once the reconciliations
// that were waiting for that region: both sides of a healed partition agree
// on open and closed buckets one round trip after they see each other
// again, instead of at the next bucket's reconciliation.

// Restorer is implemented by a store that can take back its own region's
// totals: Restore max-merges totals as Merge does, except that it also
// merges those of the store's own region (and replica). region.Stack,
// region.Redis and region.Memory implement it. A store without it gets
// Merge, which skips its own region's totals.
type Restorer interface {
	Restore(ctx context.Context, totals []region.Total) error
}

// repairWindow is how long after asking for a repair the node accepts
// answers (KindRepaired), and asks members that come alive meanwhile too.
const repairWindow = 30 * time.Second

// answerEvery is the shortest interval between two answers to one member's
// repair requests.
const answerEvery = time.Second

// repairState is a Node's self-repair and rejoin bookkeeping.
type repairState struct {
	mu       sync.Mutex
	heard    map[int64]map[ref]struct{} // expiry (Unix ms) -> buckets merged from peers
	nHeard   int
	answered map[string]time.Time // member -> last answer
	deferred map[string]bool      // member -> an answer is scheduled
	until    time.Time            // repair answers accepted until then
	hold     time.Time            // the guard refuses decisions until then (GuardView)
	losses   uint64               // the store's losses found (GuardView's Losses)
	quorum   repairQuorum         // the answers to the open repair (restore.go)
	epoch    string               // the store's epoch seen last
	again    bool                 // a restore failed: ask again
	joined   map[string]bool      // members come alive, not yet served
	wake     chan struct{}
	suspect  chan struct{} // a count went down: read the epoch now
	epochMu  sync.Mutex    // one CheckEpoch at a time
}

func (n *Node) initRepair() {
	n.rep.heard = map[int64]map[ref]struct{}{}
	n.rep.answered = map[string]time.Time{}
	n.rep.deferred = map[string]bool{}
	n.rep.joined = map[string]bool{}
	n.rep.wake = make(chan struct{}, 1)
	n.rep.suspect = make(chan struct{}, 1)
}

// lowerLocked reports whether count, this region's new count of dk as the
// store returned it, is below one this node holds of dk, dirty or sent
// last: a region's count of a bucket only grows, so the store may have
// lost its counts. Decisions that run at once may record their counts out
// of order too, so it is only a reason to read the store's epoch now
// (suspectLoss), not proof of a loss. Called with n.mu held.
func (n *Node) lowerLocked(dk dref, count uint64) bool {
	if c, ok := n.dirty[dk]; ok && c.n > count {
		return true
	}
	s := n.urg.state[dk]
	return s != nil && s.sent.n > count
}

// suspectLoss asks epochLoop to read the store's epoch now rather than at
// its next tick, so that a store that lost its counts is repaired, and
// the node's decisions held (requestRepair), from about its first
// decision after the loss. It never blocks.
func (n *Node) suspectLoss() {
	select {
	case n.rep.suspect <- struct{}{}:
	default:
	}
}

// suspectEvery is the shortest interval between two reads of the epoch
// that suspectLoss asks for.
const suspectEvery = 10 * time.Millisecond

// hear remembers the buckets of totals merged from peers, so that a repair
// request can be answered from them. Bounded by MaxTouched; beyond it new
// buckets are dropped and counted (heard_full).
func (n *Node) hear(now time.Time, ts []region.Total) {
	n.rep.mu.Lock()
	defer n.rep.mu.Unlock()
	for _, t := range ts {
		exp := n.expiry(t.Window, t.Bucket).UnixMilli()
		k := ref{t.Key, t.Window, t.Bucket}
		set := n.rep.heard[exp]
		if set == nil {
			set = map[ref]struct{}{}
			n.rep.heard[exp] = set
		}
		if _, ok := set[k]; ok {
			continue
		}
		if n.rep.nHeard >= n.cfg.MaxTouched {
			n.met.drop("heard_full")
			return
		}
		set[k] = struct{}{}
		n.rep.nHeard++
	}
}

// pruneHeard forgets the buckets that have expired.
func (n *Node) pruneHeard(now time.Time) {
	ms := now.UnixMilli()
	n.rep.mu.Lock()
	defer n.rep.mu.Unlock()
	for exp, set := range n.rep.heard {
		if exp <= ms {
			n.rep.nHeard -= len(set)
			delete(n.rep.heard, exp)
		}
	}
	for name, at := range n.rep.answered {
		if now.Sub(at) > answerEvery {
			delete(n.rep.answered, name)
		}
	}
}

// repairOpen reports whether this node asked for a repair recently enough
// to accept answers.
func (n *Node) repairOpen(now time.Time) bool {
	n.rep.mu.Lock()
	defer n.rep.mu.Unlock()
	return now.Before(n.rep.until)
}

// RequestRepair asks every live member of the other regions (and of this
// region, for members with stores of their own) to send back the totals
// they hold of this region, and members that come alive within the next 30
// s too. The node calls it itself when Config.Epoch reports a loss and, with
// Config.OwnStore, at start. It never blocks on the network.
func (n *Node) RequestRepair(reason string) { n.requestRepair(reason, false) }

// RestoreHold is the longest a node holds its decisions after its store
// lost its counts (see requestRepair), for a guard horizon h and a flush
// interval flush: a request's one-way delay and the answer's, h - flush
// each, plus a flush for the answer to go out, plus the second a member
// may wait before it answers the same node again.
func RestoreHold(h, flush time.Duration) time.Duration {
	return 2*h - flush + answerEvery
}

// requestRepair is RequestRepair; with hold, the node's guard also refuses
// every decision (guard.View.Restoring) until a member of every region
// asked has answered, or, at the most, for as long as an answer takes to
// come back from the farthest region heard (a request's one-way delay,
// then the answer's, as the view's horizon measures them) plus the
// second a member may wait before it answers the same node again. The
// store lost the other regions' counts with its own, and until the
// answers bring them back it would decide as if nothing had been admitted.
func (n *Node) requestRepair(reason string, hold bool) {
	now := n.cfg.Now()
	var until time.Time
	if hold {
		if v := n.GuardView(now); !v.Off() {
			until = now.Add(RestoreHold(v.Horizon, n.cfg.FlushInterval))
		}
	}
	n.rep.mu.Lock()
	if hold {
		n.rep.hold = until
		n.rep.losses++
	}
	n.rep.until = now.Add(repairWindow)
	n.rep.again = false
	n.rep.quorum.reset(now)
	n.rep.mu.Unlock()
	n.met.repairRequested()
	if n.cfg.OwnStore {
		n.log.Info("asking peers for this region's totals", "reason", reason)
	} else {
		n.log.Warn("asking peers for this region's totals", "reason", reason)
	}
	v := n.view()
	for _, ms := range v.remote {
		for _, m := range ms {
			n.askRepair(m, KindRepair)
		}
	}
	n.restoreOwn(now)
}

// restoreOwn max-merges into the store, in the background, this node's own
// word on its region's totals of the buckets that have not expired: the
// dirty totals not yet sent (under urgency, a far key's hits wait up to its
// allowance or MaxStaleness) and the ones last sent. The other regions
// hold only what was sent, so their answers cannot bring the unsent hits
// back; each is a count this region's store once returned, so the merge
// never takes the count above what the region admitted. A failure is
// retried with the next repair (epochLoop).
func (n *Node) restoreOwn(now time.Time) {
	ts := n.ownTotals(now)
	if len(ts) == 0 {
		return
	}
	n.sends.Add(1)
	go func() {
		defer n.sends.Done()
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		defer cancel()
		var err error
		if r, ok := n.store.(Restorer); ok {
			err = r.Restore(ctx, ts)
		} else {
			err = n.store.Merge(ctx, ts)
		}
		if err != nil {
			n.met.drop("store_error")
			n.log.Warn("restore this node's own totals", "n", len(ts), "err", err)
			n.rep.mu.Lock()
			n.rep.again = true
			n.rep.mu.Unlock()
			return
		}
		n.met.repairTotals(len(ts))
	}()
}

// ownTotals returns, for each of this region's totals (its own and its
// replicas') that the node holds dirty, sent last, about to echo or kept
// from a bucket that closed less than a window ago (closedOwn), in a
// bucket that has not expired, the largest of them.
func (n *Node) ownTotals(now time.Time) []region.Total {
	best := map[dref]tally{}
	add := func(dk dref, c tally) {
		if c.n == 0 || !replicaOf(dk.region, n.cfg.Region) || !now.Before(n.expiry(dk.window, dk.bucket)) {
			return
		}
		b := best[dk]
		b.mergeTally(dk.window, c)
		best[dk] = b
	}
	n.mu.Lock()
	for dk, c := range n.dirty {
		add(dk, c)
	}
	for dk, c := range n.echo {
		add(dk, c)
	}
	for dk, s := range n.urg.state {
		add(dk, s.sent)
	}
	for dk, c := range n.urg.closed.tot {
		add(dk, c)
	}
	n.mu.Unlock()
	out := make([]region.Total, 0, len(best))
	for dk, c := range best {
		out = append(out, region.Total{Key: dk.key, Window: dk.window, Bucket: dk.bucket, Region: dk.region, Count: c.n, Trail: c.h})
	}
	return out
}

// askRepair sends m a frame of kind (KindRepair or KindRejoin, no
// entries) over TCP, in the background; a KindRejoin goes over UDP first
// too, to arrive one one-way delay sooner.
func (n *Node) askRepair(m *member, kind Kind) {
	if kind == KindRepair {
		n.rep.mu.Lock()
		n.rep.quorum.ask(m)
		n.rep.mu.Unlock()
	}
	f, err := EncodeEmpty(kind, n.cfg.Now(), n.self())
	if err != nil {
		n.met.drop("encode")
		return
	}
	if kind == KindRejoin {
		if err := n.sendPacket(m, f); err == nil {
			n.met.sent(kind, len(f))
		}
	}
	n.sends.Add(1)
	go func() {
		defer n.sends.Done()
		if err := n.sendStream(m, f); err != nil {
			n.met.drop("send_error")
			n.log.Debug("send "+kind.String(), "to", m.node.Name, "err", err)
			return
		}
		n.met.sent(kind, len(f))
	}()
}

// answerRepair answers a repair request of s (a live member, checked by
// handle) in the background: the totals of s's region and of this node's
// (and their replicas) in every bucket this node merged or touched that
// has not expired, and this node's own latest totals (see [Node.ownTotals]).
// A
// member's requests are answered at most once a second: one that comes
// sooner is answered when the second is over, and more are dropped
// (repair_busy).
func (n *Node) answerRepair(s *member) {
	now := n.cfg.Now()
	n.rep.mu.Lock()
	if at, ok := n.rep.answered[s.node.Name]; ok && now.Sub(at) < answerEvery {
		deferred := n.rep.deferred[s.node.Name]
		n.rep.deferred[s.node.Name] = true
		n.rep.mu.Unlock()
		if deferred {
			n.met.drop("repair_busy")
			return
		}
		n.sends.Add(1)
		time.AfterFunc(answerEvery-now.Sub(at), func() {
			defer n.sends.Done()
			n.rep.mu.Lock()
			delete(n.rep.deferred, s.node.Name)
			delete(n.rep.answered, s.node.Name)
			n.rep.mu.Unlock()
			select {
			case <-n.stop:
			default:
				n.answerRepair(s)
			}
		})
		return
	}
	n.rep.answered[s.node.Name] = now
	var refs []region.BucketRef
	for exp, set := range n.rep.heard {
		if exp <= now.UnixMilli() {
			continue
		}
		for k := range set {
			refs = append(refs, region.BucketRef{Key: k.key, Window: k.window, Bucket: k.bucket})
		}
	}
	n.rep.mu.Unlock()
	n.mu.Lock()
	for _, set := range n.touched {
		for k := range set {
			refs = append(refs, region.BucketRef{Key: k.key, Window: k.window, Bucket: k.bucket})
		}
	}
	n.mu.Unlock()
	n.memMu.RLock() // reconnect and revive write some fields in place
	dest := *s
	n.memMu.RUnlock()
	n.sends.Add(1)
	go func() {
		defer n.sends.Done()
		totals := n.read(refs, func(t region.Total) bool {
			return replicaOf(t.Region, dest.region) || replicaOf(t.Region, n.cfg.Region)
		})
		totals = withOwn(totals, n.ownTotals(now))
		n.met.repairAnswered()
		if len(totals) == 0 {
			// An empty answer still tells the node this region has
			// nothing more to send: it stops holding its decisions.
			f, err := EncodeEmpty(KindRepaired, n.cfg.Now(), n.self())
			if err != nil {
				n.met.drop("encode")
				return
			}
			if err := n.sendStream(&dest, f); err != nil {
				n.met.drop("send_error")
				n.log.Debug("repair answer", "to", dest.node.Name, "err", err)
				return
			}
			n.met.sent(KindRepaired, len(f))
			return
		}
		if err := n.sendReliable(KindRepaired, &dest, totals); err != nil {
			n.log.Debug("repair answer", "to", dest.node.Name, "err", err)
		}
	}()
}

// withOwn adds to totals, read from this node's store, the node's own
// latest totals (dirty or sent last) that the store lacks or holds less
// of: the store may have lost its counts too and not know it yet (two
// stores restarting a round trip apart), and would answer with nothing of
// this region. Each is a count this region's store once returned, as a
// flush carries; the receiver max-merges. A store that lost nothing holds
// as much or more of each, and none is sent twice.
func withOwn(totals, own []region.Total) []region.Total {
	held := make(map[dref]uint64, len(totals))
	for _, t := range totals {
		held[dref{ref{t.Key, t.Window, t.Bucket}, t.Region}] = t.Count
	}
	for _, t := range own {
		if c, ok := held[dref{ref{t.Key, t.Window, t.Bucket}, t.Region}]; !ok || t.Count > c {
			totals = append(totals, t)
		}
	}
	return totals
}

// read returns the totals that keep accepts, with a count, in the buckets
// refs name (deduplicated), read from the store in chunks.
func (n *Node) read(refs []region.BucketRef, keep func(region.Total) bool) []region.Total {
	seen := make(map[region.BucketRef]bool, len(refs))
	uniq := refs[:0:0]
	for _, r := range refs {
		if !seen[r] {
			seen[r] = true
			uniq = append(uniq, r)
		}
	}
	var out []region.Total
	inChunks(uniq, func(chunk []region.BucketRef) {
		vecs, err := n.readVectors(chunk, "read vectors")
		if err != nil {
			return
		}
		for _, v := range vecs {
			for _, t := range v {
				if t.Count > 0 && keep(t) {
					out = append(out, t)
				}
			}
		}
	})
	return out
}

// CheckEpoch reads the store's epoch (Config.Epoch) now, and asks for a
// repair when it is new (the store lost its counts), or when a restore
// failed. A loss while this node runs holds its decisions until the
// answers are back (requestRepair); a store found without a marker at
// the node's first read may be new as well as emptied, and holds none.
// The node calls it every EpochInterval; rlnode also calls it when a
// decision finds Redis's scripts gone (region.Redis.OnReload). Reads run
// one at a time. While the node holds its decisions (guard.View.Restoring)
// it returns when to retry one, as the guard answers it: the time left or
// a horizon, whichever is sooner; else 0. Without Config.Epoch it does
// nothing.
func (n *Node) CheckEpoch(ctx context.Context) (hold time.Duration) {
	if n.cfg.Epoch == nil {
		return 0
	}
	n.rep.epochMu.Lock()
	defer n.rep.epochMu.Unlock()
	defer func() {
		if v := n.GuardView(n.cfg.Now()); v.Restoring > 0 {
			hold = v.RestoringRetry()
		}
	}()
	e, fresh, err := n.cfg.Epoch(ctx)
	if err != nil {
		n.log.Debug("read store epoch", "err", err)
		return 0
	}
	n.rep.mu.Lock()
	last, again := n.rep.epoch, n.rep.again
	n.rep.epoch = e
	n.rep.mu.Unlock()
	switch {
	case fresh:
		n.requestRepair("the store holds no epoch marker: it is new or lost its counts", last != "")
	case last != "" && e != last:
		n.requestRepair("the store's epoch changed: it lost its counts", true)
	case again:
		n.RequestRepair("a restore failed")
	}
	return 0 // the deferred read sets the hold
}

// epochLoop polls Config.Epoch every EpochInterval, and when a decision
// returned a count lower than one this node holds (suspectLoss), and asks
// for a repair when the store's epoch is new (the store lost its counts),
// or when a restore failed.
func (n *Node) epochLoop() {
	check := func() {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.EpochInterval)
		n.CheckEpoch(ctx)
		cancel()
	}
	check()
	tk := time.NewTicker(n.cfg.EpochInterval)
	defer tk.Stop()
	var last time.Time // the last read suspectLoss asked for
	for {
		select {
		case <-n.stop:
			return
		case <-tk.C:
			check()
		case <-n.rep.suspect:
			if now := n.cfg.Now(); now.Sub(last) >= suspectEvery || now.Before(last) {
				last = now
				n.met.repairSuspected()
				check()
			}
		}
	}
}

// memberUp records that m came alive (new, or back from dead), for
// rejoinLoop, which also tells m (KindRejoin): m may not have seen this
// node go (a partition that only one side detected), and would otherwise
// not re-send its own open totals. Called by setMember with memMu held:
// it never blocks.
func (n *Node) memberUp(m *member) { n.queueJoined(m, true) }

// rejoined serves a KindRejoin from s (a live member, checked by handle):
// s sees this node alive again, so this node re-sends its open totals to
// s's region, without telling s in turn. At most once a second per member.
func (n *Node) rejoined(s *member) {
	now := n.cfg.Now()
	n.rep.mu.Lock()
	k := "rejoin\x00" + s.node.Name
	if at, ok := n.rep.answered[k]; ok && now.Sub(at) < answerEvery {
		n.rep.mu.Unlock()
		return // the same rejoin by TCP after UDP, or a repeat: served already
	}
	n.rep.answered[k] = now
	n.rep.mu.Unlock()
	n.queueJoined(s, false)
}

func (n *Node) queueJoined(m *member, tell bool) {
	if m.isLocal || (m.region == n.cfg.Region && !n.apartFrom(m)) {
		return
	}
	n.rep.mu.Lock()
	n.rep.joined[m.node.Name] = n.rep.joined[m.node.Name] || tell
	n.rep.mu.Unlock()
	select {
	case n.rep.wake <- struct{}{}:
	default:
	}
}

// rejoinLoop serves members that came alive: it sends each one's region
// this region's totals of the open buckets, retries at once the
// reconciliations waiting for that region, and asks the member for a
// repair while one is open.
func (n *Node) rejoinLoop() {
	for {
		select {
		case <-n.stop:
			return
		case <-n.rep.wake:
		}
		n.rep.mu.Lock()
		names := n.rep.joined
		n.rep.joined = map[string]bool{}
		open := n.cfg.Now().Before(n.rep.until)
		n.rep.mu.Unlock()
		regions := map[string]bool{}
		n.memMu.RLock()
		var ask, tell []*member
		for name, t := range names {
			if m := n.members[name]; m != nil && m.state == "alive" {
				regions[m.region] = true
				if open {
					ask = append(ask, m)
				}
				if t {
					tell = append(tell, m)
				}
			}
		}
		n.memMu.RUnlock()
		n.log.Debug("members came alive", "members", len(names), "regions", len(regions), "tell", len(tell))
		for _, m := range ask {
			n.askRepair(m, KindRepair)
		}
		for _, m := range tell {
			n.askRepair(m, KindRejoin)
		}
		if len(regions) > 0 {
			n.resendOpen(regions)
		}
	}
}

// relayed returns the totals of other regions that this node's store
// holds in the buckets it merged totals of from peers and that have not
// expired (see hear), for a region heard again: when one split of the
// regions follows another, a region may have admitted, while this one
// heard it, hits that the region heard again never heard of, and it
// cannot hear that region yet.
func (n *Node) relayed() []region.Total {
	now := n.cfg.Now().UnixMilli()
	var refs []region.BucketRef
	n.rep.mu.Lock()
	for exp, set := range n.rep.heard {
		if exp <= now {
			continue
		}
		for k := range set {
			refs = append(refs, region.BucketRef{Key: k.key, Window: k.window, Bucket: k.bucket})
		}
	}
	n.rep.mu.Unlock()
	if len(refs) == 0 {
		return nil
	}
	return n.read(refs, func(t region.Total) bool { return !replicaOf(t.Region, n.cfg.Region) })
}

// resendOpen sends this region's totals of every touched, unreconciled
// bucket, and of the reconciliations waiting for a retry, to the owners in
// each of regions: at once over UDP when they fit in a few packets (one
// one-way delay), and over TCP as a reconciliation retried until it lands.
func (n *Node) resendOpen(regions map[string]bool) {
	waiting := map[string][]region.Total{}
	n.pendMu.Lock()
	now := time.Now()
	for _, p := range n.pending {
		if regions[p.region] {
			p.next = now
			p.backoff = n.cfg.FlushInterval
			waiting[p.region] = append(waiting[p.region], p.totals...)
		}
	}
	n.pendMu.Unlock()
	var refs []region.BucketRef
	n.mu.Lock()
	for _, set := range n.touched {
		for k := range set {
			refs = append(refs, region.BucketRef{Key: k.key, Window: k.window, Bucket: k.bucket})
		}
	}
	n.mu.Unlock()
	var open []region.Total
	if len(refs) > 0 {
		open = n.read(refs, func(t region.Total) bool { return replicaOf(t.Region, n.cfg.Region) })
	}
	relayed := n.relayed()
	// Closed buckets whose reconciliation is still trying (a dial to a
	// region cut off takes a round trip to fail) are in neither list.
	recent := n.recentTotals(probeBuckets)
	v := n.view()
	n.log.Debug("re-sending open totals", "open", len(open), "waiting", len(waiting), "regions", len(regions))
	for reg := range regions {
		if fast := append(append(append([]region.Total(nil), open...), waiting[reg]...), recent...); len(fast) > 0 {
			for dest, group := range route(fast, v.remote[reg]) {
				n.sendAsyncFor(KindReconcile, cost{reason: reasonRejoin}, dest, group)
			}
		}
		var rel []region.Total
		for _, t := range relayed {
			if !replicaOf(t.Region, reg) {
				rel = append(rel, t)
			}
		}
		if len(rel) > 0 {
			for dest, group := range route(rel, v.remote[reg]) {
				n.sendAsyncFor(KindRelay, cost{reason: reasonRelay}, dest, group)
			}
		}
	}
	n.met.resent(len(open))
	// The reliable sends take a TCP round trip or more: in the background,
	// so that the next member to come alive is served at once.
	n.sends.Add(1)
	go func() {
		defer n.sends.Done()
		n.retryPending()
		if len(open) == 0 {
			return
		}
		var deadline time.Time
		for _, t := range open {
			if d := n.expiry(t.Window, t.Bucket); d.After(deadline) {
				deadline = d
			}
		}
		for reg := range regions {
			// Queued for a retry when a send fails, as a reconciliation.
			n.sendReconcile(reg, v.remote[reg], open, deadline)
		}
	}()
}
