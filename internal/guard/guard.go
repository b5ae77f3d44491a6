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
//	share    = (w_self + f) / D,   D = sum_alive w_r + R*f,   f = weight(limit) / (R * Floor)
//	quota    = q_region / N (rounded down)    per horizon H, per node
//	q_region = floor(headroom * (B + w_self + f) / D) - floor(headroom * B / D)
//
// where w_r is the [weight] (the square root, scaled) of region r's count
// in the current and previous buckets (as the store returned them), R the
// regions alive (this one included), N the alive nodes of this region,
// Floor the [Config.Floor] divisor and B the [phase] of the layout (times
// D) plus the weights (w_r + f) of the alive regions named before this
// one. Every
// region computes the same shares from the same replicated counts, so the
// shares sum to about 1; laid out in name order over the headroom, each
// region takes the whole hits that fall in its part, so the regions'
// quotas sum to the headroom exactly (each share rounded up, two regions
// could each take one free hit). A simultaneous burst in every region
// admits at most the headroom in the first horizon, then shrinks
// geometrically as the regions hear each other. A region whose traffic
// dominates the recent counts gets most of the headroom per horizon, and
// a region that is the only one alive is not guarded at all. A region
// whose count is the only one known still leaves the others their floor
// shares f/(sum + R*f), since an idle region may start to burst unseen
// and take its floor share: the shares of every region's view must sum
// to 1. A single active region still keeps the whole limit: its share grows to
// (c_self + f)/(c_self + R*f) of each horizon's headroom, and what it
// leaves is shared again in the next.
//
// # What is still on its way
//
// The headroom a region reads lacks what the other alive regions admitted
// within the last horizon: it has not arrived yet. Were each region to take
// its share of that headroom, the pool would admit, every horizon, about
// the others' admissions of the previous one on top of the limit. So each node
// also keeps the other regions' shares of the headroom it read in the
// current horizon, before taking off what is pending,
//
//	others = headroom - q_region
//
// and, for the next horizon (when it starts within a horizon of this
// one's end), takes them off the headroom before sharing it (pending), as
// what the others may have admitted that it cannot have heard. They are
// what the others could take under the same shares of their own headroom,
// which is at most the one read here (a store's estimate lacks only
// admissions). (The others' shares of the headroom net of this region's
// pending are not a bound: each region takes off its own pending, and one
// that took off less reads more.)
// Likewise this region's admissions of the current and the previous
// horizon stay out of its weight c_self, since the others cannot have
// heard of them yet: this node's own, and its region's other nodes',
// read from the region's trails (the default sliding window) or from what
// the region's count grew by since the previous horizon's first result
// (counting only its own, a node would take the other nodes' fresh
// admissions for its region's weight and the unheard regions for idle).
// What this costs: a
// burst from idle pauses for one horizon after its first (the others'
// shares of the first stay pending), and a region whose partners took
// less than their shares gives that up for one horizon. Per decision it
// costs a few additions and multiplications at a horizon's start and at
// each store result.
//
// What this bounds and what it does not: the regions' horizons are not
// aligned and their weights differ by what each has not heard, so this is
// not a proof that the pool never takes more than the headroom: the
// simulator and its fault search measure it (docs/design.md, "The burst
// guard", has the figures; `go run ./loadtest/sim`). The default counter
// never errs above the limit in one region; across regions a remote trail
// is coarse, so its hits may count up to one granule of the window late. The price
// of the exactness is capacity where a region's share per horizon is a
// fraction of a hit.
//
// The headroom is read from the store's answers: the first request of a
// horizon goes to the store even past a stale quota (a probe, so that a
// key whose headroom grew back is not denied forever), and its answer sets
// the horizon's quota. Past the quota, the probe is decided against a
// limit lowered so that the store admits it only when this node's quota
// of the headroom it reads would hold it,
//
//	headroom - pending >= ceil(hits * N * D / (c_self + f))
//
// (with the weights of the last answer), and its answer is read against
// the full limit; otherwise every region's probe could take a hit of the
// others' shares each horizon. A denial the full limit would not have
// made is the guard's: [Guard.Done] returns the rest of the horizon for
// the caller to answer as a guard denial's retry-after. When the limit is
// too small for this node's share to hold hits at any estimate, the probe
// is decided against the full limit, so that the key stays live, in this
// region's [turn] only: the alive regions take turns, so at most one takes
// hits beyond its share at a time. Within the horizon the quota
// also grows by this region's share of what the window's slide frees,
// which no other region's traffic can have taken. For the default sliding
// window that is recomputed from the trails the horizon's first result
// carried: a mark's hits leave the window when its last one does, so a
// bunch of admissions frees its capacity in a bunch. For the other
// counters the oldest bucket's weight is taken to fall linearly. Without
// it a single region would keep only about 1 - H/W of the limit (0.92 for
// 1 s windows at H = 80 ms).
//
// # Crossed views
//
// Charging silent regions bounds a split into sides that each hear all of
// their own. A cut link does not split so (see [View.Crossed]); a node
// whose view is crossed charges every other region as silent
// ([View.Isolated]), so that each region keeps to its own share.
//
// # The partition share
//
// A region not heard from for a suspicion timeout is silent. Every node
// charges each silent region its share of the limit ([View.Charge]):
//
//	headroom -= max(0, ceil(limit/R_all) - contribution(silent region))
//
// On a window not much longer than the suspicion timeout, waiting for it
// would leave a region's admissions while it is unheard but not yet
// silent a large part of the window: for a key whose window is known, a
// region unheard for a quarter of it (at least two heartbeats, quietMin)
// is charged as a silent one (see entry.quiet).
//
// No side of a split can tell whether it is the larger one, so every side
// charges: each admits at most the limit less the shares of the regions
// it does not hear, and the pool at most (1 + 1/R) x the limit in any
// trailing window, whatever the split's shape. A region that is really
// down costs the others its share until it leaves the membership.
// docs/design.md has the measured bounds and what they do not cover yet.
//
// The guard is pure: time and the pool's [View] are parameters. It keeps a
// small entry per key seen within the last horizon and is safe for
// concurrent use.
package guard

