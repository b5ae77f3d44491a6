package gossip

import (
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
)

// Replication by urgency. A dirty total whose decision said its limit and
// estimate (region.Total's Limit and Estimate) goes to the other regions
// at the first flush at which one of these holds:
//
//   - urgent: its hits not yet sent reach the allowance
//
//     allowance = min(floor((limit/2 - estimate) / R), floor(limit / (20 R)))
//                 (0 when estimate >= limit/2)
//
//     where R is the number of counting replicas in the pool (this one
//     included: one per region that shares a store, one per node that
//     decides from its own). A key at or above half its limit has
//     allowance 0: it goes at every flush in which it changed, as every
//     total did before, and is echoed at the next flush;
//   - periodic: its oldest unsent hit is Config.MaxStaleness old. Such a
//     send is echoed once, MaxStaleness later, unless the key has changed
//     since (its next send, due within MaxStaleness, repairs a loss);
//   - the bucket closed: the reconciliation sends the bucket's final
//     totals (reconcile.go), and a dirty total the reconciliation does not
//     cover goes at once;
//   - the dirty set is three quarters full (Config.MaxDirty): every
//     waiting total goes, so that new keys find room.
//
// A total without a limit, or any total with MaxStaleness negative, goes
// at the next flush. See docs/design.md for why a region that keeps its
// unsent hits below its allowance cannot let the true count pass the limit
// while any region sees the key below half of it.

// Key classes for the staleness metric.
const (
	classNear = "near" // allowance 0: at or above half the limit, or no limit given
	classFar  = "far"  // below half the limit
)

// keyState is what the policy keeps of one region's total of an open
// bucket, under Node.mu.
type keyState struct {
	sent   tally     // the total last sent (zero: none yet, or forgotten)
	since  time.Time // when the oldest hit not yet sent was recorded; zero: none
	limit  uint64    // the newest decision's limit (0: none given)
	est    uint64    // the estimate it admitted at
	echoAt time.Time // when the last periodic send is sent once more; zero: none
	// heard is the newest count merged from each other region for the
	// bucket, and bump what they grew by since the newest decision: the
	// estimate is taken as est + bump (see heardTotals).
	heard map[string]uint64
	bump  uint64
}

// timed is a total due for something at a time.
type timed struct {
	dk dref
	at time.Time
}

// urgency is the policy's state, under Node.mu.
type urgency struct {
	state   map[dref]*keyState
	ends    map[int64][]dref  // bucket end (Unix ms) -> states, forgotten when it closes
	changed map[dref]struct{} // dirtied since the last flush: urgency to judge again
	stale   []timed           // in order: since + MaxStaleness of each unsent period
	echoes  []timed           // in order: periodic sends to echo
	closed  closedOwn         // this region's totals of closed buckets that still count
}

// closedOwn keeps this region's latest totals of the buckets that closed
// less than a window ago, which every estimate still reads, for a repair:
// the store may lose them while the other regions' stores that hold them
// lose them too (two Redis restarted within a round trip), and the node
// then restores them itself (ownTotals).
type closedOwn struct {
	tot   map[dref]tally
	until map[int64][]dref // when the bucket stops counting (Unix ms) -> totals
}

// keep records t as the latest total of dk, a bucket of this region that
// counts until untilMs. Under n.mu; at most bound totals are kept, and
// keep reports false when it dropped t for want of room.
func (c *closedOwn) keep(dk dref, t tally, untilMs int64, bound int) bool {
	if t.n == 0 {
		return true
	}
	if old, ok := c.tot[dk]; ok {
		old.mergeTally(dk.window, t)
		c.tot[dk] = old
		return true
	}
	if len(c.tot) >= bound {
		return false
	}
	if c.tot == nil {
		c.tot, c.until = map[dref]tally{}, map[int64][]dref{}
	}
	c.tot[dk] = t
	c.until[untilMs] = append(c.until[untilMs], dk)
	return true
}

// forget drops the totals of the buckets that no longer count at nowMs.
func (c *closedOwn) forget(nowMs int64) {
	for until, dks := range c.until {
		if until > nowMs {
			continue
		}
		for _, dk := range dks {
			delete(c.tot, dk)
		}
		delete(c.until, until)
	}
}

// countsUntil returns when bucket dk, which ends at endMs, stops counting
// in an estimate: one window after its end.
func countsUntil(dk dref, endMs int64) int64 {
	return endMs + max(dk.window, -dk.window).Milliseconds()
}

// hiddenBudget divides the limit into what the whole pool may hold unsent
// for one key: at most limit/hiddenBudget, so that a region that cannot see
// those hits (it takes them for idle regions' and bursts into what it
// thinks is free) admits at most that much on top of the limit.
const hiddenBudget = 20

