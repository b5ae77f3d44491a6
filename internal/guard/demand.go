package guard

import (
	"slices"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// Demand is one node's refused hits of a key in one bucket of its window
// (window.Limit.BucketAt): the hits its guard or its store refused there
// so far. The shares weigh each region by what it admitted and what it
// was refused (see [Guard.DirtyDemand]), so that a region its shares
// starve weighs by what it asks for, not by the little it got.
type Demand struct {
	Key     string
	Window  time.Duration
	Bucket  int64
	Refused uint64
}

// demandTTL is how long, in windows, a key's demand is kept after it
// last changed: a weight counts the current and the previous bucket.
const demandTTL = 2

// maxDemandNodes bounds the nodes whose demand one key keeps: a pool of
// more nodes weighs only the first this many that reported it.
const maxDemandNodes = 64

// demand is one key's refused hits: this node's (own), and what the
// other nodes of the pool reported of theirs (nodes).
type demand struct {
	window time.Duration
	own    pair
	dirty  bool // own changed since the last DirtyDemand
	nodes  []nodeDemand
	at     time.Time // the last change, for the sweep
	// recent is what this region's nodes were refused in the last two
	// periods (recent[1] the one starting at recentAt), which the other
	// regions may not have heard yet: left out of this region's own
	// weight, as its fresh admissions are (see Done), so that every
	// region weighs it alike.
	recent   [2]uint64
	recentAt time.Time
	period   time.Duration
}

// nodeDemand is one node's refused hits as it reported them.
type nodeDemand struct {
	region, node string
	local        bool // a node of this node's region
	p            pair
}

// pair is a count in a bucket and in the bucket before it.
type pair struct {
	bucket    int64
	cur, prev uint64
}

// roll moves p to bucket b, if b is later.
func (p *pair) roll(b int64) {
	switch {
	case b <= p.bucket:
	case b == p.bucket+1:
		p.bucket, p.prev, p.cur = b, p.cur, 0
	default:
		p.bucket, p.prev, p.cur = b, 0, 0
	}
}

// set records n, a count of bucket b that only grows, and returns by how
// much it grew.
func (p *pair) set(b int64, n uint64) uint64 {
	p.roll(b)
	switch b {
	case p.bucket:
		d := satSub(n, p.cur)
		p.cur = max(p.cur, n)
		return d
	case p.bucket - 1:
		d := satSub(n, p.prev)
		p.prev = max(p.prev, n)
		return d
	}
	return 0
}

// at returns p's count in bucket b and the one before it.
func (p pair) at(b int64) uint64 {
	switch b {
	case p.bucket:
		return p.cur + p.prev
	case p.bucket + 1:
		return p.cur
	}
	return 0
}

// fresh notes n hits refused in this region at now, rotating recent by
// periods of p.
func (d *demand) fresh(now time.Time, p time.Duration, n uint64) {
	d.rotate(now, p)
	d.recent[1] += n
}

// rotate moves recent on to the period of now.
func (d *demand) rotate(now time.Time, p time.Duration) {
	if p <= 0 {
		p = d.period
	}
	d.period = max(p, time.Millisecond)
	switch age := now.Sub(d.recentAt); {
	case age < d.period:
	case age < 2*d.period:
		d.recent[0], d.recent[1], d.recentAt = d.recent[1], 0, d.recentAt.Add(d.period)
	default:
		d.recent, d.recentAt = [2]uint64{}, now
	}
}

// refuse records that this node refused hits of key at now (s.mu held),
// once its demand is exchanged ([Guard.DirtyDemand]): counted in its own
// weight and not sent, it would weigh its region more than the others
// weigh it.
func (g *Guard) refuse(s *shard, key string, lim window.Limit, hits uint64, now time.Time, h time.Duration) {
	if lim.Calendar.Unit != 0 || lim.Window <= 0 || !g.exchanging.Load() {
		return
	}
	d := g.demandOf(s, key, lim.Window, now, true)
	if d == nil {
		return
	}
	_, b := lim.BucketAt(now.UnixMilli())
	d.own.roll(b)
	if b != d.own.bucket {
		return
	}
	d.own.cur = window.SatAdd(d.own.cur, hits)
	d.fresh(now, h, hits)
	d.at = now
	if !d.dirty {
		d.dirty = true
		s.dirty = append(s.dirty, key)
	}
}

// Refused records hits of key that were refused outside the guard and
// the store, at now: requests a quota lease's client refused, which are
// the region's demand as much as the node's own refusals (see refuse).
func (g *Guard) Refused(now time.Time, key string, lim window.Limit, hits uint64, v *View) {
	if hits == 0 || v.Off() {
		return
	}
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	g.refuse(s, key, lim, hits, now, v.Horizon)
}

// demandOf returns key's demand record in s, new when it has none (nil
// when s has no room; s.mu held). A record of another window is
// restarted when reset (this node refused the key under window w), else
// nil: another node's report cannot wipe what the record holds.
func (g *Guard) demandOf(s *shard, key string, w time.Duration, now time.Time, reset bool) *demand {
	d := s.demand[key]
	if d == nil {
		if len(s.demand) >= g.cfg.MaxKeys/len(g.shards) {
			sweepDemand(s, now)
			if len(s.demand) >= g.cfg.MaxKeys/len(g.shards) {
				return nil
			}
		}
		d = &demand{window: w, recentAt: now, at: now}
		s.demand[key] = d
	}
	if d.window != w {
		if !reset {
			return nil
		}
		dirty := d.dirty
		*d = demand{window: w, recentAt: now, dirty: dirty}
	}
	return d
}

// DirtyDemand returns this node's demand of the keys whose refused hits
// grew since the last call, for the other nodes of the pool
// ([Guard.LearnDemand]): gossip sends it with each flush. A guard counts
// what it refuses only from its first call on.
func (g *Guard) DirtyDemand(now time.Time) []Demand {
	g.exchanging.Store(true)
	var out []Demand
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		for _, k := range s.dirty {
			d := s.demand[k]
			if d == nil || !d.dirty {
				continue
			}
			d.dirty = false
			out = append(out, Demand{Key: k, Window: d.window, Bucket: d.own.bucket, Refused: d.own.cur})
		}
		s.dirty = s.dirty[:0]
		s.mu.Unlock()
	}
	return out
}

