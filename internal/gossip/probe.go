package gossip

import (
	"log/slog"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
)

// Healing without waiting for the failure detector.
//
// memberlist notices that a partition healed only when a probe, a gossip
// message or a reconnect gets through and the news spreads, several
// gossip intervals after the link heals. Replication does not wait for
// it:
//
//   - Probes. Every flush interval, a node sends each silent member
//     of another region (one memberlist holds failed, for its first minute
//     gone, or one this node has heard nothing from for Config.Suspicion)
//     its own region's totals of every open bucket it touched
//     and of the reconciliations waiting for or just sent to that member's
//     region, over UDP, when they fit in maxUDPFrames packets per region.
//     Lost while the partition lasts, the first one to cross after the
//     heal carries every total the other side lacks: agreement within one
//     flush interval plus one one-way delay after the heal, under the
//     target of two flush intervals plus the one-way delay
//     (TestSimHealAgreement asserts it on the exact clock). Bounded: at
//     most maxUDPFrames packets per silent region and probeMembers members
//     per probe, at most probeBuckets buckets read from the store per
//     probe, and only while some member is silent.
//   - Heartbeats go to failed members too (see heartbeat), every
//     heartbeat interval for a member's first minute gone, every tenth
//     one after that, so that a longer split is noticed as soon as it
//     heals.
//   - The first authenticated frame from a member memberlist holds failed
//     makes it alive again for replication (revive): it is routed to, and
//     the open totals are re-sent to its region and it is told to do the
//     same (KindRejoin), at once. The first frame from a member silent for
//     three heartbeat intervals re-sends the open totals to its region
//     too. Both are rate-limited to once a second per member or region; a
//     revived member that goes silent for Config.Suspicion is failed again.
//     Only frames that pass every check count (handle calls noteFrame after
//     check), so a stranger cannot trigger anything, and a member gets at
//     most one re-send a second in return for its frames.

// Probe bounds.
const (
	// probeFor is how long after memberlist declares a member failed it
	// gets probes, and heartbeats every heartbeat interval.
	probeFor = time.Minute
	// probeMembers is the most members probed with totals at once (the
	// most recently silent first).
	probeMembers = 16
	// probeBuckets is the most touched buckets whose totals a probe
	// carries; with more, probes stay empty and the re-send on the first
	// frame after the heal (one round trip later) does the work.
	probeBuckets = 256
	// slowBeat: a member failed for longer than probeFor gets every
	// slowBeat-th heartbeat.
	slowBeat = 10
)

// silentAfter is how long a member may go unheard before it counts as
// silent: three heartbeat intervals.
func (n *Node) silentAfter() time.Duration { return 3 * n.cfg.HeartbeatInterval }

// replicates reports whether m is a member totals go to: one of another
// region, or one of this region when either counts apart (apart.go).
// Called with memMu held.
func (n *Node) replicates(m *member) bool {
	if m.isLocal || m.region == "" {
		return false
	}
	return m.region != n.cfg.Region || n.apartFrom(m)
}

// failedMembers returns the members totals go to that memberlist holds
// failed (not left): those failed for less than probeFor, and, when old,
// those failed longer too. Sorted most recently failed first.
func (n *Node) failedMembers(now time.Time, old bool) []*member {
	var out []*member
	n.memMu.RLock()
	defer n.memMu.RUnlock()
	for _, m := range n.members {
		if n.replicates(m) && m.state == "dead" && (old || now.Sub(m.since) < probeFor) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].since.After(out[j].since) })
	return out
}

// silentMembers returns, by region, the members to probe: those failed for
// less than probeFor (but not those of a region another member of which,
// sharing its store, was heard from within Config.Suspicion), and alive
// ones unheard for Config.Suspicion (whose frames came before), at most
// probeMembers, the most recently failed first.
func (n *Node) silentMembers(now time.Time) map[string][]*member {
	failed := n.failedMembers(now, false)
	clock := n.cfg.Now()
	heard := n.heardNodes()
	var ms []*member
	fresh := map[string]bool{} // regions with a shared-store member heard within Suspicion
	n.memMu.RLock()
	for _, m := range n.members {
		if !n.replicates(m) || m.state != "alive" {
			continue
		}
		switch h, ok := heard[m.node.Name]; {
		case ok && clock.Sub(h) > n.cfg.Suspicion:
			ms = append(ms, m)
		case ok && !m.ownStore:
			fresh[m.region] = true
		}
	}
	n.memMu.RUnlock()
	// A failed member of a region that is heard from through another
	// member (a crashed node) needs no probe: that member gets the totals.
	failed = slices.DeleteFunc(failed, func(m *member) bool { return !m.ownStore && fresh[m.region] })
	ms = append(failed, ms...)
	out := map[string][]*member{}
	for _, m := range ms[:min(len(ms), probeMembers)] {
		out[m.region] = append(out[m.region], m)
	}
	return out
}

// probeLoop probes the silent members every flush interval.
func (n *Node) probeLoop() { n.every(n.cfg.FlushInterval, n.probe) }