// allowance is how many hits a replica may hold unsent for a key of limit
// admitted at estimate, with replicas counting replicas in the pool:
// (limit/2 - estimate)/replicas, and at most its part of the pool's
// budget, limit/(hiddenBudget*replicas).
func allowance(limit, estimate uint64, replicas int) uint64 {
	if 2*estimate >= limit || replicas < 1 {
		return 0
	}
	return min((limit-2*estimate)/(2*uint64(replicas)), limit/(hiddenBudget*uint64(replicas)))
}

// replicas is the number of counting replicas in v, this node's included:
// a region whose members share a store counts once, a member that decides
// from a store of its own counts alone.
func (v view) replicas() int {
	r := 1
	for _, ms := range v.remote {
		shared := false
		for _, m := range ms {
			switch {
			case m.ownStore:
				r++
			case !shared:
				shared = true
				r++
			}
		}
	}
	return r
}

// note records a dirtied total's urgency: its limit and estimate, and when
// its oldest unsent hit came. Under n.mu.
func (n *Node) note(dk dref, t region.Total, end int64, now time.Time) {
	u := &n.urg
	if _, ok := n.dirty[dk]; ok {
		if u.changed == nil {
			u.changed = map[dref]struct{}{}
		}
		u.changed[dk] = struct{}{}
	}
	s := u.state[dk]
	if s == nil {
		if t.Limit == 0 || n.cfg.MaxStaleness < 0 || len(u.state) >= n.cfg.MaxDirty {
			return // no state: the total goes at the next flush
		}
		if u.state == nil {
			u.state, u.ends = map[dref]*keyState{}, map[int64][]dref{}
		}
		s = &keyState{}
		u.state[dk] = s
		u.ends[end] = append(u.ends[end], dk)
	}
	s.limit, s.est, s.bump = t.Limit, t.Estimate, 0
	if s.since.IsZero() {
		s.since = now
		u.stale = append(u.stale, timed{dk, now.Add(n.cfg.MaxStaleness)})
	}
}

// flushOut is what one flush sends: the totals, why each goes (a reason of
// cost.go) and the staleness of each new one by key class.
type flushOut struct {
	totals []region.Total
	why    map[dref]string
	stale  map[string][]time.Duration
}

func (o *flushOut) add(dk dref, c tally, why string) {
	h := c.h
	if why == reasonPeriodic && dk.window > 0 {
		// A key far below its limit: its trail's fine granules decide
		// nothing yet, so it goes in merge spans (at most 64 marks, a
		// quarter of a fine trail's bytes); an urgent total carries
		// them all.
		h = h.Spans(dk.window.Milliseconds())
	}
	o.totals = append(o.totals, region.Total{Key: dk.key, Window: dk.window, Bucket: dk.bucket, Region: dk.region, Count: c.n, Trail: h})
	o.why[dk] = why
}

