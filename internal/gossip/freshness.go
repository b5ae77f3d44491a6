package gossip

import (
	"net"
	"slices"
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
// the recent round trips measured to its members.
type freshness struct {
	heard   map[string]time.Time   // region -> receipt of its last valid frame
	back    map[string]time.Time   // region -> when it was heard again after a silence (or first)
	rtt     map[string]*rtts       // region -> its recent ping round trips
	node    map[string]time.Time   // member -> receipt of its last valid frame
	unheard map[string]unheardNote // member -> the regions it last said it does not hear
	pinging map[string]bool        // region -> a ping to one of its members is in flight (see pingUnmeasured)
}

// unheardNote is a member's last KindUnheard frame: its region, the
// regions it does not hear, and when the frame arrived.
type unheardNote struct {
	region  string
	regions []string
	at      time.Time
}

func (f *freshness) init() {
	if f.heard == nil {
		f.heard, f.back, f.rtt, f.node = map[string]time.Time{}, map[string]time.Time{}, map[string]*rtts{}, map[string]time.Time{}
		f.unheard, f.pinging = map[string]unheardNote{}, map[string]bool{}
	}
}

// unheardTTL is how long a member's report of the regions it does not
// hear holds (see guard.UnheardHold).
func (n *Node) unheardTTL() time.Duration { return guard.UnheardHold(n.cfg.HeartbeatInterval) }

// noteUnheard records that member s does not hear the regions regions,
// as of now.
func (n *Node) noteUnheard(s *member, regions []string, now time.Time) {
	n.freshMu.Lock()
	defer n.freshMu.Unlock()
	n.fresh.init()
	if len(n.fresh.unheard) >= maxUnheardNotes {
		for k, u := range n.fresh.unheard {
			if now.Sub(u.at) > n.unheardTTL() {
				delete(n.fresh.unheard, k)
			}
		}
	}
	if _, ok := n.fresh.unheard[s.node.Name]; !ok && len(n.fresh.unheard) >= maxUnheardNotes {
		return
	}
	n.fresh.unheard[s.node.Name] = unheardNote{region: s.region, regions: regions, at: now}
}

// maxUnheardNotes bounds the members whose reports are kept at once.
const maxUnheardNotes = 1024

// rttSamples is how many of a region's last ping round trips the horizon
// is taken from.
const rttSamples = 16

// rtts are a region's last rttSamples ping round trips.
type rtts struct {
	d    [rttSamples]time.Duration
	next int
}

func (r *rtts) add(d time.Duration) {
	r.d[r.next%rttSamples] = d
	r.next++
}

// measured reports whether any round trip is recorded.
func (r *rtts) measured() bool { return r != nil && r.next > 0 }

// oneWay is the one-way delay the horizon allows for a region with
// round trips rs: half the largest recent one, or, before the first is
// measured, the longest one-way delay rlnode allows for
// (guard.JoinOneWay). memberlist probes one random member per probe
// interval (2 s by default), so a node that has just started may go
// seconds without a round trip to some region; a horizon without that
// region's delay would drop what the guard holds for the others' unheard
// admissions before they can have arrived (TestGuardViewUnmeasured).
// pingUnmeasured measures it within a round trip of the region's first
// frame.
func oneWay(rs *rtts) time.Duration {
	if !rs.measured() {
		return guard.JoinOneWay
	}
	return rs.high() / 2
}

// high is the largest of the recent round trips (0 for none): a horizon
// taken from the last one alone is too short whenever that ping was
// faster than the frames that carry counts.
func (r *rtts) high() time.Duration {
	if r == nil {
		return 0
	}
	var m time.Duration
	for _, d := range r.d {
		m = max(m, d)
	}
	return m
}

// heardFrom records a valid frame from member s at now (this node's
// clock) and returns when s was heard from before (zero: never).
func (n *Node) heardFrom(s *member, now time.Time) (prev time.Time) {
	n.freshMu.Lock()
	defer n.freshMu.Unlock()
	n.fresh.init()
	prev = n.fresh.node[s.node.Name]
	n.fresh.node[s.node.Name] = now
	if s.region != n.cfg.Region {
		if h, ok := n.fresh.heard[s.region]; !ok || now.Sub(h) > n.cfg.Suspicion {
			n.fresh.back[s.region] = now
		}
		n.fresh.heard[s.region] = now
	}
	return prev
}

// noteRTT records a ping round trip to a member of region r.
func (n *Node) noteRTT(r string, rtt time.Duration) {
	if r == n.cfg.Region || r == "" {
		return
	}
	n.freshMu.Lock()
	n.fresh.init()
	rs := n.fresh.rtt[r]
	if rs == nil {
		rs = &rtts{}
		n.fresh.rtt[r] = rs
	}
	rs.add(rtt)
	n.freshMu.Unlock()
}

// heartbeatLoop sends an empty flush frame to every alive member of the
// other regions every HeartbeatInterval, so that an idle region is known
// to be alive and its silence means something; and to the failed ones
// too (every HeartbeatInterval for their first minute gone, every tenth
// time after that), so that a healed split is noticed by its first
// packets, not by the failure detector (see probe.go).
func (n *Node) heartbeatLoop() {
	beat := 0
	n.every(n.cfg.HeartbeatInterval, func() {
		beat++
		n.heartbeat(beat%slowBeat == 0)
	})
}

// heartbeat sends the empty frame to the alive and recently failed members
// of the other regions, and to the long failed ones too when old.
func (n *Node) heartbeat(old bool) {
	now := n.cfg.Now()
	e, err := newEncoder(KindFlush, now, n.self(), nil)
	if err != nil {
		return
	}
	frame := e.header(n.cfg.UDPBudget) // a frame of zero totals
	var alive []*member
	for _, ms := range n.view().remote {
		alive = append(alive, ms...)
	}
	n.pingUnmeasured(alive)
	to := append(alive, n.failedMembers(time.Now(), old)...)
	for _, m := range to {
		if err := n.sendPacket(m, frame); err != nil {
			n.met.drop("send_error")
			continue
		}
		n.met.sentFor(KindFlush, cost{reason: reasonHeartbeat}, len(frame))
	}
	// While a region is silent here, the alive members of the other
	// regions learn which, so that a cut link shows as one.
	silent := n.GuardView(now).Silent
	if len(silent) == 0 {
		return
	}
	un, err := EncodeUnheard(now, n.self(), silent)
	if err != nil {
		return
	}
	for _, m := range alive {
		if err := n.sendPacket(m, un); err != nil {
			n.met.drop("send_error")
			continue
		}
		n.met.sentFor(KindUnheard, cost{reason: reasonHeartbeat}, len(un))
	}
}

// pingUnmeasured pings, for each region of the alive members ms with no
// round trip measured yet, one of its members, unless a ping to that
// region is in flight, and records the round trip (see oneWay).
func (n *Node) pingUnmeasured(ms []*member) {
	var todo []*member
	n.freshMu.Lock()
	n.fresh.init()
	for _, m := range ms {
		if m.region == "" || n.fresh.pinging[m.region] || n.fresh.rtt[m.region].measured() {
			continue
		}
		n.fresh.pinging[m.region] = true
		todo = append(todo, m)
	}
	n.freshMu.Unlock()
	for _, m := range todo {
		n.goLoop(func() {
			// Bounded by the probe timeout; the ack is authenticated as a
			// probe's is.
			rtt, err := n.ml.Ping(m.node.Name, &net.UDPAddr{IP: m.node.Addr, Port: int(m.node.Port)})
			if err == nil {
				n.noteRTT(m.region, rtt)
			}
			n.freshMu.Lock()
			delete(n.fresh.pinging, m.region)
			n.freshMu.Unlock()
		})
	}
}

// GuardView returns the pool as the burst guard sees it at now: the
// regions heard from within Suspicion (this one included) as alive, the
// other member regions as silent, the alive nodes of this region, and the
// horizon: FlushInterval plus the largest one-way delay (half the largest
// of the last 16 ping round trips; guard.JoinOneWay before the first) to
// an alive region, plus GuardMargin. Regions are
// sorted. A region heard again after a silence stays silent until it has
// been heard from guard.RejoinHold after that, when the totals it resends
// on hearing this node (KindRejoin) can have arrived: a region heard only
// for less (a link that healed for an instant and was cut again) may
// never have sent them, and taken for alive it would be weighed by the
// counts it had before the silence. Unheard holds what the alive
// regions' nodes said they do not hear (KindUnheard), for
// guard.View.Crossed. Joining holds the node's decisions for
// guard.JoinHold after its first join of a seed (or its start), when its
// region has other alive nodes.
func (n *Node) GuardView(now time.Time) guard.View {
	v := guard.View{Region: n.cfg.Region, Alive: []string{n.cfg.Region}, Nodes: 1}
	regions := map[string]bool{}
	// The alive nodes of each region (guard.View.RegionNodes).
	nodes := map[string]int{}
	peers := 0      // this region's other alive nodes, counted yet or not
	var grown int64 // the latest instant a member is counted from, Unix ms
	nowMs := now.UnixMilli()
	n.memMu.RLock()
	for _, m := range n.members {
		// A member that joined counts from the instant it announced,
		// the same in every view (see Node.countFrom).
		counted := m.state == "alive" && !m.isLocal && m.countFrom <= nowMs
		if counted && m.region != "" {
			nodes[m.region]++
		}
		if counted && m.countFrom > grown {
			grown = m.countFrom
		}
		switch {
		case m.region == "":
		case m.region == n.cfg.Region:
			if m.state == "alive" && !m.isLocal {
				peers++
			}
			if counted {
				v.Nodes++
				v.Apart = v.Apart || m.ownStore
				if m.node.Name < n.cfg.Name {
					v.NodeRank++
				}
			}
		case m.state != "left":
			regions[m.region] = true
		}
	}
	n.memMu.RUnlock()
	var longest time.Duration // the largest one-way delay to an alive region
	n.freshMu.Lock()
	v.Ages = make(map[string]time.Duration, len(regions))
	for r := range regions {
		h, ok := n.fresh.heard[r]
		if ok {
			v.Ages[r] = max(now.Sub(h), 0)
		}
		back := n.fresh.back[r]
		ow := oneWay(n.fresh.rtt[r])
		if ok && now.Sub(h) <= n.cfg.Suspicion && h.Sub(back) >= guard.RejoinHold(n.cfg.FlushInterval, ow) {
			v.Alive = append(v.Alive, r)
			longest = max(longest, ow)
		} else {
			v.Silent = append(v.Silent, r)
		}
	}
	for _, u := range n.fresh.unheard {
		if now.Sub(u.at) > n.unheardTTL() || u.region == n.cfg.Region || !slices.Contains(v.Alive, u.region) {
			continue
		}
		if v.Unheard == nil {
			v.Unheard = map[string][]string{}
		}
		for _, r := range u.regions {
			if !slices.Contains(v.Unheard[u.region], r) {
				v.Unheard[u.region] = append(v.Unheard[u.region], r)
			}
		}
	}
	n.freshMu.Unlock()
	sort.Strings(v.Alive)
	sort.Strings(v.Silent)
	v.RegionNodes = make(map[string]int, len(v.Alive))
	for _, r := range v.Alive {
		v.RegionNodes[r] = max(nodes[r], 1) // a region heard from has a node
	}
	v.RegionNodes[v.Region] = v.Nodes
	v.Apart = v.Apart || n.apart()
	v.Horizon = n.cfg.FlushInterval + longest + max(n.cfg.GuardMargin, 0)
	// Until the other nodes know of this one, its region's others split
	// its quota among one node fewer (see guard.View.Joining), and none
	// counts it before the instant it announced. A node alone in its
	// region splits with nobody.
	left := max(time.Unix(0, n.joinedAt.Load()).Add(guard.JoinHold(n.cfg.GossipInterval, v.Horizon)).Sub(now),
		time.UnixMilli(n.countFrom.Load()).Sub(now))
	if left > 0 && peers > 0 {
		v.Joining = left
	}
	v.Suspicion = n.cfg.Suspicion
	v.Heartbeat = n.cfg.HeartbeatInterval
	if own := n.countFrom.Load(); own <= nowMs && own > grown {
		grown = own // this node, counted from then by the others
	}
	if grown > 0 {
		v.Grown = time.UnixMilli(grown)
	}
	n.rep.mu.Lock()
	if hold := n.rep.hold; now.Before(hold) && !n.rep.quorum.allAnswered(n.cfg.Region) {
		v.Restoring = hold.Sub(now)
	}
	v.Losses = n.rep.losses
	n.rep.mu.Unlock()
	return v
}
