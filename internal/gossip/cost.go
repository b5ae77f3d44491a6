package gossip

import "github.com/rlcluster/rlcluster/internal/region"

// cost names what a send is for, for rlcluster_gossip_sent_bytes_total:
// reason is one of the reasons below, and share, when set, the shares of
// the bytes sent for other reasons (a flush frame mixes urgent, periodic
// and echoed totals); the rest counts under reason.
type cost struct {
	reason string
	share  map[string]float64
}

// The reasons replication bytes are sent for.
const (
	// reasonFlush: new totals sent at the next flush because nothing says
	// they may wait (no limit given, or a final flush at shutdown).
	reasonFlush = "flush"
	// reasonUrgent: new totals whose unsent hits reached the key's
	// allowance (every changed total of a key at or above half its limit).
	reasonUrgent = "urgent"
	// reasonPeriodic: new totals of keys far below their limit, sent
	// because their oldest unsent hit reached the maximum staleness.
	reasonPeriodic = "periodic"
	// reasonEcho: totals sent once more, to repair a lost packet: an
	// urgent total at the next flush, a periodic one a maximum staleness
	// later, unless a newer one went.
	reasonEcho = "echo"
	// reasonHeartbeat: the empty frames that tell other regions this one
	// is alive.
	reasonHeartbeat = "heartbeat"
	// reasonReconcile: the final totals of closed buckets, and their
	// retries.
	reasonReconcile = "reconcile"
	// reasonState: memberlist's push-pull anti-entropy state.
	reasonState = "state"
	// reasonTouch: first touches and hand-offs to this region's nodes.
	reasonTouch = "touch"
	// reasonRepair: repair requests and their answers.
	reasonRepair = "repair"
	// reasonRejoin: rejoin requests and open totals re-sent to a region
	// whose members came (back) alive.
	reasonRejoin = "rejoin"
	// reasonRelay: other regions' totals relayed to a region whose
	// members came (back) alive.
	reasonRelay = "relay"
	// reasonDemand: the hits each node refused, sent to every member with
	// the flushes (see DemandExchange).
	reasonDemand = "demand"
)

var reasons = []string{reasonFlush, reasonUrgent, reasonPeriodic, reasonEcho, reasonHeartbeat, reasonReconcile, reasonState, reasonTouch, reasonRepair, reasonRejoin, reasonRelay, reasonDemand}

// costOf is the reason a frame of kind is sent for unless the sender says
// otherwise.
func costOf(k Kind) cost {
	switch k {
	case KindFlush:
		return cost{reason: reasonFlush}
	case KindReconcile:
		return cost{reason: reasonReconcile}
	case KindState:
		return cost{reason: reasonState}
	case KindTouch:
		return cost{reason: reasonTouch}
	case KindRepair, KindRepaired:
		return cost{reason: reasonRepair}
	case KindRejoin:
		return cost{reason: reasonRejoin}
	case KindRelay:
		return cost{reason: reasonRelay}
	case KindDemand:
		return cost{reason: reasonDemand}
	}
	return cost{reason: k.String()}
}

// mixCost is the cost of a flush's group of totals to one destination:
// each reason's share of its entry bytes, by why (dref -> reason).
func mixCost(group []region.Total, why map[dref]string) cost {
	by := map[string]int{}
	var all int
	for _, t := range group {
		size := entrySize(t)
		all += size
		by[why[dref{ref{t.Key, t.Window, t.Bucket}, t.Region}]] += size
	}
	c := cost{reason: reasonFlush}
	if all == 0 {
		return c
	}
	c.share = make(map[string]float64, len(by))
	for r, b := range by {
		if r != "" && r != reasonFlush {
			c.share[r] = float64(b) / float64(all)
		}
	}
	return c
}
