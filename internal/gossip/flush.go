package gossip

import (
	"fmt"
	"slices"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// maxReliableFrame is the largest frame sent over TCP; bigger batches are
// split.
const maxReliableFrame = 256 << 10

// maxUDPFrames is the most UDP packets one destination gets per flush;
// a larger batch goes over TCP instead.
const maxUDPFrames = 4

// Dirty records the local region's new total for a key's bucket, as returned
// by the decision (region.Result.Local). An empty t.Region means the local
// region; another region is the local store's fallback region (see
// region.Failover), whose totals replicate like any region's. t.Limit and
// t.Estimate, when set, say how urgent the total is (see urgency.go): a
// total without them goes out at the next flush. It never blocks on I/O:
// it updates bounded maps under a short lock. When MaxDirty keys wait
// already, a new key is dropped and counted: a later total or the
// reconciliation repairs it.
func (n *Node) Dirty(t region.Total) {
	if t.Count == 0 || len(t.Key) == 0 {
		return
	}
	if len(t.Key) > MaxKeyLen || !validWindow(t.Window, t.Bucket) {
		n.met.drop("bad_total")
		return
	}
	if t.Region == "" {
		t.Region = n.cfg.Region
	}
	if len(t.Region) > MaxRegionLen {
		n.met.drop("bad_total")
		return
	}
	k := ref{t.Key, t.Window, t.Bucket}
	dk := dref{k, t.Region}
	_, due := window.BucketSpan(t.Window, t.Bucket)
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return
	}
	if t.Region == n.cfg.Region && n.lowerLocked(dk, t.Count) {
		n.suspectLoss()
	}
	if c, ok := n.dirty[dk]; ok {
		c.merge(t)
		n.dirty[dk] = c
	} else if len(n.dirty) >= n.cfg.MaxDirty {
		n.met.drop("dirty_full")
	} else {
		n.dirty[dk] = tally{t.Count, t.Trail}
	}
	n.note(dk, t, due, now)
	if added, _ := n.touchLocked(k, false); added && len(n.notice) < n.cfg.MaxDirty {
		n.notice[k] = t.Count
	}
}

// tally is a dirty total: a region's count of a bucket and its trail
// (region.Total's Count and Trail). Both only grow, so a newer total
// merges in by maximum (window.Trail.Merge).
type tally struct {
	n uint64
	h window.Trail
}

func (c *tally) merge(t region.Total) {
	c.n = max(c.n, t.Count)
	c.h.Merge(t.Trail, t.Window.Milliseconds())
}

// mergeTally merges o, a total of a bucket of window w, into c.
func (c *tally) mergeTally(w time.Duration, o tally) {
	c.merge(region.Total{Window: w, Count: o.n, Trail: o.h})
}

// same reports whether c and o are the same total.
func (c tally) same(o tally) bool { return c.n == o.n && slices.Equal(c.h, o.h) }

// flushLoop flushes the dirty totals every FlushInterval.
// It also announces a change of the store's mode (apart.go).
func (n *Node) flushLoop() {
	n.every(n.cfg.FlushInterval, func() {
		n.checkFallback()
		n.flush(false)
	})
}

// flush sends the dirty totals that are due (see urgency.go) to every
// other region, the echoes that are due, and the first touches to the
// local buddy. A final flush (from Close) sends every dirty total over TCP
// and waits for it, so that totals admitted before a graceful shutdown are
// not left to UDP.
func (n *Node) flush(final bool) {
	now := n.cfg.Now()
	v := n.view()
	n.mu.Lock()
	out := n.due(now, v.replicas(), final)
	var notice map[ref]uint64
	if len(n.notice) > 0 {
		notice, n.notice = n.notice, map[ref]uint64{}
	}
	n.mu.Unlock()
	n.met.observeStaleness(out.stale)
	if !final {
		n.sendDemand(now, v)
	}
	if len(out.totals) == 0 && len(notice) == 0 {
		return
	}
	if len(out.totals) > 0 {
		for _, ms := range v.remote {
			for dest, group := range route(out.totals, ms) {
				n.sendFor(final, KindFlush, mixCost(group, out.why), dest, group)
			}
		}
	}
	if len(notice) > 0 && len(v.local) > 0 {
		totals := n.totals(notice)
		for dest, group := range route(totals, v.local) {
			n.send(final, KindTouch, dest, group)
		}
	}
}

// send sends totals to dest: at once over TCP when reliable, else with
// sendAsyncFor.
func (n *Node) send(reliable bool, kind Kind, dest *member, totals []region.Total) {
	n.sendFor(reliable, kind, costOf(kind), dest, totals)
}

