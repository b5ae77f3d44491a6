package gossip

import (
	"time"
)

// Counting apart.
//
// A member counts apart when it decides from a store of its own rather
// than its region's shared one: always with Config.OwnStore (the in-memory
// store), and for a while when its shared store (Redis) is unavailable and
// it decides from its in-memory fallback (region.Failover under the local
// policy, counting under a fallback region of its own, region~id). A
// member that counts apart announces it in its metadata (flagOwnStore),
// and then
//
//   - every other member sends it every total, not only those of the keys
//     it owns in its region (route), so that it decides on the other
//     regions' live counts, not on the copies its fallback held when its
//     Redis went away;
//   - the members of its own region exchange totals with it, in both
//     directions, as with another region: it learns what its region's
//     other nodes admit (on Redis or on fallbacks of their own), and they
//     learn (and their Redis holds) what it admits;
//   - when a member starts counting apart, the others send it their open
//     totals at once (memberUp), as to a member come back from a split.
//
// Without this a region of N nodes whose Redis is down decides on N
// separate fallbacks that see neither each other nor, but on the key's
// owner, the other regions' counts: the burst guard takes the others for
// idle, and the region admits up to about N times the limit.

// Fallbacker is implemented by a store that may, for a while, decide from
// an in-memory fallback of its own instead of its region's shared store:
// OnFallback reports whether it does now. region.Failover and region.Stack
// implement it. It must not block.
type Fallbacker interface {
	OnFallback() bool
}

// apart reports whether this node counts apart now: Config.OwnStore, or
// its store on its fallback as last announced.
func (n *Node) apart() bool { return n.cfg.OwnStore || n.onFallback.Load() }

// apartFrom reports whether this node and m, a member of its region,
// exchange totals: one of them counts apart.
func (n *Node) apartFrom(m *member) bool { return n.apart() || m.ownStore }

// checkFallback announces a change of the store's mode in the node's
// metadata (flagOwnStore), in the background. Called every flush.
func (n *Node) checkFallback() {
	if n.fb == nil {
		return
	}
	on := n.fb.OnFallback()
	if n.onFallback.Load() == on || n.closingNow() {
		return
	}
	n.onFallback.Store(on)
	if on {
		n.log.Warn("the store decides from its fallback: counting apart from the region's other nodes")
	} else {
		n.log.Info("the store decides with the region's shared store again")
	}
	n.sends.Add(1)
	go func() {
		defer n.sends.Done()
		// The update is queued for gossip at once; the wait is only for
		// its first transmission.
		if err := n.ml.UpdateNode(2*n.cfg.GossipInterval + time.Second); err != nil {
			n.log.Debug("announce the store's mode", "err", err)
		}
	}()
}

// closingNow reports whether Close or kill began.
func (n *Node) closingNow() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closing
}
