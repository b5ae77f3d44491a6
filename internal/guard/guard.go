// Package guard bounds what one region admits for a key before it can know
// what the other regions admitted: the burst guard and the partition share.
//
// # Why
//
// Each region decides against its own counts plus the remote counts it has
// heard. A count admitted elsewhere reaches it one flush interval plus the
// one-way delay later: the horizon H. Without a guard, R regions that burst
// at the same instant each admit the whole headroom before hearing from the
// others, R times the limit in all.
//
// # The burst guard
//
// While other regions are alive, a node admits for a key at most its share
// of the headroom per horizon:
//
//	headroom = limit - estimate               (the store's global estimate)
//	share    = (c_self + f) / (sum_alive c_r + R*f),   f = limit / (R * Floor)
//	quota    = ceil(headroom * share / N)     per horizon H, per node
//
// where c_r is region r's count in the current and previous buckets (as the
// store returned them), R the regions alive (this one included), N the
// alive nodes of this region and Floor the [Config.Floor] divisor. Every
// region computes the same shares from the same replicated counts, so the
// shares sum to about 1 and a simultaneous burst in every region admits
// about the headroom in the first horizon, then shrinks geometrically as
// the regions hear each other. A region whose traffic dominates the
// recent counts gets most of the headroom per horizon; a region whose
// count is the only nonzero one among the alive regions (the others idle
// for the whole window, as last heard) gets all of it (share 1), so that a
// single active region keeps the whole limit, and a region that is the
// only one alive is not guarded at all. An idle region that starts to
// burst then still takes its floor share f/(sum + R*f) of what is left for
// one horizon before the active one hears of it: the first horizon of a
// burst from idle, when no region has a count, is shared as above.
//
// # What is still on its way
//
// The headroom a region reads lacks what the other alive regions admitted
// within the last horizon: it has not arrived yet. Were each region to take
// its share of that headroom, the pool would admit, every horizon, about
// the others' admissions of the previous one on top of the limit:
// measured, two regions 60 ms apart offered 50 hits/s each against 60 per
// second admitted 1.017 to 1.083 x the limit, and three regions offered
// 10x from idle on 1 s windows 1.46 x in the simulator, as each took the
// whole headroom in its second horizon before it heard of the others'
// first (with what follows: 0.967 to 1.017 x and 1.04 x). So each node
// also keeps the other regions' shares of the headroom its quotas were
// set on in the current horizon,
//
//	others = headroom * (sum_alive c_r + R*f - c_self - f) / (sum_alive c_r + R*f)
//
// and, for the next horizon (when it starts within a horizon of this
// one's end), takes them off the headroom before sharing it (pending), as
// what the others may have admitted that it cannot have heard. They are
// what the others could take under the same shares, and 0 for a region
// that is the only active one (share 1): a single region keeps the whole
// limit. Likewise this node's own admissions of the previous horizon stay
// out of its weight c_self for one more horizon, as those of the current
// one do, since the others cannot have heard of them either. What this
// costs: a burst from idle pauses for one horizon after its first (the
// others' shares of the first stay pending), and a region whose partners
// took less than their shares gives that up for one horizon. Per decision
// it costs a few additions at a horizon's start and at each store result.
// What it does not cover: shares are rounded up (ceil), so two regions
// may each take half of one free hit, and the regions' weights differ by
// what each has not heard yet: measured, two regions on the strict counter
// (no counting error of its own) admitted up to two hits over a limit of
// 60 per second in a trailing window.
//
// The headroom is read from the store's answers: the first request of a
// horizon goes to the store even past a stale quota (a probe, so that a
// key whose headroom grew back is not denied forever), and its answer sets
// the horizon's quota. Within the horizon the quota also grows by this
// region's share of what the window's slide frees, which no other
// region's traffic can have taken. For the default sliding window (the
// half-bucket span counter) and a region alone, what the slide frees is
// recomputed from the halves the first result carried: a half's hits
// leave over the span they were admitted in, so a bunch of admissions
// frees its capacity in a bunch, much faster than the half's length. For
// the other counters, and for the span counter with several regions
// active, the oldest (sub-)bucket's weight is taken to fall linearly.
// Without it a single region would keep only about 1 - H/W of the limit
// (0.92 for 1 s windows at H = 80 ms); and on the span counter a share
// below 1 would leave a last hit of each bunch to the next horizon's
// probe, after a gap that starts a new run and makes the counter count
// the whole bunch late (0.44 of the limit for 1 s windows).
//
// # The partition share
//
// A region not heard from for a suspicion timeout is silent. A node that
// is on the minority side (it hears fewer than half of the regions, or
// exactly half without the smallest region name: see [View.Charge])
// charges each silent region its share of the limit:
//
//	headroom -= max(0, ceil(limit/R_all) - contribution(silent region))
//
// so the minority admits at most about limit/R_all while the majority
// keeps the full limit: at most (1 + 1/R) x the limit in any trailing
// window during a split, and a region that is really dead does not cost
// the surviving majority any capacity.
//
// The guard is pure: time and the pool's [View] are parameters. It keeps a
// small entry per key seen within the last horizon and is safe for
// concurrent use.
package guard

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// Defaults of [Config].
const (
	// DefaultFloor divides a region's minimum weight: f = limit/(R*Floor).
	DefaultFloor = 8
	// DefaultMaxKeys bounds the keys the guard tracks at once.
	DefaultMaxKeys = 1 << 20
)

