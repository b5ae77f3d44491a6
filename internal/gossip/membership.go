package gossip

import (
	"sort"
	"time"

	"github.com/hashicorp/memberlist"
)

// member is a copy of one memberlist node as this node saw it last.
type member struct {
	node    memberlist.Node // copy, Meta included
	region  string
	api     string
	state   string // alive, dead, left
	since   time.Time
	isLocal bool
}

func (n *Node) joinLoop() {
	backoff := n.cfg.JoinBackoff
	for {
		k, err := n.ml.Join(n.cfg.Join)
		if k > 0 {
			n.log.Info("joined gossip pool", "contacted", k, "members", n.ml.NumMembers())
			return
		}
		n.log.Warn("join gossip seeds failed, retrying", "seeds", n.cfg.Join, "in", backoff, "err", err)
		select {
		case <-n.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// reconnectLoop rejoins members seen dead within the last hour: after a
// partition heals, each side would otherwise keep the other for dead.
func (n *Node) reconnectLoop() {
	tk := time.NewTicker(n.cfg.ReconnectInterval)
	defer tk.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tk.C:
		}
		var addrs []string
		now := time.Now()
		n.memMu.RLock()
		for _, m := range n.members {
			if m.state == "dead" && now.Sub(m.since) < time.Hour {
				addrs = append(addrs, m.node.Address())
			}
		}
		n.memMu.RUnlock()
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

func (n *Node) setMember(node *memberlist.Node, state string) {
	cp := *node
	cp.Meta = append([]byte(nil), node.Meta...)
	regionName, api, flags, _ := decodeMeta(cp.Meta)
	if state == "dead" && flags&flagLeaving != 0 {
		state = "left"
	}
	n.memMu.Lock()
	defer n.memMu.Unlock()
	m := n.members[cp.Name]
	if m == nil || m.state != state {
		m = &member{since: time.Now()}
		n.members[cp.Name] = m
	} else {
		m = &member{since: m.since}
		n.members[cp.Name] = m
	}
	m.node, m.region, m.api, m.state = cp, regionName, api, state
	m.isLocal = cp.Name == n.cfg.Name
	if state != "alive" {
		n.log.Info("member "+state, "member", cp.Name, "member_region", regionName)
	}
}