// LearnDemand records the demand that node of region reported (local:
// a node of this node's region). Each entry's count replaces what the
// node reported of that bucket before when it is larger.
func (g *Guard) LearnDemand(now time.Time, region, node string, local bool, ds []Demand) {
	for _, x := range ds {
		if x.Window <= 0 || x.Refused == 0 {
			continue
		}
		s := g.shard(x.Key)
		s.mu.Lock()
		if d := g.demandOf(s, x.Key, x.Window, now, false); d != nil {
			i := slices.IndexFunc(d.nodes, func(n nodeDemand) bool { return n.node == node && n.region == region })
			if i < 0 && len(d.nodes) < maxDemandNodes {
				d.nodes = append(d.nodes, nodeDemand{region: region, node: node, local: local})
				i = len(d.nodes) - 1
			}
			if i >= 0 {
				if grew := d.nodes[i].p.set(x.Bucket, x.Refused); grew > 0 {
					d.at = now
					if local {
						d.fresh(now, 0, grew)
					}
				}
			}
		}
		s.mu.Unlock()
	}
}

// regionDemand is a region's refused hits in the current and the
// previous bucket.
type regionDemand struct {
	region string
	n      uint64
}

// demands returns the refused hits of key in the current and previous
// buckets at now: this region's (own, less what the others may not have
// heard yet) and each other region's, appended to buf (s.mu held).
//
// The region's other nodes count in own for at most nodes - 1 times this
// node's own refusals, as an even spread of the region's requests gives
// them: a member that reported more to this region than to the others
// (which it may, holding the gossip key) would have the region weigh
// itself more than they weigh it, and take more than its share.
func demands(s *shard, key string, lim window.Limit, now time.Time, h time.Duration, nodes int, buf []regionDemand) (own uint64, others []regionDemand) {
	d := s.demand[key]
	if d == nil || d.window != lim.Window || lim.Calendar.Unit != 0 {
		return 0, buf
	}
	_, b := lim.BucketAt(now.UnixMilli())
	mine := d.own.at(b)
	var peers uint64
	others = buf
	for _, n := range d.nodes {
		x := n.p.at(b)
		if x == 0 {
			continue
		}
		if n.local {
			peers = window.SatAdd(peers, x)
			continue
		}
		i := slices.IndexFunc(others, func(o regionDemand) bool { return o.region == n.region })
		if i < 0 {
			others = append(others, regionDemand{region: n.region})
			i = len(others) - 1
		}
		others[i].n = window.SatAdd(others[i].n, x)
	}
	own = window.SatAdd(mine, min(peers, window.MulDiv(mine, uint64(max(nodes, 1)-1), 1)))
	d.rotate(now, h)
	return satSub(own, d.recent[0]+d.recent[1]), others
}

// refusing reports whether this node refused hits of key in the current
// or the previous bucket (s.mu held).
func refusing(s *shard, key string, lim window.Limit, now time.Time) bool {
	d := s.demand[key]
	if d == nil || lim.Calendar.Unit != 0 {
		return false
	}
	_, b := lim.BucketAt(now.UnixMilli())
	return d.own.at(b) > 0
}

// sweepDemand forgets the demand that has not changed for demandTTL
// windows (s.mu held).
func sweepDemand(s *shard, now time.Time) {
	for k, d := range s.demand {
		if now.Sub(d.at) >= demandTTL*d.window && !d.dirty {
			delete(s.demand, k)
		}
	}
}