// Config configures a [Guard]. Zero fields mean the documented default.
type Config struct {
	// Floor sets the weight every alive region has in the shares even
	// without traffic: f = limit / (R * Floor). A larger Floor gives an
	// active region more of the headroom per horizon (more single-region
	// capacity) and makes an idle region's first burst ramp up more
	// slowly. Default 8.
	Floor uint64
	// MaxKeys bounds the keys tracked at once; a key beyond it is decided
	// by the store alone until entries expire. Default 1<<20.
	MaxKeys int
}

// View is what the guard needs to know of the pool at a decision.
type View struct {
	// Region is this node's region.
	Region string
	// Alive lists the regions heard from within the suspicion timeout,
	// this one included.
	Alive []string
	// Silent lists the member regions not heard from within the
	// suspicion timeout.
	Silent []string
	// Nodes is the number of alive nodes of this region (at least 1).
	Nodes int
	// Horizon is how long a count admitted elsewhere may take to arrive
	// here: the flush interval plus the one-way delay.
	Horizon time.Duration
	// Ages is, per member region, the time since it was last heard from
	// (for metrics; the guard itself reads Alive and Silent).
	Ages map[string]time.Duration
}

// Off reports whether the guard does nothing under v: no other region is
// alive and none is silent.
func (v *View) Off() bool { return len(v.Alive) <= 1 && len(v.Silent) == 0 }

// Charge reports whether this side of a split charges the silent regions
// their share: it hears fewer than half of all regions, or exactly half
// and not the smallest region name of them all.
func (v *View) Charge() bool {
	if len(v.Silent) == 0 {
		return false
	}
	all := len(v.Alive) + len(v.Silent)
	switch a := len(v.Alive); {
	case 2*a > all:
		return false
	case 2*a < all:
		return true
	}
	low := v.Alive[0]
	for _, r := range v.Alive {
		low = min(low, r)
	}
	for _, r := range v.Silent {
		if r < low {
			return true
		}
	}
	return false
}

// Guard is the burst guard and partition share of one node. The zero value
// is not usable: create it with [New]. It is safe for concurrent use.
type Guard struct {
	cfg    Config
	seed   maphash.Seed
	shards [64]shard
}

type shard struct {
	mu   sync.Mutex
	keys map[string]*entry
}

// entry is one key's horizon at this node.
type entry struct {
	start    time.Time         // the horizon's start
	horizon  time.Duration     // its length
	quota    uint64            // hits this node may admit in the horizon
	used     uint64            // hits admitted or reserved in it
	admitted uint64            // hits the store admitted in it
	h0       uint64            // the headroom the horizon's first store result read
	t0       time.Time         // when
	oldest   uint64            // the oldest (sub-)bucket's count in that result
	subMs    int64             // its length in ms
	until    time.Time         // when it stops overlapping the window
	known    bool              // quota comes from a store result of this horizon
	headroom uint64            // the headroom after the last store result (charged)
	seen     bool              // headroom is set
	weight   [2]uint64         // (own count, sum of alive counts) of the last result
	silent   map[string]uint64 // silent regions' contributions in the last result
	spans    *spans            // the span counter's state in that result, when it has one
	// The other regions' admissions this region cannot have heard yet.
	others uint64 // their shares of the headroom this horizon's quotas were set on
	pend   uint64 // their shares of the previous horizon's, unheard at start
	recent uint64 // hits this node admitted in the previous horizon
}

