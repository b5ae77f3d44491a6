package gossip

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rlcluster/rlcluster/internal/region"
)

func (n *Node) receiveLoop() {
	for {
		select {
		case <-n.stop:
			return
		case b := <-n.inbox:
			n.inboxB.Add(-int64(len(b)))
			n.handle(b)
		}
	}
}

// enqueue queues a received frame for the merge loop without blocking.
func (n *Node) enqueue(b []byte) {
	if len(b) > MaxMessage {
		n.met.drop("oversized")
		return
	}
	if n.inboxB.Add(int64(len(b))) > int64(n.cfg.InboxBytes) {
		n.inboxB.Add(-int64(len(b)))
		n.met.drop("queue_full")
		return
	}
	c := append([]byte(nil), b...)
	select {
	case n.inbox <- c:
	default:
		n.inboxB.Add(-int64(len(b)))
		n.met.drop("queue_full")
	}
}

// handle decodes one frame, checks it against its sender (see check) and
// merges what it may say into the store in one call. A frame that fails a
// check is dropped whole and counted under the check's reason.
func (n *Node) handle(b []byte) {
	m, err := Decode(b)
	if err != nil {
		n.met.drop(dropReason(err))
		return
	}
	sender, ok := n.frameSender(m)
	if !ok {
		n.met.drop("not_member")
		return
	}
	if reason := n.unreplayed(m, sender); reason != "" {
		n.met.drop(reason)
		return
	}
	n.met.received(m.Kind, len(b))
	now := n.cfg.Now()
	if reason := n.check(now, m, sender); reason != "" {
		n.met.drop(reason)
		n.log.Debug("dropped frame", "reason", reason, "from", m.Node, "kind", m.Kind.String())
		return
	}
	if m.Kind != KindState { // a state frame has no sequence: no proof of life
		n.noteFrame(sender, n.heardFrom(sender, now), now)
	}
	if m.Kind == KindUnheard {
		n.noteUnheard(sender, m.Unheard, now)
		return
	}
	if m.Kind == KindDemand {
		n.learnDemand(now, m)
		return
	}
	if m.Kind == KindTouch { // check let through touches of this region only
		n.remember(now, m.Totals)
		return
	}
	switch m.Kind {
	case KindRepair:
		n.answerRepair(sender)
		return
	case KindRepaired:
		n.restore(now, m, sender)
		return
	case KindRejoin:
		n.rejoined(sender)
		return
	}
	if m.From == n.cfg.Region && !n.apartFrom(sender) {
		return // push-pull state of a node sharing this node's store
	}
	n.mergeRemote(now, m, m.Totals)
}

// mergeRemote max-merges into the store the totals of m's sender's region
// (checked by check) that count: not zero, not expired, and within the
// sender's region's replica names (admitReplica). Called only from the
// receive loop.
func (n *Node) mergeRemote(now time.Time, m Message, totals []region.Total) {
	remote := totals[:0:0]
	expired, full, zero := 0, 0, 0
	var heard map[string]bool
	if m.Kind == KindRelay {
		heard = n.heardWithin(now, n.cfg.Suspicion)
	}
	for _, t := range totals {
		switch {
		case t.Count == 0:
			zero++ // nothing to merge: it takes no region slot
		case heard[baseRegion(t.Region)]:
			// Relayed, of a region this node hears itself: what it
			// admitted comes from it, and a relay's word is needed only
			// where its own cannot come.
		case !now.Before(n.expiry(t.Window, t.Bucket)):
			expired++ // late: the bucket is gone from every estimate
		case !n.admitReplica(now, relayedFrom(m, t), t):
			full++
		default:
			remote = append(remote, t)
		}
	}
	if expired > 0 {
		n.met.drop("expired")
	}
	if zero > 0 {
		n.met.drop("zero_count")
	}
	if full > 0 {
		n.met.drop("replicas_full")
	}
	if len(remote) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := n.store.Merge(ctx, remote)
		cancel()
		if err != nil {
			n.met.drop("store_error")
			n.logNet(slog.LevelWarn, "merge remote totals", "from", m.From, "n", len(remote), "err", err)
			return
		}
		n.met.merged(len(remote))
		n.hear(now, remote)
		n.heardTotals(remote)
	}
	if m.From == n.cfg.Region {
		return // a peer of this region: no remote freshness
	}
	sent := m.Sent
	if sent.After(now) {
		sent = now // a clock ahead must not make a region look fresh forever
	}
	n.ageMu.Lock()
	if sent.After(n.newest[m.From]) {
		n.newest[m.From] = sent
	}
	n.ageMu.Unlock()
}

