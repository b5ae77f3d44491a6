package gossip

import (
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
)

// DemandExchange is what a node's burst guard says of the hits it refused
// and hears of the hits the other nodes refused ([guard.Guard] implements
// it): the shares weigh each region by what it admitted and what it was
// refused, so that a region the shares starve weighs by what it asks for.
type DemandExchange interface {
	DirtyDemand(now time.Time) []guard.Demand
	LearnDemand(now time.Time, region, node string, local bool, ds []guard.Demand)
}

// demandBox holds a DemandExchange for an atomic pointer.
type demandBox struct{ d DemandExchange }

// ExchangeDemand has the node send d's demand to every alive member of
// the pool with each flush (KindDemand frames), and hand d what the
// members send of theirs. Call it before the node decides; without it,
// the node neither sends demand nor learns it (frames of it are dropped
// as "demand_off").
func (n *Node) ExchangeDemand(d DemandExchange) {
	if d == nil {
		n.demand.Store(nil)
		return
	}
	n.demand.Store(&demandBox{d})
}

// sendDemand sends what this node's guard refused since the last flush to
// every alive member, of its region too: each node weighs the regions by
// what all of their nodes asked for. The entries are totals of the
// sender's region whose count is the hits refused in the bucket.
func (n *Node) sendDemand(now time.Time, v view) {
	b := n.demand.Load()
	if b == nil {
		return
	}
	ds := b.d.DirtyDemand(now)
	if len(ds) == 0 {
		return
	}
	totals := make([]region.Total, 0, len(ds))
	for _, d := range ds {
		if len(d.Key) == 0 || len(d.Key) > MaxKeyLen || !validWindow(d.Window, d.Bucket) || d.Refused == 0 {
			continue
		}
		totals = append(totals, region.Total{Key: d.Key, Window: d.Window, Bucket: d.Bucket, Region: n.cfg.Region, Count: min(d.Refused, MaxCount)})
	}
	if len(totals) == 0 {
		return
	}
	sent := map[*member]bool{}
	for _, ms := range v.remote {
		for _, m := range ms {
			if !sent[m] {
				sent[m] = true
				n.sendAsyncFor(KindDemand, cost{reason: reasonDemand}, m, totals)
			}
		}
	}
	for _, m := range v.local {
		if !sent[m] {
			sent[m] = true
			n.sendAsyncFor(KindDemand, cost{reason: reasonDemand}, m, totals)
		}
	}
}

// checkDemand returns why a demand frame m must be dropped, or "": every
// entry is of the sender's region, of a window of fixed length (no
// calendar bucket) and without a trail.
func checkDemand(m Message) string {
	for _, t := range m.Totals {
		if t.Region != m.From || t.Window <= 0 || len(t.Trail) > 0 {
			return "bad_demand"
		}
	}
	return ""
}

// learnDemand hands the demand of m, a checked KindDemand frame, to the
// node's guard.
func (n *Node) learnDemand(now time.Time, m Message) {
	b := n.demand.Load()
	if b == nil {
		n.met.drop("demand_off")
		return
	}
	ds := make([]guard.Demand, 0, len(m.Totals))
	for _, t := range m.Totals {
		ds = append(ds, guard.Demand{Key: t.Key, Window: t.Window, Bucket: t.Bucket, Refused: t.Count})
	}
	b.d.LearnDemand(now, m.From, m.Node, m.From == n.cfg.Region, ds)
}