// pending is what the other alive regions admitted in the previous horizon
// that may still be on its way here at now: their shares of its headroom,
// arriving over this horizon (a hit admitted elsewhere arrives within one
// horizon), taken to arrive evenly.
func (e *entry) pending(now time.Time) uint64 {
	if e.pend == 0 {
		return 0
	}
	if now.Sub(e.start) >= e.horizon {
		return 0
	}
	return e.pend
}

// setQuota raises the horizon's quota to this node's share of headroom h
// net of what is pending at now, and records the other regions' shares of
// it.
func (e *entry) setQuota(now time.Time, h, limit, own, sum uint64, v *View, floor uint64) {
	if p := e.pending(now); h > p {
		h -= p
	} else {
		h = 0
	}
	q, o := quota(h, limit, own, sum, v, floor)
	e.quota = max(e.quota, q)
	e.others = max(e.others, o)
}

// spans is the default sliding window's state (window.Limit.DecideSpans)
// as the horizon's first store result read it: every region's halves of
// the previous and current buckets, and the estimate they give at t0 (the
// request's hits included when allowed). The estimate at a later instant,
// from the same halves, is what the window's slide freed since: the hits
// of a half-bucket leave the window over the span they were admitted in,
// not over the half's length, so a bunch of admissions frees its capacity
// in a bunch.
type spans struct {
	l         window.Limit
	bucket    int64
	prev, cur []window.Halves
	est0      uint64
}

// estimate is the estimate at t from the halves alone (nothing admitted
// since t0).
func (sp *spans) estimate(t time.Time) uint64 {
	ms := t.UnixMilli()
	switch b := ms / sp.l.WindowMs(); b {
	case sp.bucket:
		return sp.l.DecideSpans(ms, sp.prev, sp.cur, -1, 0).Estimate
	case sp.bucket + 1:
		return sp.l.DecideSpans(ms, sp.cur, nil, -1, 0).Estimate
	default:
		return 0
	}
}

// freed returns what the slide freed from t0 to t.
func (sp *spans) freed(t time.Time) uint64 {
	est := sp.estimate(t)
	if est >= sp.est0 {
		return 0
	}
	return sp.est0 - est
}

// newSpans returns the span counter's state of res, decided at now with
// hits, or nil when res is not a span counter's result or its halves do
// not give back its estimate (the window length is recovered from the
// bucket index and offset: W is 2H or 2H+1, H = res.SubMs).
func newSpans(now time.Time, limit, hits uint64, res *region.Result) *spans {
	if res.SubMs <= 0 || res.Bucket <= 0 || len(res.Regions) == 0 {
		return nil
	}
	ms := now.UnixMilli()
	var w int64
	for _, c := range []int64{2 * res.SubMs, 2*res.SubMs + 1} {
		if res.Bucket*c+res.ElapsedMs == ms {
			w = c
		}
	}
	if w == 0 {
		return nil
	}
	sp := &spans{bucket: res.Bucket, prev: make([]window.Halves, 0, len(res.Regions)), cur: make([]window.Halves, 0, len(res.Regions))}
	has := false
	for _, rc := range res.Regions {
		sp.prev = append(sp.prev, rc.PreviousHalves)
		sp.cur = append(sp.cur, rc.CurrentHalves)
		has = has || rc.PreviousHalves.Count() > 0 || rc.CurrentHalves.Count() > 0
	}
	if !has {
		return nil
	}
	want := res.Estimate
	if res.Allowed {
		want += hits
	}
	for _, strict := range []bool{false, true} {
		sp.l = window.Limit{Limit: limit, Window: time.Duration(w) * time.Millisecond, Algorithm: window.SlidingWindow, Strict: strict}
		if sp.est0 = sp.estimate(now); sp.est0 == want {
			return sp
		}
	}
	return nil
}

