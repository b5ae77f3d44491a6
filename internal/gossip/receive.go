package gossip

import (
	"context"
	"errors"
	"time"

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

// handle decodes one frame and merges its totals into the store in one call.
func (n *Node) handle(b []byte) {
	m, err := Decode(b)
	if err != nil {
		n.met.drop(dropReason(err))
		return
	}
	n.met.received(m.Kind, len(b))
	if m.Kind == KindTouch {
		if m.From == n.cfg.Region {
			n.remember(m.Totals)
		}
		return
	}
	remote := m.Totals[:0:0]
	now := n.cfg.Now()
	expired := 0
	for _, t := range m.Totals {
		switch {
		case t.Region == n.cfg.Region:
		case !now.Before(n.expiry(t.Window, t.Bucket)):
			expired++ // late: the bucket is gone from every estimate
		default:
			remote = append(remote, t)
		}
	}
	if expired > 0 {
		n.met.drop("expired")
	}
	if len(remote) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := n.store.Merge(ctx, remote)
		cancel()
		if err != nil {
			n.met.drop("store_error")
			n.log.Warn("merge remote totals", "from", m.From, "n", len(remote), "err", err)
			return
		}
		n.met.merged(len(remote))
	}
	if m.From != n.cfg.Region {
		n.ageMu.Lock()
		if m.Sent.After(n.newest[m.From]) {
			n.newest[m.From] = m.Sent
		}
		n.ageMu.Unlock()
	}
}

// remember adds buckets another node of this region touched to the
// reconciliation set, so that they are reconciled even if that node dies.
func (n *Node) remember(ts []region.Total) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range ts {
		k := ref{t.Key, t.Window, t.Bucket}
		due := (t.Bucket + 1) * t.Window.Milliseconds()
		set := n.touched[due]
		if set == nil {
			set = map[ref]struct{}{}
			n.touched[due] = set
		}
		if _, ok := set[k]; ok {
			continue
		}
		if n.nTouched >= n.cfg.MaxTouched {
			n.met.drop("touched_full")
			return
		}
		set[k] = struct{}{}
		n.nTouched++
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