// heardWithin returns the regions heard from within d of now.
func (n *Node) heardWithin(now time.Time, d time.Duration) map[string]bool {
	out := map[string]bool{}
	n.freshMu.Lock()
	defer n.freshMu.Unlock()
	for r, at := range n.fresh.heard {
		if now.Sub(at) <= d {
			out[r] = true
		}
	}
	return out
}

// relayedFrom is the region whose replica names t counts against: the
// sender's, or in a relay the region t names.
func relayedFrom(m Message, t region.Total) string {
	if m.Kind == KindRelay {
		return baseRegion(t.Region)
	}
	return m.From
}

// check returns why a decoded frame from a live member must be dropped, or
// "" when it may be merged:
//
//   - foreign_region: a total names a region other than the sender's own
//     (the one it joined with) or a replica of it (region~id, see
//     replicaOf); a touch comes from another region.
//   - old_bucket: a bucket starts before the Unix epoch.
//   - future_bucket: a bucket starts later than now plus one window. A
//     bucket that has expired is not a reason to drop the frame (a late
//     total is normal); handle skips such totals.
//   - foreign_kind: a flush or reconciliation sent by a node of this
//     region while neither counts apart (they share a store: nothing to
//     merge; see apart.go); a repair answer ([KindRepaired]) that this node
//     did not ask for; a repair or rejoin request that carries totals.
//   - foreign_region: as above; and a repair answer whose totals are not
//     of this node's region, the sender's, or their replicas; and a relay
//     ([KindRelay]) with a total of either.
//   - unknown_region: a relay with a total of a region no member of the
//     pool belongs to (see checkRelay).
//   - foreign_kind: also a relay from this node's own region.
//   - bad_demand: a demand frame ([KindDemand]) with a total of another
//     region than the sender's (a replica's too), of a calendar bucket or
//     with a trail.
//
// Decode has checked the rest: names are UTF-8 within MaxRegionLen, keys
// within MaxKeyLen, windows within window.MaxWindow, counts at most
// MaxCount, at most MaxRegions regions per frame.
func (n *Node) check(now time.Time, m Message, sender *member) string {
	own := m.From == n.cfg.Region
	peers := own && n.apartFrom(sender) // one of them counts apart
	reports := m.From                   // whose totals m may carry
	switch {
	case m.Kind == KindTouch && !own:
		return "foreign_region"
	case m.Kind == KindUnheard && own:
		return "foreign_kind" // a region's own nodes share its view
	case own && !peers && (m.Kind == KindFlush || m.Kind == KindReconcile):
		return "foreign_kind"
	case (m.Kind == KindRepair || m.Kind == KindRejoin) && len(m.Totals) > 0:
		return "foreign_kind" // requests carry no totals
	case m.Kind == KindDemand:
		if reason := checkDemand(m); reason != "" {
			return reason
		}
	case m.Kind == KindRelay:
		if own {
			return "foreign_kind" // a region's own nodes share its view
		}
		if reason := n.checkRelay(m); reason != "" {
			return reason
		}
		reports = "" // checked by checkRelay
	case m.Kind == KindRepaired:
		if !n.repairOpen(now) {
			return "foreign_kind"
		}
		if !n.repairAsked(sender) {
			return "unasked"
		}
		reports = n.cfg.Region // a peer echoes this region's own totals
	}
	nowMs := now.UnixMilli()
	for _, t := range m.Totals {
		// A repair answer carries the answerer's own region's totals too.
		if m.Kind != KindRelay && !replicaOf(t.Region, reports) && (m.Kind != KindRepaired || !replicaOf(t.Region, m.From)) {
			return "foreign_region"
		}
		wm := t.Window.Milliseconds()
		if wm < 0 {
			// A calendar bucket (Decode checked its start and length):
			// it starts no later than now + its length.
			if t.Bucket > nowMs-wm {
				return "future_bucket"
			}
			continue
		}
		// Start no later than now + one window: b <= floor(now/W) + 1.
		if t.Bucket > floorDiv(nowMs, wm)+1 {
			return "future_bucket"
		}
		// No bucket starts before the epoch; with both bounds, (b+1)*W
		// (a bucket's end, its expiry) cannot overflow.
		if t.Bucket < 0 {
			return "old_bucket"
		}
	}
	return ""
}