// New returns a Guard.
func New(cfg Config) *Guard {
	if cfg.Floor == 0 {
		cfg.Floor = DefaultFloor
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	g := &Guard{cfg: cfg, seed: maphash.MakeSeed()}
	for i := range g.shards {
		g.shards[i].keys = map[string]*entry{}
	}
	return g
}

func (g *Guard) shard(key string) *shard {
	return &g.shards[maphash.String(g.seed, key)%uint64(len(g.shards))]
}

// Admit reports whether key may spend hits of limit at now under v, before
// the store decides, and the limit the store must decide against: limit
// less the silent regions' charge when this side of a split charges them
// (see [View.Charge]), else limit. When it may, the hits are reserved in
// the current horizon and the caller must call [Guard.Done] with the
// store's answer. When it may not, retryAfter is the time left in the
// horizon (at least 1 ms). Under a View that is Off it always admits,
// returns limit and reserves nothing.
func (g *Guard) Admit(now time.Time, key string, limit, hits uint64, v *View) (ok bool, storeLimit uint64, retryAfter time.Duration) {
	if v.Off() {
		return true, limit, 0
	}
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil {
		if len(s.keys) >= g.cfg.MaxKeys/len(g.shards) {
			sweep(s, now)
		}
		if len(s.keys) >= g.cfg.MaxKeys/len(g.shards) {
			return true, charge(limit, limit, nil, v), 0 // full: the store alone decides
		}
		e = &entry{}
		s.keys[key] = e
	}
	storeLimit = charge(limit, limit, e.silent, v)
	if e.start.IsZero() || !now.Before(e.start.Add(e.horizon)) {
		h := storeLimit
		if e.seen {
			h = min(e.headroom, storeLimit)
		}
		// What the other regions took in the previous horizon and what
		// this node admitted in it may not have crossed yet: the former
		// is taken off the headroom (pending), the latter off this
		// region's weight (Done), for one more horizon, fading as it
		// arrives.
		var pend, recent uint64
		if !e.start.IsZero() {
			if gap := now.Sub(e.start.Add(e.horizon)); gap < e.horizon {
				pend = window.MulDivCeil(e.others, uint64(e.horizon-gap), uint64(e.horizon))
				recent = e.used
			}
		}
		*e = entry{start: now, horizon: max(v.Horizon, time.Millisecond), headroom: e.headroom, seen: e.seen, weight: e.weight, silent: e.silent,
			pend: pend, recent: recent}
		e.setQuota(now, h, limit, e.weight[0], e.weight[1], v, g.cfg.Floor)
	}
	retry := max(e.start.Add(e.horizon).Sub(now), time.Millisecond)
	if hits > storeLimit {
		return false, storeLimit, retry
	}
	// The first request of a horizon whose quota is not yet known from a
	// store result goes to the store as a probe even when the stale quota
	// is exhausted: the store still decides on the fresh estimate, and Done
	// sets the quota from it. Without the probe a key whose last known
	// headroom was 0 would never learn that it grew back.
	probe := e.used == 0 && !e.known
	if e.used+hits > e.quota && e.known && e.spans != nil {
		// The default sliding window: what left the estimate since the
		// horizon's first result, recomputed from its halves.
		e.setQuota(now, e.h0+e.spans.freed(now), limit, e.weight[0], e.weight[1], v, g.cfg.Floor)
	} else if e.used+hits > e.quota && e.known && e.oldest > 0 {
		// The window slides on within the horizon: the oldest bucket's
		// weight falls linearly until it leaves, freeing capacity that no
		// other region's traffic can have taken from what this region
		// knows. Share it as the headroom is shared.
		end := now
		if e.until.Before(end) {
			end = e.until
		}
		el := end.Sub(e.t0).Milliseconds()
		if el > 0 {
			freed := window.MulDivCeil(e.oldest, uint64(el), uint64(e.subMs)) - 1
			e.setQuota(now, e.h0+freed, limit, e.weight[0], e.weight[1], v, g.cfg.Floor)
		}
	}
	if e.used+hits > e.quota && !probe {
		return false, storeLimit, retry
	}
	e.used += hits
	return true, storeLimit, 0
}

// Done records the store's answer to a request that [Guard.Admit] let
// through: res is the store's result, decided against the limit Admit
// returned. The first answer of a horizon sets the horizon's quota from the
// fresh headroom it carries.
func (g *Guard) Done(now time.Time, key string, limit, hits uint64, v *View, res *region.Result) {
	if v.Off() {
		return
	}
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil {
		return
	}
	if !res.Allowed {
		e.used -= min(e.used, hits)
	}
	own, sum, silent := counts(res, v)
	// This node's admissions of the current and the previous horizon are
	// in its own count but may not have reached the other regions yet:
	// leave them out of the weights, or every region would weigh itself
	// more than the others weigh it and the shares would sum to more
	// than 1.
	fresh := min(own, e.used+e.recent)
	own, sum = own-fresh, sum-fresh
	e.weight = [2]uint64{own, sum}
	e.silent = silent
	// The store decided against the charged limit Admit returned, so its
	// Remaining is already net of the charge.
	before := res.Remaining
	if res.Allowed {
		before += hits
	}
	e.headroom, e.seen = res.Remaining, true
	if res.Allowed {
		e.admitted += hits
	}
	if !now.Before(e.start.Add(e.horizon)) {
		return
	}
	if !e.known {
		e.known = true
		e.quota, e.others = 0, 0
		e.setQuota(now, before, limit, own, sum, v, g.cfg.Floor)
		e.h0, e.t0 = before, now
		if own > 0 && own == sum {
			if e.spans = newSpans(now, limit, hits, res); e.spans != nil {
				return
			}
		}
		if res.SubMs > 0 && res.SubWeightDen > 0 {
			e.oldest, e.subMs = res.SubOldest, res.SubMs
			left := int64(res.SubWeightNum) * res.SubMs / int64(res.SubWeightDen) // ms until the oldest leaves
			e.until = now.Add(time.Duration(left) * time.Millisecond)
		}
		return
	}
	// Within the horizon the headroom can only grow by the window sliding
	// (counts leaving the estimate); what other regions admit only shrinks
	// it. Remaining plus what this node admitted since the horizon began
	// is the horizon's headroom plus what slid out minus what arrived:
	// when it grew, the share of the growth is this node's too, so that a
	// region alone keeps up with the window instead of waiting a horizon.
	e.setQuota(now, res.Remaining+e.admitted, limit, own, sum, v, g.cfg.Floor)
}

// Sweep forgets the keys whose horizon ended before now. Admit sweeps a
// shard when it is full; call Sweep periodically to free memory sooner.
func (g *Guard) Sweep(now time.Time) {
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		sweep(s, now)
		s.mu.Unlock()
	}
}