import (
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// Defaults of [Config].
const (
	// DefaultFloor divides a region's minimum weight: f = weight(limit)/(R*Floor).
	DefaultFloor = 8
	// DefaultMaxKeys bounds the keys the guard tracks at once.
	DefaultMaxKeys = 1 << 20
)

// Config configures a [Guard]. Zero fields mean the documented default.
type Config struct {
	// Floor sets the weight every alive region has in the shares even
	// without traffic: f = weight(limit) / (R * Floor). A larger Floor gives an
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
	// Unheard is, per alive region, the member regions it said recently
	// that it does not hear (absent: it hears every one). See
	// [View.Crossed].
	Unheard map[string][]string
}

// Crossed reports whether the regions do not split into sides that each
// hear all of their own: an alive region does not hear this one or
// another alive region, or hears a region that is silent here. One cut
// link does that (ap and us cannot reach each other, eu hears both): ap
// and us each take eu for alive and us or ap for silent, and each would
// admit the limit less the other's share, eu's share included in both.
// A crossed view is decided with every other region charged as silent
// (see [View.Isolated]).
func (v *View) Crossed() bool {
	for _, a := range v.Alive {
		if a == v.Region {
			continue
		}
		un := v.Unheard[a]
		for _, b := range un {
			if b == v.Region || slices.Contains(v.Alive, b) {
				return true // a does not hear a region this one hears
			}
		}
		for _, b := range v.Silent {
			if b != a && !slices.Contains(un, b) {
				return true // a hears a region this one does not
			}
		}
	}
	return false
}

// Isolated returns v with every other region silent when v is
// [View.Crossed], else v itself: each region then admits at most its
// share of the limit (limit/R) beyond what the others are known to have
// admitted, so that the regions together stay within the limit whatever
// links are cut, at the cost of what an idle region's share would have
// lent to a busy one.
func (v *View) Isolated() *View {
	if !v.Crossed() {
		return v
	}
	q := *v
	q.Alive = []string{v.Region}
	q.Silent = make([]string, 0, len(v.Alive)+len(v.Silent)-1)
	for _, r := range v.Alive {
		if r != v.Region {
			q.Silent = append(q.Silent, r)
		}
	}
	q.Silent = append(q.Silent, v.Silent...)
	slices.Sort(q.Silent)
	return &q
}

// Off reports whether the guard does nothing under v: no other region is
// alive and none is silent.
func (v *View) Off() bool { return len(v.Alive) <= 1 && len(v.Silent) == 0 }

// Charge reports whether this node charges the silent regions their
// share: whenever any member region is silent. Which side of a split is
// the larger one cannot be told from one side (two groups of two, or a
// cut link that leaves a third region hearing both sides, look the same
// as a majority to every side), so every side charges every region it
// does not hear.
func (v *View) Charge() bool { return len(v.Silent) > 0 }

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
	weight   weights           // the alive regions' counts in the last result
	silent   map[string]uint64 // silent regions' contributions in the last result
	trails   *trails           // the trail counter's state in that result, when it has one
	// The other regions' admissions this region cannot have heard yet.
	others uint64 // their shares of the headroom this horizon's quotas were set on (as read)
	pend   uint64 // their shares of the previous horizon's, unheard at start
	recent uint64 // hits this node admitted in the previous horizon
	// This region's count (current and previous buckets, all its nodes)
	// as this horizon's first result read it, and as the previous
	// horizon's did (when ok): what it grew by since is as fresh as
	// this node's own admissions.
	own0, ownPrev     uint64
	own0ok, ownPrevOK bool
	// wMs is the key's bucket length as its last store result gave it
	// (0: none yet); see quiet.
	wMs int64
	// The probe past the quota, when Admit lowered its store limit (see
	// probeCut): by how much, and the limit it returned.
	cut, cutLimit uint64
}