// checkRelay returns why a relay frame m must be dropped, or "": each of
// its totals names a member region of the pool (alive or failed, not one
// that left or was never heard of), or one of its replicas, other than
// the receiver's region and the sender's, whose totals come only from
// themselves (a repair for the first, a flush or reconciliation for the
// second).
func (n *Node) checkRelay(m Message) string {
	known := map[string]bool{}
	n.memMu.RLock()
	for _, mb := range n.members {
		if mb.state != "left" {
			known[mb.region] = true
		}
	}
	n.memMu.RUnlock()
	for _, t := range m.Totals {
		reg := baseRegion(t.Region)
		switch {
		case reg == n.cfg.Region || reg == m.From:
			return "foreign_region"
		case !known[reg] || !replicaOf(t.Region, reg):
			return "unknown_region"
		}
	}
	return ""
}

// baseRegion is the region a total's region name counts for: the name
// itself, or reg for a replica's reg~id.
func baseRegion(name string) string {
	reg, _, _ := strings.Cut(name, "~")
	return reg
}

// floorDiv returns floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// validRegion reports whether s may name a member's region: 1 to
// region.MaxReplicaOf bytes of valid UTF-8, so that its replicas' names
// (s~id, at most MaxRegionLen bytes) name it whole.
func validRegion(s string) bool {
	return len(s) > 0 && len(s) <= region.MaxReplicaOf && utf8.ValidString(s)
}

// replicaOf reports whether name is the region reg itself or one of its
// replicas, exactly: reg + "~" + the 6 hex digits of a replica's id
// (region.IsReplica). A member reports only these names: its region's.
func replicaOf(name, reg string) bool {
	return name == reg || region.IsReplica(name, reg)
}

// admitReplica reports whether a total of region reg (the sender's) may be
// merged as far as its replica name goes: the region itself always; a
// replica name already admitted; a new one while fewer than MaxReplicas of
// reg's replica names have buckets that have not expired. So no bucket
// ever holds more than 1 + MaxReplicas entries per member region. Called
// only from the receive loop.
func (n *Node) admitReplica(now time.Time, reg string, t region.Total) bool {
	if t.Region == reg {
		return true
	}
	exp := n.expiry(t.Window, t.Bucket)
	set := n.replicas[reg]
	if set == nil {
		set = map[string]time.Time{}
		n.replicas[reg] = set
	}
	if e, ok := set[t.Region]; ok {
		if exp.After(e) {
			set[t.Region] = exp
		}
		return true
	}
	if len(set) >= n.cfg.MaxReplicas {
		for name, e := range set {
			if !now.Before(e) {
				delete(set, name)
			}
		}
		if len(set) >= n.cfg.MaxReplicas {
			return false
		}
	}
	set[t.Region] = exp
	return true
}

// remember adds buckets another node of this region touched to the
// reconciliation set, so that they are reconciled even if that node dies.
// Buckets that have already expired are skipped: there is nothing left to
// reconcile.
func (n *Node) remember(now time.Time, ts []region.Total) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range ts {
		if !now.Before(n.expiry(t.Window, t.Bucket)) {
			continue
		}
		if _, full := n.touchLocked(ref{t.Key, t.Window, t.Bucket}, false); full {
			return
		}
	}
}

func dropReason(err error) string {
	switch {
	case errors.Is(err, ErrOversized):
		return "oversized"
	case errors.Is(err, ErrVersion):
		return "version"
	case errors.Is(err, ErrKind):
		return "kind"
	}
	return "malformed"
}