// Keys returns the number of keys tracked.
func (g *Guard) Keys() int {
	n := 0
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}

func sweep(s *shard, now time.Time) {
	for k, e := range s.keys {
		if !now.Before(e.start.Add(e.horizon)) {
			delete(s.keys, k)
		}
	}
}

// quota is this node's share of headroom h for one horizon (see the
// package doc) and the other alive regions' shares of it together. own and
// sum are this region's and all alive regions' counts (sum 0: nothing
// known, equal shares).
func quota(h, limit, own, sum uint64, v *View, floor uint64) (q, others uint64) {
	r := uint64(max(len(v.Alive), 1))
	n := uint64(max(v.Nodes, 1))
	if floor == 0 {
		floor = DefaultFloor
	}
	f := max(limit/(r*floor), 1)
	num := own + f
	den := sum + r*f
	if len(v.Alive) <= 1 || (own > 0 && own == sum) {
		num, den = 1, 1
	}
	// ceil(h * num / (den * n)) in 128 bits.
	return window.MulDivCeil(h, num, den*n), window.MulDiv(h, den-num, den)
}

// counts returns this region's count, the sum over alive regions and the
// contribution of each silent region to the estimate, from the per-region
// counts of a store result (replicas region~id count for their region).
func counts(res *region.Result, v *View) (own, sum uint64, silent map[string]uint64) {
	w := res.PrevWeight
	for _, rc := range res.Regions {
		name, _, _ := strings.Cut(rc.Region, "~")
		c := rc.Current + rc.Previous
		switch {
		case name == v.Region:
			own += c
			sum += c
		case slices.Contains(v.Alive, name):
			sum += c
		case slices.Contains(v.Silent, name):
			if silent == nil {
				silent = map[string]uint64{}
			}
			silent[name] += rc.Current + uint64(float64(rc.Previous)*w)
		}
	}
	return own, sum, silent
}

// charge takes the silent regions' unseen shares off h (a limit or a
// headroom) when v says this side charges them: each silent region r is
// charged max(0, ceil(limit/R_all) - silent[r]), silent[r] being what the
// estimate already holds of it (0 when unknown).
func charge(h, limit uint64, silent map[string]uint64, v *View) uint64 {
	if !v.Charge() {
		return h
	}
	share := window.MulDivCeil(limit, 1, uint64(len(v.Alive)+len(v.Silent)))
	for _, r := range v.Silent {
		c := silent[r]
		if c >= share {
			continue
		}
		if h <= share-c {
			return 0
		}
		h -= share - c
	}
	return h
}