// probe fails again the revived members that went silent and sends each
// silent member its region's share of this region's open and waiting
// totals (see the comment at the top of this file).
func (n *Node) probe() {
	n.unrevive()
	targets := n.silentMembers(time.Now())
	if len(targets) == 0 {
		return
	}
	var refs []region.BucketRef
	n.mu.Lock()
	if n.nTouched <= probeBuckets {
		for _, set := range n.touched {
			for k := range set {
				refs = append(refs, region.BucketRef{Key: k.key, Window: k.window, Bucket: k.bucket})
			}
		}
	}
	n.mu.Unlock()
	waiting := map[string][]region.Total{}
	left := probeBuckets - len(refs)
	n.pendMu.Lock()
	for _, p := range n.pending {
		if _, ok := targets[p.region]; ok && len(p.totals) <= left {
			waiting[p.region] = append(waiting[p.region], p.totals...)
			left -= len(p.totals)
		}
	}
	n.pendMu.Unlock()
	var open []region.Total
	if len(refs) > 0 {
		open = n.read(refs, func(t region.Total) bool { return replicaOf(t.Region, n.cfg.Region) })
	}
	// The newest reconciled totals: those whose reconciliation is still
	// trying (a dial takes a round trip to fail) are in no other list.
	open = append(open, n.recentTotals(max(left, 0))...)
	now := n.cfg.Now()
	for reg, ms := range targets {
		totals := append(append([]region.Total(nil), open...), waiting[reg]...)
		if len(totals) == 0 {
			continue
		}
		type send struct {
			dest   *member
			frames [][]byte
		}
		var sends []send
		packets := 0
		for dest, group := range route(totals, ms) {
			frames, err := n.encodeFor(dest, KindFlush, now, group, n.cfg.UDPBudget)
			if err != nil {
				n.met.drop("encode")
				continue
			}
			sends = append(sends, send{dest, frames})
			packets += len(frames)
		}
		if packets > maxUDPFrames {
			continue // too many for a probe: the re-send on the first frame after the heal carries them
		}
		for _, s := range sends {
			for _, f := range s.frames {
				if err := n.sendPacket(s.dest, f); err != nil {
					n.met.drop("send_error")
					continue
				}
				n.met.sentFor(KindFlush, cost{reason: reasonRejoin}, len(f))
			}
		}
	}
}

// noteFrame is called by handle for every frame that passed its checks,
// with when its sender s was heard from before (zero: never): a frame
// from a member memberlist holds failed revives it, and the first from a
// member silent for silentAfter re-sends the open totals to its region.
// It never blocks.
func (n *Node) noteFrame(s *member, prev, now time.Time) {
	n.memMu.RLock()
	dead := s.state == "dead"
	n.memMu.RUnlock()
	if dead {
		n.revive(s)
		return
	}
	if !prev.IsZero() && now.Sub(prev) > n.silentAfter() && n.allow("silent\x00"+s.region, now) {
		n.queueJoined(s, false)
	}
}

// allow reports whether the action named key may run at now: at most once
// every answerEvery.
func (n *Node) allow(key string, now time.Time) bool {
	n.rep.mu.Lock()
	defer n.rep.mu.Unlock()
	if at, ok := n.rep.answered[key]; ok && now.Sub(at) < answerEvery {
		return false
	}
	n.rep.answered[key] = now
	return true
}

// revive makes s, a member memberlist holds failed whose authenticated
// frame just arrived, alive for replication until memberlist agrees (or it
// goes silent for Config.Suspicion): the node routes totals to it again,
// re-sends its open totals to s's region and tells s to do the same, at
// most once a second per member.
func (n *Node) revive(s *member) {
	now := n.cfg.Now()
	n.memMu.Lock()
	m := n.members[s.node.Name]
	ok := m != nil && m.state == "dead" && m.token == s.token
	if ok {
		m.state, m.heardOnly, m.since = "alive", true, time.Now()
	}
	n.memMu.Unlock()
	if !ok {
		return
	}
	n.logNet(slog.LevelInfo, "member heard from again before the failure detector saw it", "member", m.node.Name, "member_region", m.region)
	if n.allow("revive\x00"+m.node.Name, now) {
		n.queueJoined(m, true)
	}
}

// unrevive fails again the revived members (see revive) that memberlist
// still holds failed and that sent nothing for Config.Suspicion.
func (n *Node) unrevive() {
	clock := n.cfg.Now()
	heard := n.heardNodes()
	n.memMu.Lock()
	defer n.memMu.Unlock()
	for _, m := range n.members {
		if m.heardOnly && clock.Sub(heard[m.node.Name]) > n.cfg.Suspicion {
			m.state, m.heardOnly, m.since = "dead", false, time.Now()
		}
	}
}

// recentTotals returns up to limit of the newest recently reconciled
// totals (the push-pull ring) of buckets that have not expired.
func (n *Node) recentTotals(limit int) []region.Total {
	now := n.cfg.Now()
	n.stateMu.Lock()
	defer n.stateMu.Unlock()
	var out []region.Total
	for i := 0; i < n.recent.len() && len(out) < limit; i++ {
		t := n.recent.newest(i)
		if now.Before(n.expiry(t.Window, t.Bucket)) {
			out = append(out, t)
		}
	}
	return out
}

// heardNodes returns a copy of when each member was last heard from.
func (n *Node) heardNodes() map[string]time.Time {
	n.freshMu.Lock()
	defer n.freshMu.Unlock()
	return maps.Clone(n.fresh.node)
}
