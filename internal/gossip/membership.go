package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"
)

// member is a copy of one memberlist node as this node saw it last.
type member struct {
	node   memberlist.Node // copy, Meta included
	region string
	api    string
	state  string // alive, dead, left
	since  time.Time
	// deadAt is when this node saw the member fail, on Config.Now (zero
	// unless state is dead): frames sent before it are not proof of
	// life (see replay.go).
	deadAt  time.Time
	isLocal bool
	token   uint64 // from its metadata; its frames must carry it
	// countFrom is when this node counts the member among its region's
	// nodes (Unix ms, from its metadata; 0: at once), as it first saw the
	// member's incarnation announce it, and at most a join hold after that.
	countFrom int64
	// ownStore: the member decides from a store of its own now (see
	// apart.go), so it needs every total, not only its keys'.
	ownStore bool
	// fineTrails: the member reads trails of up to window.Granules marks
	// (flagFineTrails); frames to a member without it carry trails
	// gathered into spans (see wire.go).
	fineTrails bool
	// retryAt and backoff pace the reconnect loop's attempts at a dead
	// member (only the reconnect loop touches them, under memMu).
	retryAt time.Time
	backoff time.Duration
	// heardOnly: memberlist holds the member failed, but its frames
	// arrive, so it is alive for replication (see revive in probe.go).
	heardOnly bool
}

// announceCountFrom sets the instant from which the members count this
// node, about to join, among its region's nodes (see Node.countFrom) to a
// join hold from now, and refreshes its metadata (memberlist sends it on
// the join). A node whose first attempts failed announces it again before
// each, so that a late join is not counted at once; one that others have
// joined meanwhile (a seed) keeps the instant they know.
func (n *Node) announceCountFrom() {
	if n.ml.NumMembers() > 1 {
		return
	}
	n.countFrom.Store(n.cfg.Now().Add(n.cfg.joinCountHold()).UnixMilli())
	_ = n.ml.UpdateNode(0) // alone: no broadcast to wait for
}

// maxBackoff caps the join and reconnect loops' retry delays.
const maxBackoff = 30 * time.Second