// quiet returns v with the alive regions that have not been heard from for
// a quarter of the key's window (and at least quietMin) counted as
// silent, for this key: on a window not much longer than the suspicion
// timeout, what a region admits while it is unheard but not yet silent is
// a large part of the window. It returns v itself when no region is so
// quiet or the window is not known yet.
func (e *entry) quiet(v *View) *View {
	if e.wMs <= 0 || len(v.Ages) == 0 {
		return v
	}
	after := max(time.Duration(e.wMs)*time.Millisecond/4, quietMin)
	isQuiet := func(r string) bool { return r != v.Region && v.Ages[r] > after }
	if !slices.ContainsFunc(v.Alive, isQuiet) {
		return v
	}
	q := *v
	q.Alive, q.Silent = nil, slices.Clone(v.Silent)
	for _, r := range v.Alive {
		if isQuiet(r) {
			q.Silent = append(q.Silent, r)
		} else {
			q.Alive = append(q.Alive, r)
		}
	}
	return &q
}

// quietMin is the least time unheard before [entry.quiet] counts an
// alive region as silent for a key: two heartbeats.
const quietMin = 200 * time.Millisecond

// pending is what the other alive regions admitted in the previous horizon
// that may still be on its way here at now: their shares of its headroom,
// held in full until this horizon ends (a hit admitted elsewhere arrives
// within one horizon; what arrived earlier is in the store's estimate too,
// so until then it may be counted twice, which errs on the side of the
// limit).
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
// h itself, before pending is taken off: what they may take is their
// shares of their own headroom, which is at most h (the store's estimate
// lacks only admissions), not of this region's net of what it takes as
// pending (each region takes off its own).
func (e *entry) setQuota(now time.Time, h, limit uint64, w weights, v *View, floor uint64) {
	ph := phase(e.start)
	_, o := quota(h, limit, w, v, floor, ph)
	if p := e.pending(now); h > p {
		h -= p
	} else {
		h = 0
	}
	q, _ := quota(h, limit, w, v, floor, ph)
	e.quota = max(e.quota, q)
	e.others = max(e.others, o)
}

// trails is the default sliding window's state (window.Limit.DecideTrails)
// as the horizon's first store result read it: every region's trails of
// the previous and current buckets, and the estimate they give at t0 (the
// request's hits included when allowed). The estimate at a later instant,
// from the same trails, is what the window's slide freed since: a mark's
// hits leave the window when its last hit does, so a bunch of admissions
// frees its capacity in a bunch.
type trails struct {
	l         window.Limit
	bucket    int64
	prev, cur []window.Trail
	est0      uint64
}

// estimate is the estimate at t from the trails alone (nothing admitted
// since t0).
func (sp *trails) estimate(t time.Time) uint64 {
	ms := t.UnixMilli()
	switch b := ms / sp.l.WindowMs(); b {
	case sp.bucket:
		return sp.l.DecideTrails(ms, sp.prev, sp.cur, -1, 0).Estimate
	case sp.bucket + 1:
		return sp.l.DecideTrails(ms, sp.cur, nil, -1, 0).Estimate
	default:
		return 0
	}
}