// sendFor is send, counting the bytes as sent for c.
func (n *Node) sendFor(reliable bool, kind Kind, c cost, dest *member, totals []region.Total) {
	if !reliable {
		n.sendAsyncFor(kind, c, dest, totals)
		return
	}
	if err := n.sendReliableFor(kind, c, dest, totals); err != nil {
		n.log.Warn("final flush", "to", dest.node.Name, "err", err)
	}
}

func (n *Node) totals(m map[ref]uint64) []region.Total {
	out := make([]region.Total, 0, len(m))
	for k, c := range m {
		out = append(out, region.Total{Key: k.key, Window: k.window, Bucket: k.bucket, Region: n.cfg.Region, Count: c})
	}
	return out
}

// sendAsyncFor sends totals to dest without blocking the caller for long:
// over UDP when they fit in a few packets, otherwise over TCP on a bounded
// set of goroutines (a batch that finds them all busy is dropped and
// counted). The bytes count as sent for c.
func (n *Node) sendAsyncFor(kind Kind, c cost, dest *member, totals []region.Total) {
	frames, err := n.encodeFor(dest, kind, n.cfg.Now(), totals, n.cfg.UDPBudget)
	if err != nil {
		n.met.drop("encode")
		n.log.Warn("encode batch", "err", err)
		return
	}
	udp := len(frames) <= maxUDPFrames
	for _, f := range frames {
		udp = udp && len(f) <= n.cfg.UDPBudget
	}
	if udp {
		for _, f := range frames {
			if err := n.sendPacket(dest, f); err != nil {
				n.met.drop("send_error")
				continue
			}
			n.met.sentFor(kind, c, len(f))
		}
		return
	}
	select {
	case n.sendSem <- struct{}{}:
	default:
		n.met.drop("send_busy")
		return
	}
	n.sends.Add(1)
	go func() {
		defer n.sends.Done()
		defer func() { <-n.sendSem }()
		if err := n.sendReliableFor(kind, c, dest, totals); err != nil {
			n.log.Debug("reliable send", "to", dest.node.Name, "err", err)
		}
	}()
}

// sendReliable sends totals to dest over TCP, in frames of at most 256 KiB.
func (n *Node) sendReliable(kind Kind, dest *member, totals []region.Total) error {
	return n.sendReliableFor(kind, costOf(kind), dest, totals)
}

// sendReliableFor is sendReliable, counting the bytes as sent for c.
func (n *Node) sendReliableFor(kind Kind, c cost, dest *member, totals []region.Total) error {
	frames, err := n.encodeFor(dest, kind, n.cfg.Now(), totals, maxReliableFrame)
	if err != nil {
		n.met.drop("encode")
		return err
	}
	for _, f := range frames {
		if err := n.sendStream(dest, f); err != nil {
			n.met.drop("send_error")
			return fmt.Errorf("send %s to %s: %w", kind, dest.node.Name, err)
		}
		n.met.sentFor(kind, c, len(f))
	}
	return nil
}

// view is the live membership, grouped for routing.
type view struct {
	// remote maps a region to its alive members, the destinations of
	// totals; it also maps the local region to its alive members that
	// count apart (a store of their own, see apart.go) or, when this node
	// counts apart, to all of them.
	remote map[string][]*member
	local  []*member // alive members of the local region but self
}

func (n *Node) view() view {
	v := view{remote: map[string][]*member{}}
	n.memMu.RLock()
	defer n.memMu.RUnlock()
	for _, m := range n.members {
		if m.state != "alive" || m.isLocal || m.region == "" {
			continue
		}
		if m.region == n.cfg.Region {
			v.local = append(v.local, m)
			if n.apartFrom(m) {
				v.remote[m.region] = append(v.remote[m.region], m)
			}
		} else {
			v.remote[m.region] = append(v.remote[m.region], m)
		}
	}
	return v
}

// encodeFor encodes totals as this node's frames to dest: with coarse
// trails when dest reads them, else gathered into spans.
func (n *Node) encodeFor(dest *member, kind Kind, sent time.Time, totals []region.Total, budget int) ([][]byte, error) {
	return encodeFrames(kind, sent, n.self(), totals, budget, dest.fineTrails)
}

// allFine reports whether every member this node sees alive reads coarse
// trails (flagFineTrails).
func (n *Node) allFine() bool {
	n.memMu.RLock()
	defer n.memMu.RUnlock()
	for _, m := range n.members {
		if m.state == "alive" && !m.isLocal && !m.fineTrails {
			return false
		}
	}
	return true
}
