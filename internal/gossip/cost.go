package gossip

import "github.com/rlcluster/rlcluster/internal/region"

// cost names what a send is for, for rlcluster_gossip_sent_bytes_total:
// reason is one of the reasons below, and echo the share of the bytes
// that are echoes of totals already sent in the previous flush (counted
// under "echo" instead of reason).
type cost struct {
	reason string
	echo   float64
}

// The reasons replication bytes are sent for.
const (
	// reasonFlush: a periodic flush's new totals.
	reasonFlush = "flush"
	// reasonEcho: a previous flush's totals sent once more, to repair a
	// lost packet one flush later.
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
)

var reasons = []string{reasonFlush, reasonEcho, reasonHeartbeat, reasonReconcile, reasonState, reasonTouch, reasonRepair, reasonRejoin}

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
	}
	return cost{reason: k.String()}
}

// echoCost is the cost of a flush's group of totals to one destination:
// the share of its entry bytes that are echoes (totals not in the flush's
// dirty set).
func echoCost[V any](group []region.Total, dirty map[dref]V) cost {
	var all, echo int
	for _, t := range group {
		size := entrySize(t)
		all += size
		if _, ok := dirty[dref{ref{t.Key, t.Window, t.Bucket}, t.Region}]; !ok {
			echo += size
		}
	}
	c := cost{reason: reasonFlush}
	if all > 0 {
		c.echo = float64(echo) / float64(all)
	}
	return c
}