// freed returns what the slide freed from t0 to t.
func (sp *trails) freed(t time.Time) uint64 {
	est := sp.estimate(t)
	if est >= sp.est0 {
		return 0
	}
	return sp.est0 - est
}

// newTrails returns the trail counter's state of res, decided at now with
// hits, or nil when res is not a trail counter's result or its trails do
// not give back its estimate (the window is res.SubMs).
func newTrails(now time.Time, lim window.Limit, hits uint64, res *region.Result) *trails {
	if a := lim.Algorithm; a != 0 && a != window.SlidingWindow {
		return nil
	}
	w := res.SubMs
	if w <= 0 || w != lim.WindowMs() || res.Bucket <= 0 || len(res.Regions) == 0 || res.Bucket*w+res.ElapsedMs != now.UnixMilli() {
		return nil
	}
	sp := &trails{bucket: res.Bucket, prev: make([]window.Trail, 0, len(res.Regions)), cur: make([]window.Trail, 0, len(res.Regions))}
	has := false
	for _, rc := range res.Regions {
		sp.prev = append(sp.prev, rc.PreviousTrail)
		sp.cur = append(sp.cur, rc.CurrentTrail)
		has = has || rc.PreviousTrail.Count() > 0 || rc.CurrentTrail.Count() > 0
	}
	if !has {
		return nil
	}
	want := res.Estimate
	if res.Allowed {
		want += hits
	}
	sp.l = lim
	if sp.est0 = sp.estimate(now); sp.est0 != want {
		return nil
	}
	return sp
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
// (see [View.Charge]), else limit, and lower still for a probe past this
// node's quota (see the package doc). When it may, the hits are reserved in
// the current horizon and the caller must call [Guard.Done] with the
// store's answer. When it may not, retryAfter is the time left in the
// horizon (at least 1 ms). Under a View that is Off it always admits,
// returns limit and reserves nothing.
func (g *Guard) Admit(now time.Time, key string, lim window.Limit, hits uint64, v *View) (ok bool, storeLimit uint64, retryAfter time.Duration) {
	limit := lim.Limit
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
			return true, charge(limit, limit, nil, v.Isolated()), 0 // full: the store alone decides
		}
		e = &entry{}
		s.keys[key] = e
	}
	v = e.quiet(v.Isolated())
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
		//
		// Until this horizon's first store result, the quota comes from
		// the headroom the last one read, which lacks everything the
		// others admitted since: all of their shares of the previous
		// horizon (pending fades only as a fresh read takes them in), and,
		// after a gap of a horizon or more, whatever they took meanwhile,
		// so then the first request is a probe and the rest wait for it.
		var pend, recent, ownPrev uint64
		var ownPrevOK bool
		if !e.start.IsZero() {
			if gap := now.Sub(e.start.Add(e.horizon)); gap < e.horizon {
				pend = window.MulDivCeil(e.others, uint64(e.horizon-gap), uint64(e.horizon))
				recent = e.used
				ownPrev, ownPrevOK = e.own0, e.own0ok
				h = satSub(h, e.others-pend)
			} else {
				h = 0
			}
		}
		*e = entry{start: now, horizon: max(v.Horizon, time.Millisecond), headroom: e.headroom, seen: e.seen, weight: e.weight, silent: e.silent,
			pend: pend, recent: recent, ownPrev: ownPrev, ownPrevOK: ownPrevOK}
		e.setQuota(now, h, limit, e.weight, v, g.cfg.Floor)
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
	if e.used+hits > e.quota && e.known && e.trails != nil {
		// The default sliding window: what left the estimate since the
		// horizon's first result, recomputed from its trails.
		e.setQuota(now, e.h0+e.trails.freed(now), limit, e.weight, v, g.cfg.Floor)
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
			e.setQuota(now, e.h0+freed, limit, e.weight, v, g.cfg.Floor)
		}
	}
	// A key this node has no answer for yet has a quota of the limit, not
	// of the headroom, which only the store knows: its first request is
	// a probe too, decided as one past the quota, so that regions that
	// start at once do not each take a share of what others used.
	if e.used+hits > e.quota || (probe && !e.seen) {
		if !probe {
			return false, storeLimit, retry
		}
		c, whole := probeCut(storeLimit, limit, hits, e.pending(now), e.weight, v, g.cfg.Floor)
		if !whole {
			// This node's share of the limit holds no whole request at any
			// estimate: the alive regions take turns at probing the full
			// limit, so that at most one of them does at a time.
			if ok, wait := turn(now, v); !ok {
				return false, storeLimit, wait
			}
		}
		if c > 0 {
			storeLimit -= c
			e.cut, e.cutLimit = c, storeLimit
		}
	}
	e.used += hits
	return true, storeLimit, 0
}