// joinLoop joins the seeds, and keeps doing so for as long as the node
// runs: whenever a seed is not an alive member (a seed that was down at
// start, a partition longer than the member list remembers), it joins
// the missing seeds again, with a delay that starts at JoinBackoff and
// doubles to 30 s while some seed stays missing.
func (n *Node) joinLoop() {
	backoff := n.cfg.JoinBackoff
	joined, warned := false, false
	for {
		if missing := n.missingSeeds(); len(missing) > 0 {
			if !joined {
				n.announceCountFrom()
			}
			k, err := n.ml.Join(missing)
			switch {
			case k > 0 && !joined:
				joined = true
				n.joinedAt.Store(n.cfg.Now().UnixNano())
				n.log.Info("joined gossip pool", "contacted", k, "members", n.ml.NumMembers())
			case k > 0:
				n.log.Debug("rejoined seeds", "contacted", k, "missing", strings.Join(missing, ","))
			case !warned || !joined:
				warned = true
				n.log.Warn("join gossip seeds failed, retrying", "seeds", strings.Join(missing, ","), "in", backoff, "err", errLine(err))
			default:
				n.log.Debug("join gossip seeds failed, retrying", "seeds", strings.Join(missing, ","), "in", backoff, "err", errLine(err))
			}
		} else {
			backoff, warned = n.cfg.JoinBackoff, false
		}
		select {
		case <-n.stop:
			return
		case <-time.After(backoff):
		}
		if len(n.missingSeeds()) > 0 {
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// missingSeeds returns the seeds that no alive member (this node
// included) is reachable at. A seed named by host name is resolved; one
// that does not resolve counts as missing.
func (n *Node) missingSeeds() []string {
	alive := map[string]bool{}
	n.memMu.RLock()
	for _, m := range n.members {
		if m.state == "alive" {
			alive[m.node.Address()] = true
		}
	}
	n.memMu.RUnlock()
	alive[n.Addr()] = true
	var out []string
	for _, s := range n.cfg.Join {
		if !n.seedAlive(s, alive) {
			out = append(out, s)
		}
	}
	return out
}

func (n *Node) seedAlive(seed string, alive map[string]bool) bool {
	if alive[seed] {
		return true
	}
	h, p, err := net.SplitHostPort(seed)
	if err != nil || net.ParseIP(h) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(ctx, h)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if alive[net.JoinHostPort(ip, p)] {
			return true
		}
	}
	return false
}

// reconnectLoop rejoins members seen dead: after a partition heals, each
// side would otherwise keep the other for dead.
func (n *Node) reconnectLoop() { n.every(n.cfg.ReconnectInterval, n.reconnect) }

// reconnect tries to rejoin every dead member whose retry is due: every
// ReconnectInterval for its first minute dead, then with a delay doubling
// to 30 s.
// Dead members are remembered (and tried) until maxDead newer ones
// replace them, however long they stay away.
func (n *Node) reconnect() {
	var addrs []string
	now := time.Now()
	n.pruneMembers(now)
	n.memMu.Lock()
	for _, m := range n.members {
		if (m.state != "dead" && !m.heardOnly) || now.Before(m.retryAt) {
			continue
		}
		addrs = append(addrs, m.node.Address())
		if now.Sub(m.since) > time.Minute {
			m.backoff = min(max(2*m.backoff, n.cfg.ReconnectInterval), maxBackoff)
		} else {
			m.backoff = n.cfg.ReconnectInterval
		}
		m.retryAt = now.Add(m.backoff)
	}
	n.memMu.Unlock()
	for _, a := range addrs {
		select {
		case <-n.stop:
			return
		default:
		}
		if _, err := n.ml.Join([]string{a}); err == nil {
			n.log.Info("rejoined member", "addr", a)
		}
	}
}

// RegionAge is how fresh this node's view of one remote region is.
type RegionAge struct {
	Region string
	// Newest is the sender's clock on the newest frame merged from the
	// region; zero when nothing has been merged yet.
	Newest time.Time
	// Age is Now() minus Newest (0 when Newest is zero or in the future).
	Age time.Duration
}

// Ages returns, per remote region known to the membership or heard from,
// the age of the newest totals merged from it, sorted by region. An idle
// region's age grows: it sends nothing when nothing changes.
func (n *Node) Ages() []RegionAge {
	now := n.cfg.Now()
	seen := map[string]time.Time{}
	n.memMu.RLock()
	for _, m := range n.members {
		if m.region != "" && m.region != n.cfg.Region {
			seen[m.region] = time.Time{}
		}
	}
	n.memMu.RUnlock()
	n.ageMu.Lock()
	for r, t := range n.newest {
		seen[r] = t
	}
	n.ageMu.Unlock()
	out := make([]RegionAge, 0, len(seen))
	for r, t := range seen {
		a := RegionAge{Region: r, Newest: t}
		if !t.IsZero() && now.After(t) {
			a.Age = now.Sub(t)
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	return out
}

// RemoteAges returns, for each remote region a total was merged from, how
// old the newest is: [Node.Ages] without the regions not heard from yet.
func (n *Node) RemoteAges() map[string]time.Duration {
	ages := n.Ages()
	out := make(map[string]time.Duration, len(ages))
	for _, a := range ages {
		if !a.Newest.IsZero() {
			out[a.Region] = a.Age
		}
	}
	return out
}

// Member is one node of the pool as this node sees it.
type Member struct {
	Name    string
	Region  string
	APIAddr string
	// Addr is the gossip host:port.
	Addr string
	// State is "alive", "dead" (failed) or "left" (gracefully).
	State string
	// Since is when this node saw the member enter State.
	Since time.Time
	// Local is true for this node itself.
	Local bool
}

// Members returns every node this node knows, sorted by region and name.
func (n *Node) Members() []Member {
	n.memMu.RLock()
	out := make([]Member, 0, len(n.members))
	for _, m := range n.members {
		out = append(out, Member{Name: m.node.Name, Region: m.region, APIAddr: m.api, Addr: m.node.Address(),
			State: m.state, Since: m.since, Local: m.isLocal})
	}
	n.memMu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Region != out[j].Region {
			return out[i].Region < out[j].Region
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// ClockOffsets returns the estimated clock offset of each peer (peer minus
// local), from the timestamps in memberlist's ping acks corrected by half
// the round trip.
func (n *Node) ClockOffsets() map[string]time.Duration {
	n.ageMu.Lock()
	defer n.ageMu.Unlock()
	out := make(map[string]time.Duration, len(n.offsets))
	for k, v := range n.offsets {
		out[k] = v
	}
	return out
}

// checkSkew logs, once per member until it is back within the bound, a
// clock offset larger than Config.MaxClockSkew, and counts it
// (rlcluster_gossip_clock_skew_exceeded_total). Nodes pick buckets from
// their clocks (or their region's Redis's): a skew of d moves a region's
// bucket boundaries by d against another's (see docs/design.md, Clocks).
// It never blocks.
func (n *Node) checkSkew(peer, peerRegion string, off time.Duration) {
	over := off > n.cfg.MaxClockSkew || -off > n.cfg.MaxClockSkew
	n.ageMu.Lock()
	was := n.skewed[peer]
	if over {
		n.skewed[peer] = true
	} else {
		delete(n.skewed, peer)
	}
	n.ageMu.Unlock()
	if over && !was {
		n.met.skewExceeded()
		n.log.Warn("peer clock offset exceeds the bound: run NTP", "member", peer, "member_region", peerRegion,
			"offset", off, "bound", n.cfg.MaxClockSkew)
	}
}

// setMember records a member's new state. A member whose name is not
// valid UTF-8 or whose metadata does not decode (a bad region name, say) is
// not recorded: it gets no traffic and its frames are dropped. A member
// keeps the region it announced when this node first saw it; a later
// update that names another region is ignored (and logged). A member
// that goes stops having a clock offset.
func (n *Node) setMember(node *memberlist.Node, state string) {
	cp := *node
	cp.Meta = append([]byte(nil), node.Meta...)
	meta, ok := decodeMeta(cp.Meta)
	if !ok || !utf8.ValidString(cp.Name) || len(cp.Name) > maxNodeName {
		n.log.Debug("ignoring member with bad name or metadata", "member", strconv.Quote(cp.Name))
		return
	}
	if state == "dead" && meta.flags&flagLeaving != 0 {
		state = "left"
	}
	now := time.Now()
	n.memMu.Lock()
	defer n.memMu.Unlock()
	old := n.members[cp.Name]
	m := &member{since: now}
	if old != nil && old.state == state {
		m.since = old.since
	}
	if old != nil && old.region != meta.region && old.state == "alive" {
		n.logNet(slog.LevelWarn, "member announced another region, keeping the one it joined with",
			"member", cp.Name, "member_region", old.region, "announced", meta.region)
		meta.region = old.region
	}
	n.members[cp.Name] = m
	m.node, m.region, m.api, m.token, m.state = cp, meta.region, meta.api, meta.token, state
	m.countFrom = meta.countFrom
	switch bound := n.cfg.Now().Add(n.cfg.joinCountHold()).UnixMilli(); {
	case old != nil && old.token == m.token:
		// One incarnation announces one instant (announceCountFrom runs
		// only before its first join): a later update that moves it
		// would make every view see the pool grow again.
		m.countFrom = old.countFrom
	case m.countFrom > bound:
		// No join holds longer: a member cannot keep itself uncounted.
		m.countFrom = bound
	}
	m.ownStore = meta.flags&flagOwnStore != 0
	m.fineTrails = meta.flags&flagFineTrails != 0
	m.isLocal = cp.Name == n.cfg.Name
	if state == "alive" && !m.isLocal && m.region != n.cfg.Region {
		n.seenRemote.Store(true)
	}
	if state == "alive" && (old == nil || old.state != "alive" || old.token != m.token || (m.ownStore && !old.ownStore)) {
		n.memberUp(m) // new, back from dead, restarted under its name, or now counting apart
	}
	if old != nil && (old.state == state || old.heardOnly) && state == "dead" {
		m.retryAt, m.backoff = old.retryAt, old.backoff
	}
	if state == "dead" {
		m.deadAt = n.cfg.Now()
		if old != nil && old.state == "dead" && old.token == m.token {
			m.deadAt = old.deadAt
		}
	}
	if state != "alive" {
		n.ageMu.Lock()
		delete(n.offsets, cp.Name)
		delete(n.skewed, cp.Name)
		n.ageMu.Unlock()
		n.logNet(slog.LevelInfo, "member "+state, "member", cp.Name, "member_region", meta.region)
	}
}

// maxDead is how many failed members stay listed (and are tried by the
// reconnect loop); beyond it the longest dead are forgotten.
const maxDead = 256

// pruneMembers forgets members that left more than GossipToTheDeadTime ago
// and, beyond maxDead failed members, the longest dead, and the freshness
// of regions that have no member left, so that the member, offset and
// freshness maps hold only the current pool.
func (n *Node) pruneMembers(now time.Time) {
	regions := map[string]bool{}
	n.memMu.Lock()
	var dead []*member
	for name, m := range n.members {
		if m.state == "left" && now.Sub(m.since) > n.cfg.GossipToTheDeadTime {
			delete(n.members, name)
			continue
		}
		if m.state == "dead" {
			dead = append(dead, m)
		}
	}
	if len(dead) > maxDead {
		sort.Slice(dead, func(i, j int) bool { return dead[i].since.Before(dead[j].since) })
		for _, m := range dead[:len(dead)-maxDead] {
			delete(n.members, m.node.Name)
		}
	}
	for _, m := range n.members {
		regions[m.region] = true
	}
	names := make(map[string]bool, len(n.members))
	tokens := make(map[string]uint64, len(n.members))
	for name, m := range n.members {
		names[name] = true
		tokens[name] = m.token
	}
	n.memMu.Unlock()
	n.pruneSequences(tokens)
	n.ageMu.Lock()
	for r := range n.newest {
		if !regions[r] {
			delete(n.newest, r)
		}
	}
	n.ageMu.Unlock()
	n.freshMu.Lock()
	for name := range n.fresh.node {
		if !names[name] {
			delete(n.fresh.node, name)
		}
	}
	n.freshMu.Unlock()
}

// frameSender returns the member that sent m when m may be accepted from it: a
// member other than this node, alive or failed (not left), whose name and
// token m carries and whose region (the one it joined with) is m.From. A
// member this node holds for failed may only be slow or cut off: its
// token proves it is the process that joined, and dropping what it
// delivered would lose totals its sender will not send again.
func (n *Node) frameSender(m Message) (*member, bool) {
	n.memMu.RLock()
	defer n.memMu.RUnlock()
	s := n.members[m.Node]
	if s == nil || s.isLocal || s.state == "left" || s.token != m.Token || s.region != m.From {
		return nil, false
	}
	return s, true
}

// ErrNotJoined is returned by Ready for a node that has not seen another
// region within Config.JoinTimeout.
var ErrNotJoined = errors.New("gossip: no other region reachable")

// Ready reports whether replication works as configured, for a readiness
// check: nil for a node without Config.Join; for one with it, nil once a
// live member of another region has been seen, or while less than
// JoinTimeout has passed since New, else an error wrapping ErrNotJoined
// that says how long it has waited. A region that was joined and is cut
// off later stays ready: it keeps serving from what it knows, as
// designed. It never blocks.
func (n *Node) Ready() error {
	if len(n.cfg.Join) == 0 || n.cfg.JoinTimeout < 0 || n.seenRemote.Load() {
		return nil
	}
	waited := n.cfg.Now().Sub(n.started)
	if waited < n.cfg.JoinTimeout {
		return nil
	}
	return fmt.Errorf("%w (none seen in %v; seeds %s)", ErrNotJoined, waited.Round(time.Second), strings.Join(n.cfg.Join, ","))
}