// due takes from the dirty totals those the policy sends at this flush
// (all of them when final), adds the echoes due, and forgets the state of
// closed buckets. replicas is the pool's count (view.replicas). Under n.mu.
func (n *Node) due(now time.Time, replicas int, final bool) flushOut {
	u := &n.urg
	out := flushOut{why: map[dref]string{}, stale: map[string][]time.Duration{}}
	sent := map[dref]tally{} // this flush's sends to echo at the next one
	judge := func(dk dref, stale bool) {
		if _, done := out.why[dk]; done {
			return
		}
		s := u.state[dk]
		c, ok := n.dirty[dk]
		if !ok {
			if s != nil { // dropped (MaxDirty): let its next hit start a new wait
				s.since = time.Time{}
			}
			return
		}
		why, class := reasonFlush, classNear
		if s != nil && s.limit > 0 && !final {
			if c.same(s.sent) { // nothing new since the last send
				delete(n.dirty, dk)
				s.since = time.Time{}
				return
			}
			// Both terms capped at the limit (at most 2^53): no overflow.
			a := allowance(s.limit, min(s.est, s.limit)+min(s.bump, s.limit), replicas)
			if a > 0 {
				class = classFar
			}
			switch {
			case c.n-min(c.n, s.sent.n) >= a:
				why = reasonUrgent
			case stale:
				why = reasonPeriodic
			default:
				return
			}
		}
		delete(n.dirty, dk)
		out.add(dk, c, why)
		if s != nil {
			if !s.since.IsZero() {
				out.stale[class] = append(out.stale[class], max(now.Sub(s.since), 0))
			}
			s.sent, s.since, s.echoAt = c, time.Time{}, time.Time{}
			if why == reasonPeriodic {
				s.echoAt = now.Add(n.cfg.MaxStaleness)
				u.echoes = append(u.echoes, timed{dk, s.echoAt})
				return
			}
		}
		sent[dk] = c
	}
	if final {
		for dk := range n.dirty {
			judge(dk, true)
		}
	}
	for dk := range u.changed {
		judge(dk, false)
	}
	clear(u.changed)
	i := 0
	for ; i < len(u.stale) && !u.stale[i].at.After(now); i++ {
		dk := u.stale[i].dk
		if s := u.state[dk]; s != nil && !s.since.IsZero() && !s.since.Add(n.cfg.MaxStaleness).After(now) {
			judge(dk, true)
		}
	}
	u.stale = u.stale[i:]
	// Under pressure (the dirty set three quarters full: more keys wait
	// than MaxDirty allows for), send what waits rather than drop new keys,
	// which could be near their limits.
	if len(n.dirty) > n.cfg.MaxDirty/4*3 {
		for dk := range n.dirty {
			judge(dk, true)
		}
	}
	// Echoes: the previous flush's sends once more, unless newer ones went,
	// so that a single lost packet is repaired one flush later; and the
	// periodic sends of MaxStaleness ago whose key has not changed since.
	for dk, c := range n.echo {
		if _, newer := out.why[dk]; !newer {
			out.add(dk, c, reasonEcho)
		}
	}
	n.echo = sent
	i = 0
	for ; i < len(u.echoes) && !u.echoes[i].at.After(now); i++ {
		e := u.echoes[i]
		s := u.state[e.dk]
		if s == nil || !s.echoAt.Equal(e.at) {
			continue
		}
		s.echoAt = time.Time{}
		// A key with unsent hits needs no echo: its next send, due within
		// MaxStaleness of its oldest unsent hit, repairs a loss.
		if _, newer := out.why[e.dk]; !newer && s.since.IsZero() {
			out.add(e.dk, s.sent, reasonEcho)
		}
	}
	u.echoes = u.echoes[i:]
	n.forgetClosed(now)
	return out
}

// forgetClosed drops the policy's state of the buckets that have closed,
// and their dirty totals that the reconciliation will send (the buckets
// this node touched); a dirty total it will not send stays dirty, without
// state, and goes at the next flush. It keeps this region's latest totals
// of those buckets in u.closed while they count. Under n.mu.
func (n *Node) forgetClosed(now time.Time) {
	u := &n.urg
	ms := now.UnixMilli()
	u.closed.forget(ms) // first, so that what stopped counting makes room
	for end, dks := range u.ends {
		if end > ms {
			continue
		}
		for _, dk := range dks {
			if s := u.state[dk]; s != nil && replicaOf(dk.region, n.cfg.Region) {
				t := s.sent
				if d, ok := n.dirty[dk]; ok {
					t.mergeTally(dk.window, d)
				}
				if !u.closed.keep(dk, t, countsUntil(dk, end), n.cfg.MaxDirty) {
					n.met.drop("closed_full")
				}
			}
			delete(u.state, dk)
			if _, ok := n.touched[end][dk.ref]; ok {
				delete(n.dirty, dk)
			} else if _, ok := n.dirty[dk]; ok {
				if u.changed == nil {
					u.changed = map[dref]struct{}{}
				}
				u.changed[dk] = struct{}{}
			}
		}
		delete(u.ends, end)
	}
}

// heardTotals raises the estimate of the buckets this node holds state of
// by what the other regions' merged totals grew by since its newest
// decision, and has a bucket whose unsent hits now reach the shrunken
// allowance judged at the next flush: a region that stopped deciding a
// key does not sit on its unsent hits while the others take the key
// towards its limit. The first count heard from a region counts whole
// (part of it may be in the estimate already): an estimate too high only
// sends sooner.
func (n *Node) heardTotals(totals []region.Total) {
	n.mu.Lock()
	defer n.mu.Unlock()
	u := &n.urg
	if len(u.state) == 0 {
		return
	}
	for _, t := range totals {
		dk := dref{ref{t.Key, t.Window, t.Bucket}, n.cfg.Region}
		s := u.state[dk]
		if s == nil || t.Region == n.cfg.Region {
			continue
		}
		if s.heard == nil {
			s.heard = map[string]uint64{}
		}
		old := s.heard[t.Region]
		if t.Count <= old {
			continue
		}
		s.heard[t.Region] = t.Count
		s.bump = min(s.bump+(t.Count-old), MaxCount) // counts are at most MaxCount
		if _, dirty := n.dirty[dk]; dirty {
			if u.changed == nil {
				u.changed = map[dref]struct{}{}
			}
			u.changed[dk] = struct{}{}
		}
	}
}