// Done records the store's answer to a request that [Guard.Admit] let
// through: res is the store's result, decided against the limit Admit
// returned. The first answer of a horizon sets the horizon's quota from the
// fresh headroom it carries. When the store denied a probe only because
// Admit had lowered its limit to this node's share (the full limit would
// have admitted it), the denial is the guard's: Done returns the time
// left in the horizon (at least 1 ms) for the caller to answer as the
// retry-after of a guard denial, and 0 otherwise.
func (g *Guard) Done(now time.Time, key string, lim window.Limit, hits uint64, v *View, res *region.Result) (guardRetry time.Duration) {
	limit := lim.Limit
	if v.Off() {
		return 0
	}
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil {
		return 0
	}
	if !res.Allowed {
		e.used -= min(e.used, hits)
	}
	if res.SubMs > 0 {
		e.wMs = res.SubMs
	}
	v = e.quiet(v.Isolated())
	c, silent := counts(res, v)
	// This node's admissions of the current and the previous horizon are
	// in its own count but may not have reached the other regions yet:
	// leave them out of the weights, or every region would weigh itself
	// more than the others weigh it and the shares would sum to more
	// than 1.
	//
	// The other nodes of this region admit too, into the same count, and
	// theirs are as fresh as this node's: what the region admitted since
	// the previous horizon began, from its own trails (the default
	// sliding window), or what its count grew by since the previous
	// horizon's first result.
	// Without trails, in a horizon that follows none, a region of several
	// nodes cannot tell which of its count is fresh: it weighs none of it.
	ft, tracked := freshOwn(res, v.Region, e.start.Add(-e.horizon).UnixMilli())
	fresh := max(e.used+e.recent, ft)
	if !e.known {
		e.own0, e.own0ok = c.own, true
	}
	switch {
	case e.ownPrevOK:
		fresh = max(fresh, satSub(c.own, e.ownPrev))
	case !tracked && v.Nodes > 1:
		fresh = c.own
	}
	fresh = min(c.own, fresh)
	e.weight = c.weigh(c.own - fresh)
	e.silent = silent
	// The store decided against the charged limit Admit returned, so its
	// Remaining is already net of the charge; a probe's answer, decided
	// against a limit lowered by e.cut, is read against the charged
	// limit.
	rem := res.Remaining
	if e.cut > 0 && res.Limit == e.cutLimit {
		rem = satSub(res.Limit+e.cut, res.Estimate)
		if res.Allowed {
			rem = satSub(rem, hits)
		} else if hits <= rem {
			guardRetry = max(e.start.Add(e.horizon).Sub(now), time.Millisecond)
		}
	}
	before := rem
	if res.Allowed {
		before += hits
	}
	e.headroom, e.seen = rem, true
	if res.Allowed {
		e.admitted += hits
	}
	if !now.Before(e.start.Add(e.horizon)) {
		return guardRetry
	}
	if !e.known {
		e.known = true
		e.quota, e.others = 0, 0
		e.setQuota(now, before, limit, e.weight, v, g.cfg.Floor)
		e.h0, e.t0 = before, now
		if e.trails = newTrails(now, lim, hits, res); e.trails != nil {
			return guardRetry
		}
		if res.SubMs > 0 && res.SubWeightDen > 0 {
			e.oldest, e.subMs = res.SubOldest, res.SubMs
			left := int64(res.SubWeightNum) * res.SubMs / int64(res.SubWeightDen) // ms until the oldest leaves
			e.until = now.Add(time.Duration(left) * time.Millisecond)
		}
		return guardRetry
	}
	// Within the horizon the headroom can only grow by the window sliding
	// (counts leaving the estimate); what other regions admit only shrinks
	// it. Remaining plus what this node admitted since the horizon began
	// is the horizon's headroom plus what slid out minus what arrived:
	// when it grew, the share of the growth is this node's too, so that a
	// region alone keeps up with the window instead of waiting a horizon.
	e.setQuota(now, rem+e.admitted, limit, e.weight, v, g.cfg.Floor)
	return guardRetry
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

// weights are the alive regions' weights in the shares, each
// [weight] of its count in the current and previous buckets as a store
// result gave it: this region's (own), all alive regions' (sum), and
// those of the alive regions named before this one (before).
type weights struct{ own, sum, before uint64 }

// weight is a region's weight in the shares for a count of c hits:
// 1024 sqrt(c). Under contention every region admits about its share of
// each horizon's headroom, so its next count is proportional to its
// weight: with weights linear in the counts, any split of the limit
// between regions of equal demand would be a fixed point, and the
// rounding of each horizon's quotas would walk it until one region took
// nearly all (3 regions at 10x for 12 windows of 100 per 10 s once
// admitted 7, 119 and 874). A concave weight brings the regions' counts
// back together, by the square root of their ratio per window; a region
// below its demand still weighs by what it uses. The square root is
// IEEE-exact, so every region computes the same weights from the same
// counts.
func weight(c uint64) uint64 { return uint64(math.Sqrt(float64(c)) * 1024) }

// tally is the alive regions' counts as a store result gave them: this
// region's (own, a count), and the other alive regions' weights summed
// over all of them (others) and over those named before this one
// (before).
type tally struct{ own, others, before uint64 }

// weigh returns the weights with this region's count own.
func (c tally) weigh(own uint64) weights {
	w := weight(own)
	return weights{own: w, sum: w + c.others, before: c.before}
}

// phaseStep is the shift of the quotas' layout from one second to the
// next, as a fraction of the headroom: the golden ratio's, which spreads
// the shifts evenly over [0, 1).
const phaseStep = 0.6180339887498949

// phase is where, as a fraction of the headroom, the layout of the
// quotas of a horizon starting at start begins (see [quota]): it moves
// every second of the Unix clock, so that the region whose part holds the
// rounding's spare hit changes, instead of always being the one named
// last. Regions whose horizons start in the same second lay out the
// headroom alike.
func phase(start time.Time) float64 {
	_, f := math.Modf(float64(start.Unix()) * phaseStep)
	return f
}

// quota is this node's share of headroom h for one horizon (see the
// package doc) and the other alive regions' shares of it together. The
// shares are rounded so that they sum to h: the alive regions are laid
// out in name order, each over its share of [0, h), starting at the
// fraction ph of it and wrapping around, and a region takes the whole
// hits that fall in its part,
//
//	q_region = floor(h * (B + num) / den) - floor(h * B / den)
//
// B being ph*den plus the weight of the regions named before it, so that
// the others take h - q_region; the region's nodes each take
// floor(q_region / N). w.sum 0: nothing known, equal shares.
func quota(h, limit uint64, w weights, v *View, floor uint64, ph float64) (q, others uint64) {
	num, den, b := share(limit, w, v, floor)
	b += uint64(float64(den) * ph)
	qr := window.MulDiv(h, b+num, den) - window.MulDiv(h, b, den)
	return qr / uint64(max(v.Nodes, 1)), h - qr
}

// share returns this region's share num/den of the headroom and the
// shares of the alive regions named before it, b/den.
func share(limit uint64, w weights, v *View, floor uint64) (num, den, b uint64) {
	if len(v.Alive) <= 1 {
		return 1, 1, 0
	}
	r := uint64(len(v.Alive))
	if floor == 0 {
		floor = DefaultFloor
	}
	f := max(weight(limit)/(r*floor), 1)
	num, den = w.own+f, w.sum+r*f
	return num, den, min(w.before+rank(v)*f, den-num)
}

// probeCut is how much lower than storeLimit a probe past the quota is
// decided, so that the store admits it only when this node's quota of the
// headroom it reads (less pend) holds its hits: the quota is at least
// floor(x * num / den) / N for a headroom x, which holds hits once
//
//	x >= ceil(hits * N * den / num)
//
// at most storeLimit - hits. whole is false when the limit cannot give
// this node's share hits at any estimate (a share of the whole limit below
// hits): then the cut is 0, and the probe, decided against storeLimit,
// may take hits the others' shares hold, which is why it waits for this
// region's [turn].
func probeCut(storeLimit, limit, hits, pend uint64, w weights, v *View, floor uint64) (cut uint64, whole bool) {
	num, den, _ := share(limit, w, v, floor)
	need := window.MulDivCeil(hits*uint64(max(v.Nodes, 1)), den, num)
	if storeLimit < need {
		return 0, false
	}
	return min(pend+need, storeLimit) - hits, true
}

// turnSlot is the least length of a region's turn at probing a limit too
// small to share (see [turn]).
const turnSlot = time.Second

// turn reports whether now is this region's turn at probing a limit its
// share cannot hold, and if not, how long until it is. The alive regions
// (v.Alive, sorted) take turns in slots of turnSlot aligned to the Unix
// epoch, or of twice the horizon rounded up to whole seconds when that is
// longer, so that every region with the same alive set agrees on whose
// turn it is; a region probes only in the first half of its slot, so that
// what it admitted reaches the others before the next slot begins.
func turn(now time.Time, v *View) (mine bool, wait time.Duration) {
	r := len(v.Alive)
	if r <= 1 {
		return true, 0
	}
	slot := max(turnSlot, (2*v.Horizon+time.Second-1)/time.Second*time.Second)
	ms := now.UnixMilli()
	sm := slot.Milliseconds()
	k := ms / sm
	me := int64(rank(v))
	in := ms - k*sm
	if k%int64(r) == me && in < sm/2 {
		return true, 0
	}
	// The start of this region's next slot.
	next := k - k%int64(r) + me
	if next <= k {
		next += int64(r)
	}
	return false, time.Duration(next*sm-ms) * time.Millisecond
}

// freshOwn returns the hits region admitted at or after the Unix ms cut,
// as the own trails of res (the default sliding window's) hold them: a
// coarse mark counts whole when its last hit is at or after cut. ok is
// false when res carries no trails (another counter).
func freshOwn(res *region.Result, name string, cut int64) (n uint64, ok bool) {
	w := res.SubMs
	if w <= 0 || res.Bucket <= 0 {
		return 0, false
	}
	start := res.Bucket * w // the current bucket's start
	for _, rc := range res.Regions {
		if rc.Region != name {
			continue
		}
		if rc.CurrentTrail.Count() != rc.Current || rc.PreviousTrail.Count() != rc.Previous {
			return 0, false // not a trail counter's result
		}
		n := rc.CurrentTrail.After(max(cut-start, 0) - 1)
		if c := cut - (start - w); c < w {
			n += rc.PreviousTrail.After(max(c, 0) - 1)
		}
		return n, true
	}
	return 0, true // no hits of its own in either bucket
}

// satSub returns a - b, or 0 when b > a.
func satSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// rank is the number of alive regions named before this one.
func rank(v *View) uint64 {
	var k uint64
	for _, r := range v.Alive {
		if r < v.Region {
			k++
		}
	}
	return k
}

// regionCount is a region's count in the current and previous buckets.
type regionCount struct {
	name string
	n    uint64
}

// counts returns the alive regions' counts (see [tally]) and the
// contribution of each silent region to the estimate, from the per-region
// counts of a store result (replicas region~id count for their region).
func counts(res *region.Result, v *View) (c tally, silent map[string]uint64) {
	pw := res.PrevWeight
	var buf [16]regionCount // no allocation up to 16 alive regions
	others := buf[:0]
	for _, rc := range res.Regions {
		name, _, _ := strings.Cut(rc.Region, "~")
		n := rc.Current + rc.Previous
		switch {
		case name == v.Region:
			c.own += n
		case slices.Contains(v.Alive, name):
			i := slices.IndexFunc(others, func(o regionCount) bool { return o.name == name })
			if i < 0 {
				others = append(others, regionCount{name: name})
				i = len(others) - 1
			}
			others[i].n += n
		case slices.Contains(v.Silent, name):
			if silent == nil {
				silent = map[string]uint64{}
			}
			silent[name] += rc.Current + uint64(float64(rc.Previous)*pw)
		}
	}
	for _, o := range others {
		x := weight(o.n)
		c.others += x
		if o.name < v.Region {
			c.before += x
		}
	}
	return c, silent
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
