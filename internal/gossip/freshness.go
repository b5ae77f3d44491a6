package gossip

import (
	"sort"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
)

// Freshness defaults.
const (
	// DefaultHeartbeatInterval is how often a node tells every member of
	// the other regions that it is alive, with an empty flush frame.
	DefaultHeartbeatInterval = 100 * time.Millisecond
	// DefaultSuspicion is how long a region may go unheard before the
	// burst guard treats it as silent.
	DefaultSuspicion = time.Second
	// DefaultGuardMargin is added to the guard's horizon for jitter and
	// merge time.
	DefaultGuardMargin = 20 * time.Millisecond
)

// freshness is what this node heard of each remote region, on its own
// clock: when a valid frame (totals or heartbeat) last came from it, and
// the last round trip measured to one of its members.
type freshness struct {
	heard map[string]time.Time     // region -> receipt of its last valid frame
	rtt   map[string]time.Duration // region -> last ping round trip
}

// heardFrom records a valid frame from region r at now (this node's clock).
func (n *Node) heardFrom(r string, now time.Time) {
	if r == n.cfg.Region {
		return
	}
	n.freshMu.Lock()
	n.fresh.made().heard[r] = now
	n.freshMu.Unlock()
}

// noteRTT records a ping round trip to a member of region r.
func (n *Node) noteRTT(r string, rtt time.Duration) {
	if r == n.cfg.Region || r == "" {
		return
	}
	n.freshMu.Lock()
	n.fresh.made().rtt[r] = rtt
	n.freshMu.Unlock()
}

// made returns f with its maps made (a Node's zero value has none).
func (f *freshness) made() *freshness {
	if f.heard == nil {
		f.heard, f.rtt = map[string]time.Time{}, map[string]time.Duration{}
	}
	return f
}

// heartbeatLoop sends an empty flush frame to every alive member of the
// other regions every HeartbeatInterval, so that an idle region is known
// to be alive and its silence means something.
func (n *Node) heartbeatLoop() { n.every(n.cfg.HeartbeatInterval, n.heartbeat) }

func (n *Node) heartbeat() {
	e, err := newEncoder(KindFlush, n.cfg.Now(), n.self(), nil)
	if err != nil {
		return
	}
	frame := e.header(n.cfg.UDPBudget) // a frame of zero totals
	for _, ms := range n.view().remote {
		for _, m := range ms {
			if err := n.ml.SendBestEffort(&m.node, frame); err != nil {
				n.met.drop("send_error")
				continue
			}
			n.met.sentFor(KindFlush, cost{reason: reasonHeartbeat}, len(frame))
		}
	}
}

// GuardView returns the pool as the burst guard sees it at now: the
// regions heard from within Suspicion (this one included) as alive, the
// other member regions as silent, the alive nodes of this region, and the
// horizon: FlushInterval plus the largest one-way delay (half the last
// ping round trip) to an alive region. Regions are sorted.
func (n *Node) GuardView(now time.Time) guard.View {
	v := guard.View{Region: n.cfg.Region, Alive: []string{n.cfg.Region}, Nodes: 1}
	regions := map[string]bool{}
	n.memMu.RLock()
	for _, m := range n.members {
		switch {
		case m.region == "":
		case m.region == n.cfg.Region:
			if !m.isLocal && m.state == "alive" {
				v.Nodes++
			}
		case m.state != "left":
			regions[m.region] = true
		}
	}
	n.memMu.RUnlock()
	var oneWay time.Duration
	n.freshMu.Lock()
	v.Ages = make(map[string]time.Duration, len(regions))
	for r := range regions {
		h, ok := n.fresh.heard[r]
		if ok {
			v.Ages[r] = max(now.Sub(h), 0)
		}
		if ok && now.Sub(h) <= n.cfg.Suspicion {
			v.Alive = append(v.Alive, r)
			oneWay = max(oneWay, n.fresh.rtt[r]/2)
		} else {
			v.Silent = append(v.Silent, r)
		}
	}
	n.freshMu.Unlock()
	sort.Strings(v.Alive)
	sort.Strings(v.Silent)
	v.Horizon = n.cfg.FlushInterval + oneWay + max(n.cfg.GuardMargin, 0)
	return v
}
