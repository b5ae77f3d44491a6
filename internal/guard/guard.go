package guard

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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

// Guard is the burst guard and partition share of one node. The zero value
// is not usable: create it with [New]. It is safe for concurrent use.
type Guard struct {
	cfg    Config
	seed   maphash.Seed
	shards [64]shard
	reused atomic.Uint64 // hits the store admitted in the place of this region's that left (see refill)
	// exchanging is set by the first DirtyDemand: until the node sends
	// what it refuses, it counts none of it (see refuse).
	exchanging atomic.Bool
}

type shard struct {
	mu     sync.Mutex
	keys   map[string]*entry
	demand map[string]*demand // refused hits, by key (see demand.go)
	dirty  []string           // keys whose own demand changed since DirtyDemand
}

// entry is one key's horizon at this node.
type entry struct {
	start    time.Time     // the horizon's start
	horizon  time.Duration // its length
	quota    uint64        // hits this node may admit in the horizon
	used     uint64        // hits admitted or reserved in it
	admitted uint64        // hits the store admitted in it
	h0       uint64        // the headroom the horizon's first store result read
	over     uint64        // how far that result's estimate was past the limit (h0 is then 0)
	charged  uint64        // the limit, less the silent regions' charge, that result was read against
	alive    int           // the most alive regions a view of this horizon had
	alive0   int           // the alive regions of the view it began under
	silent0  int           // and the silent ones, charged
	frozen   bool          // more were alive than when the quota was set: it no longer grows
	t0       time.Time     // when
	oldest   uint64        // the oldest (sub-)bucket's count in that result
	subMs    int64         // its length in ms
	until    time.Time     // when it stops overlapping the window
	known    bool          // quota comes from a store result of this horizon
	headroom uint64        // the headroom after the last store result (charged)
	hAt      time.Time     // when that result was read
	seen     bool          // headroom is set
	weight   weights       // the alive regions' counts in the last result
	wAlive   []string      // the alive regions of the view weight was read under
	sharing  uint64        // the alive regions that admit by their shares, in the last result (see sharing)
	silent   []heldCount   // silent regions' counts in the last result
	// lost is the other regions' counts that the results before the
	// store lost its counts held (see loseCounts): still in the window,
	// no longer in the store, and not restored while their regions are
	// silent (a repair's answers hold the asker's region's counts and the
	// answerers' own); charged while they are (see lostHeld).
	lost     []heldCount
	lostAt   time.Time     // when the node found the loss
	lastSeen []regionCount // the other regions' counts as last read while each was heard (see remember)
	unseen   []regionCount // the silent regions' largest shares unheard, in the last result (see unseenShares)
	trails   *trails       // the trail counter's state in that result, when it has one
	last     *trails       // the trails of an earlier horizon's first result, until this one has its own
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
	// A node asks once per slot in the stagger: staggered is the end of
	// the slot of its last ask, admitted or in flight (asking, with
	// unasked the value before it, restored when the store denies it).
	staggered, unasked time.Time
	asking             bool
	// Reuse (see refill): what of this region's admissions left the
	// window since tokAt and was credited to its nodes (tokenized, in
	// this horizon), by slot of reuseSlot (tok[1] the slot tokSlot, tok[0]
	// the one before), as the region's hits, a node's part being 1/N of
	// them; the quota added by reuse in this horizon (reuseQ), and the
	// hits of it whose store answer is awaited (reusing).
	tokAt           time.Time
	tok             [2]uint64
	tokSlot         int64
	tokenized       uint64
	reuseQ, reusing uint64
	r0              uint64 // the reserve at t0 (see trails.reserve)
	// rho is the part of what leaves that the region does not reuse, in
	// 1/unit (unit less [reuseShare]).
	rho uint64
	// losses is View.Losses when the last store result was read.
	losses uint64
	// late is the late regions' shares of the largest headroom this node
	// read since they turned late (see [View.lateAfter]), held out of
	// its quotas until they are heard again: what they admit meanwhile
	// is in no estimate here, and a split not yet detected lets each side
	// take its shares of the headroom again every horizon.
	late uint64
}

// unit is the scale of reuse credits: a hit is unit of them.
const unit = 1024

// reuseShare is the part, in 1/unit, of what leaves of a region's
// admissions that its nodes reuse: all of it while its part of the
// alive regions' count in the window (own of own+others) is at most its
// part num/den of their demand (see [demandPart]), and the square root
// of that part over its part of the count beyond: what it does not reuse
// goes to the shares, so that a region that took more than the others
// while they asked as much (it began first) gives it back, and regions
// admit in proportion to what they are asked, as an exact sliding log
// over all of them would (docs/design.md, "Reuse", has what the square
// root gains over the part itself).
func reuseShare(own, others, num, den uint64) uint64 {
	if own == 0 || den == 0 {
		return unit
	}
	r := float64(num) * float64(own+others) / (float64(den) * float64(own))
	if r >= 1 {
		return unit
	}
	return uint64(math.Sqrt(r) * unit)
}

// refill credits this node with its part of what its region's admissions
// left the window since the last refill of this horizon, at most a slot
// ago: a node may admit in the place of its region's hits that leave,
// at once, without waiting for a share of the headroom, since the count
// does not grow by it. The other alive regions hold what leaves of this
// region's for a horizon and reuseAge (see [trails.reserve]), and what
// is credited does not go to the shares of the headroom (tokenized).
// Credits last two slots at most. What left before now and is not
// credited here is never credited: the headroom read from now on holds it
// (see Done), and the shares take it.
func (e *entry) refill(now time.Time, v *View) {
	if !e.reuses(v) {
		e.tok, e.tokAt = [2]uint64{}, now
		return
	}
	tr := cmp.Or(e.trails, e.last)
	e.age(now)
	// Credits go to the slot of the instant the hits left at, so that
	// none lasts longer than reuseAge.
	cur := time.UnixMilli(e.tokSlot * reuseSlot.Milliseconds()) // the current slot's start
	from := cur.Add(-reuseSlot)
	if e.tokAt.After(from) {
		from = e.tokAt
	}
	if e.t0.After(from) {
		from = e.t0
	}
	credit := func(a, b time.Time, i int) {
		if b.After(a) {
			d := window.MulDivCeil(tr.reusable(a, b, e.horizon), unit-e.rho, 1) // saturating
			e.tok[i] = window.SatAdd(e.tok[i], d)
			e.tokenized = window.SatAdd(e.tokenized, d)
		}
	}
	if from.Before(cur) {
		credit(from, cur, 0)
		from = cur
	}
	credit(from, now, 1)
	e.tokAt = now
}

// reuses reports whether this node reuses what leaves of its region's
// admissions under v (see refill): on the default sliding window, at a
// limit whose rate and window allow it ([reuses]), of at least twice the
// pool's nodes, in a region whose nodes share a store. Apart, a node of
// the region hears its others one flush later: they would reuse what left
// unheard by it. A limit less than twice the pool is near where the
// stagger decides every hit (a limit smaller than the pool), which holds
// nothing back for reuse: a region whose view counts fewer nodes than
// another's (one joined there) would reuse beside that one's stagger.
func (e *entry) reuses(v *View) bool {
	tr := cmp.Or(e.trails, e.last)
	return tr != nil && reuses(tr.l, e.horizon) && !v.Apart && tr.l.Limit >= 2*uint64(v.poolNodes())
}

// age drops the credits of refill older than the slot before now's.
func (e *entry) age(now time.Time) {
	slot := now.UnixMilli() / reuseSlot.Milliseconds()
	switch d := slot - e.tokSlot; {
	case d == 1:
		e.tok = [2]uint64{e.tok[1], 0}
	case d != 0:
		e.tok = [2]uint64{}
	}
	e.tokSlot = slot
}

// reuse takes hits from the credits of refill (which runs first, and
// drops them where the region does not reuse), oldest first, and adds
// them to the horizon's quota, unless the credits do not hold them.
func (e *entry) reuse(now time.Time, hits uint64, v *View) {
	e.age(now)
	need := window.MulDivCeil(hits, uint64(max(v.Nodes, 1))*unit, 1) // saturating
	if window.SatAdd(e.tok[0], e.tok[1]) < need {
		return
	}
	t := min(e.tok[0], need)
	e.tok[0] -= t
	e.tok[1] -= need - t
	e.reuseQ += hits
	e.reusing += hits
}

// reserved returns what of the other alive regions' admissions left the
// window in the reuse reach before t (see [trails.reserve]; v's ages, as
// of now, are at least theirs at t), by the trails of this horizon's
// first result, or else an earlier one's; ok is false when neither holds
// t's bucket.
func (e *entry) reserved(t time.Time, v *View) (uint64, bool) {
	tr := cmp.Or(e.trails, e.last)
	if tr == nil {
		return 0, false
	}
	return tr.reserve(t, e.horizon, v.Ages)
}

// unreused returns what this node holds of what its region's own
// admissions left the window from a to b and does not reuse (rho of it,
// see refill), within b's bucket: the other regions hold all of what
// leaves of this region's for the reserve's reach (see
// [trails.reserve]), so what the region does not reuse reaches their
// headroom only after it; taken here at once, by this region's share, it
// would go to the region that does not reuse it, and a region that took
// more than its share would keep most of it.
func (e *entry) unreused(a, b time.Time) uint64 {
	if e.rho == 0 || e.trails == nil || !reuses(e.trails.l, e.horizon) {
		return 0
	}
	w := e.trails.l.WindowMs()
	a = time.UnixMilli(max(a.UnixMilli(), b.UnixMilli()/w*w))
	return window.MulDivCeil(e.trails.leavingOf(ownRegion, a, b), e.rho, unit)
}

// keyView is v as this node decides key under it: the regions quiet for
// the key counted as silent (see quiet), and isolated when that view is
// crossed ([View.Isolated]). A region quiet here that the other alive
// regions still hear may be cut from this one alone (one cut link), and
// then this one is quiet to it: charged only an equal share by each
// other, the two would each admit the limit less that share, about twice
// the limit with many regions.
func (e *entry) keyView(v *View, lim window.Limit) *View {
	return e.quiet(v, lim).Isolated()
}

// quiet returns v with the alive regions that have not been heard from for
// a quarter of the key's bucket (and at least quietMin) counted as
// silent, for this key: on a window not much longer than the suspicion
// timeout, what a region admits while it is unheard but not yet silent is
// a large part of the window. Until a store result gives the bucket's
// length, a node new to the key takes the shortest a counter of lim may
// have: half its window. It returns v itself when no region is so quiet.
func (e *entry) quiet(v *View, lim window.Limit) *View {
	ms := e.wMs
	if ms <= 0 && lim.Calendar.Unit == 0 {
		ms = lim.Window.Milliseconds() / 2
	}
	if ms <= 0 || len(v.Ages) == 0 {
		return v
	}
	after := e.quietAfter(lim)
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

// quietAfter is how long unheard before [entry.quiet] counts a region
// silent for the key: a quarter of its bucket, at least quietMin.
func (e *entry) quietAfter(lim window.Limit) time.Duration {
	ms := e.wMs
	if ms <= 0 && lim.Calendar.Unit == 0 {
		ms = lim.Window.Milliseconds() / 2
	}
	return max(time.Duration(ms)*time.Millisecond/4, quietMin)
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

// othersFreed returns the other alive regions' shares of what left the
// window after this node's last store result and within the horizon
// before now: each of them may have read the window after this node did,
// with that much more headroom, and taken its share of it, which this
// node's own reads (setQuota's others) do not hold.
func (e *entry) othersFreed(now time.Time, limit uint64, v *View, floor uint64) uint64 {
	if !e.known || len(v.Alive) <= 1 {
		return 0
	}
	from := now.Add(-e.horizon)
	if e.hAt.After(from) {
		from = e.hAt // the last result, at or after t0, the horizon's first
	}
	var freed uint64
	switch {
	case !now.After(from):
	case e.trails != nil:
		freed = e.trails.leaving(from, now)
	case e.oldest > 0 && e.subMs > 0:
		freed = e.oldestFreed(from, now)
	}
	if freed == 0 {
		return 0
	}
	_, o := quota(freed, limit, e.weight, v, floor, phase(e.start))
	return o
}

// oldestFreed is what the oldest bucket of the horizon's first result
// frees from a to b on a counter without trails: its weight falls
// linearly until it leaves the window (at until), rounded up.
func (e *entry) oldestFreed(a, b time.Time) uint64 {
	if e.until.Before(b) {
		b = e.until
	}
	el := b.Sub(a).Milliseconds()
	if el <= 0 || e.subMs <= 0 {
		return 0
	}
	return window.MulDivCeil(e.oldest, uint64(el), uint64(e.subMs))
}

// setQuota raises the horizon's quota to this node's share of headroom h
// net of held and of what is pending at now, and records the other
// regions' shares of h itself, before either is taken off: what they may
// take is their shares of their own headroom, which is at most h (the
// store's estimate lacks only admissions), not of this region's net of
// what it takes as pending (each region takes off its own). held is what
// of h this region leaves to the others (see unreused): they see it in
// their headroom later, and take their shares of it there, so it stays
// in the shares this node holds pending for them.
func (e *entry) setQuota(now time.Time, h, held, limit uint64, w weights, v *View, floor uint64) {
	ph := phase(e.start)
	_, o := quota(h, limit, w, v, floor, ph)
	e.others = max(e.others, o)
	if e.frozen {
		// More regions are alive than when the quota was set: this
		// node's quota does not grow, but the others take their shares,
		// and their first probes under the new view were decided by
		// equal shares (their weights lacked the regions heard again, as
		// this node's did), whatever the weights read since say. The next
		// horizon holds the larger as pending.
		_, oe := quota(h, limit, weights{}, v, floor, ph)
		e.others = max(e.others, oe)
		return
	}
	h = satSub(h, held)
	if p := e.pending(now); h > p {
		h -= p
	} else {
		h = 0
	}
	h = satSub(h, e.holdLate(now, h, limit, v, floor))
	q, _ := quota(h, limit, w, v, floor, ph)
	e.quota = max(e.quota, q)
}

// noteLoss reports whether the store lost its counts since e's last
// result (View.Losses grew), and then records what it lost of the other
// regions (see loseCounts).
func (e *entry) noteLoss(now time.Time, v *View) bool {
	if !e.seen || e.losses == v.Losses {
		return false
	}
	e.loseCounts()
	e.lostAt = now
	return true
}

// loseCounts records, as the store loses its counts, the other regions'
// counts that the last results held (see entry.lost): the silent regions'
// as last read, and every other region's trails of the horizon's first
// result, since a region alive now may turn silent before the repair has
// its counts back.
func (e *entry) loseCounts() {
	add := func(h heldCount) {
		i := slices.IndexFunc(e.lost, func(l heldCount) bool { return l.id == h.id && l.bucket == h.bucket })
		switch {
		case i < 0:
			e.lost = append(e.lost, h)
		case h.cur+h.prev > e.lost[i].cur+e.lost[i].prev:
			e.lost[i] = h
		}
	}
	for _, h := range e.silent {
		add(h)
	}
	if tr := cmp.Or(e.trails, e.last); tr != nil {
		for i, who := range tr.whose {
			if who == ownRegion || slices.ContainsFunc(e.silent, func(h heldCount) bool { return h.region == tr.name[i] }) {
				continue // its own, or a silent one's, read since
			}
			add(heldCount{region: tr.name[i], id: tr.name[i] + "#" + strconv.Itoa(i), bucket: tr.bucket,
				cur: tr.cur[i].Count(), prev: tr.prev[i].Count(), curTrail: lowTrail(tr.cur[i]), prevTrail: lowTrail(tr.prev[i])})
		}
	}
}

// holdLate returns what of headroom h this node holds for the alive
// regions that are late at now (see [View.lateAfter]): their shares of
// the largest headroom read since they turned late, kept until every
// region is heard again. Each side of a split that nobody has detected
// yet then takes at most its shares of the headroom it had, not its
// shares of what is left of it again every horizon.
func (e *entry) holdLate(now time.Time, h, limit uint64, v *View, floor uint64) uint64 {
	num, den := e.unheardShare(now, limit, v, floor, v.lateAfter(e.horizon))
	if num == 0 {
		e.late = 0
		return 0
	}
	e.late = max(e.late, window.MulDivCeil(h, num, den))
	return e.late
}

// unheardShare is the shares, num/den by the weights of the last result
// (equal when none), of the alive regions other than this one that have
// not been heard from for longer than d at now.
func (e *entry) unheardShare(now time.Time, limit uint64, v *View, floor uint64, d time.Duration) (num, den uint64) {
	r := uint64(len(v.Alive))
	if r <= 1 || !v.unheardFor(now, d) {
		return 0, 1
	}
	f := max(weight(limit)/(r*max(floor, 1)), 1)
	w := e.weightsFor(v)
	den = w.sum + r*f
	for _, a := range v.Alive {
		if a == v.Region || v.Ages[a] <= d {
			continue
		}
		num += f
		if w.sum == 0 {
			continue
		}
		for _, k := range e.lastSeen {
			if k.name == a {
				num += weight(k.n)
			}
		}
	}
	return min(num, den), den
}

// weightsFor returns the weights of the last result when they weigh
// every region alive in v, else none (equal shares): weights read while
// fewer regions were alive (a crossed view, a region silent then) lack
// the others, and would give this region nearly the whole headroom.
func (e *entry) weightsFor(v *View) weights {
	if !e.weighs(v) {
		return weights{}
	}
	return e.weight
}

// weightsAt is weightsFor at now: when the last result is a window old or
// more, this region weighs nothing in them. Its count then is partly out
// of the window now (a weight counts the current and the previous
// bucket), while the regions that read the counts since weigh it by what
// is left: by its count of then, a region idle for most of two windows
// took most of a headroom that the busy region, weighing it at nothing,
// took too (seed 10235 of the fault search; docs/design.md has the
// figures). Reading the key again at a window (it is read at two, see
// NeedsRead) changed the stagger of other schedules.
func (e *entry) weightsAt(now time.Time, v *View, lim window.Limit) weights {
	w := e.weightsFor(v)
	if lim.Window > 0 && now.Sub(e.hAt) >= lim.Window {
		w.sum -= w.own
		w.own = 0
	}
	return w
}

// weighs reports whether the last result's weights weigh every region
// alive in v.
func (e *entry) weighs(v *View) bool {
	for _, r := range v.Alive {
		if !slices.Contains(e.wAlive, r) {
			return false
		}
	}
	return true
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
		g.shards[i].demand = map[string]*demand{}
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
// returns limit and reserves nothing; under one Restoring a store that
// lost its counts, it refuses, retryable after v.Restoring or a horizon,
// whichever is sooner, and so under one Joining (see [View.Joining]).
func (g *Guard) Admit(now time.Time, key string, lim window.Limit, hits uint64, v *View) (ok bool, storeLimit uint64, retryAfter time.Duration) {
	r, storeLimit, retryAfter := g.AdmitReason(now, key, lim, hits, v)
	return r == Admitted, storeLimit, retryAfter
}

// AdmitReason is [Guard.Admit] with what it decided: Admitted when the
// request goes to the store, else why it refused it.
func (g *Guard) AdmitReason(now time.Time, key string, lim window.Limit, hits uint64, v *View) (r Reason, storeLimit uint64, retryAfter time.Duration) {
	r, storeLimit, retryAfter, _ = g.AdmitRoom(now, key, lim, hits, v)
	return r, storeLimit, retryAfter
}

// AdmitRoom is [Guard.AdmitReason] that also says, of a request refused
// for this node's share of the horizon (Share), how many hits its quota
// holds still: a request of that many would go to the store now, unless
// another takes them first. It is 0 for every other answer. A caller
// that may take fewer hits than it asked (a quota lease's charge) asks
// again for that many, rather than for none until the next horizon.
func (g *Guard) AdmitRoom(now time.Time, key string, lim window.Limit, hits uint64, v *View) (r Reason, storeLimit uint64, retryAfter time.Duration, room uint64) {
	limit := lim.Limit
	if v.Off() {
		return Admitted, limit, 0, 0
	}
	if v.Restoring > 0 {
		return Restoring, limit, v.RestoringRetry(), 0
	}
	if v.Joining > 0 {
		return Joining, limit, v.JoiningRetry(), 0
	}
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, storeLimit, retryAfter = g.admit(s, now, key, lim, hits, v)
	if e := s.keys[key]; r == Share && e != nil {
		room = min(satSub(e.quota+e.reuseQ, e.used), storeLimit)
	}
	if r != Admitted {
		g.refuse(s, key, lim, hits, now, v.Horizon)
	}
	return r, storeLimit, retryAfter, room
}

// admit is [Guard.AdmitReason] past the views that decide alone, with
// s.mu held.
func (g *Guard) admit(s *shard, now time.Time, key string, lim window.Limit, hits uint64, v *View) (r Reason, storeLimit uint64, retryAfter time.Duration) {
	limit := lim.Limit
	e := g.entryOf(s, key, now)
	if e == nil {
		return Admitted, charge(limit, limit, nil, nil, 0, lim, v.Isolated(), 0), 0 // full: the store alone decides
	}
	if e.noteLoss(now, v) {
		// The store lost its counts since the last result (and no read
		// since told what it holds now): what that result held of the
		// silent regions is gone, and its headroom with it.
		e.silent, e.seen, e.losses = nil, false, v.Losses
	}
	v = e.keyView(v, lim)
	if len(e.lost) > 0 {
		// A region heard a horizon after the loss has its counts back in
		// the store (its repair answer or its resend).
		e.lost = slices.DeleteFunc(e.lost, func(h heldCount) bool {
			a, ok := v.Ages[h.region]
			return ok && !slices.Contains(v.Silent, h.region) && !now.Add(-a).Before(e.lostAt.Add(v.Horizon))
		})
	}
	storeLimit = charge(limit, limit, e.silent, e.unseen, now.UnixMilli(), lim, v, e.quietAfter(lim)+v.Horizon)
	storeLimit = satSub(storeLimit, lostHeld(e.lost, v.Silent, now.UnixMilli(), lim))
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
		// horizon (pending fades only as a fresh read takes them in),
		// what was pending when it was read (their shares of the horizon
		// before, which a fresh read would hold by now and it does not),
		// and, after a gap of a horizon or more, whatever they took
		// meanwhile, so then the first request is a probe and the rest
		// wait for it.
		var pend, recent, ownPrev uint64
		var ownPrevOK bool
		if !e.start.IsZero() {
			if gap := now.Sub(e.start.Add(e.horizon)); gap < e.horizon {
				// The others' shares were of the headroom as this node
				// read it; they may have read the window later, with more
				// of it freed, and taken their shares of that too.
				e.others = window.SatAdd(e.others, e.othersFreed(now, limit, v, g.cfg.Floor))
				pend = window.MulDivCeil(e.others, uint64(e.horizon-gap), uint64(e.horizon))
				if num, den := e.unheardShare(now, limit, v, g.cfg.Floor, 2*e.horizon); num > 0 {
					// A region not heard from for two horizons may be
					// admitting its shares of each as before, and none of it
					// arrives: its part of what was pending stays so, and
					// its share of the last horizon adds to it, until it is
					// heard again or counted quiet (see quiet).
					pend = window.SatAdd(pend, window.MulDivCeil(e.pend, num, den))
				}
				recent = e.used
				ownPrev, ownPrevOK = e.own0, e.own0ok
				h = satSub(window.SatAdd(h, pend), window.SatAdd(e.others, e.pend))
				if e.known && len(v.Alive) > e.alive0 {
					// Regions alive now were silent to the previous
					// horizon, or the view was crossed: what they admitted
					// in it unheard was charged, not held pending. Hold
					// their part of the charge for one more horizon, as
					// their shares would be (the regions still silent are
					// charged still).
					held := window.MulDivCeil(satSub(limit, e.charged), uint64(len(v.Alive)-e.alive0), uint64(max(e.silent0, 1)))
					pend = max(pend, window.MulDivCeil(held, uint64(e.horizon-gap), uint64(e.horizon)))
				}
			} else {
				h = 0
			}
		}
		if r, ok := e.reserved(e.hAt, v); ok {
			// The others may have admitted in the place of what of theirs
			// had left the window by then, unheard; and what of this
			// region's left and is still credited to this node (see refill)
			// is its own to reuse.
			e.age(now)
			h = satSub(h, window.SatAdd(r, window.MulDivCeil(e.tok[0]+e.tok[1], 1, unit)))
		} else if e.trails != nil || e.last != nil {
			h = 0
		}
		if e.seen && now.Sub(e.hAt) >= 2*max(v.Horizon, time.Millisecond) {
			// The last store result is two horizons old or more (this
			// node's requests since were all refused before the store,
			// as staggered asks that were not its turn are): its
			// headroom lacks whatever the others took since. The first
			// request is a probe.
			h = 0
		}
		*e = entry{start: now, horizon: max(v.Horizon, time.Millisecond), headroom: e.headroom, seen: e.seen, hAt: e.hAt, weight: e.weight, wAlive: e.wAlive, lastSeen: e.lastSeen, unseen: e.unseen, sharing: e.sharing, silent: e.silent, lost: e.lost, lostAt: e.lostAt, last: cmp.Or(e.trails, e.last),
			tok: e.tok, tokSlot: e.tokSlot, tokAt: e.tokAt, rho: e.rho,
			pend: pend, recent: recent, ownPrev: ownPrev, ownPrevOK: ownPrevOK, staggered: e.staggered, alive: len(v.Alive), alive0: len(v.Alive), silent0: len(v.Silent),
			late: e.late}
		e.setQuota(now, h, 0, limit, e.weightsAt(now, v, lim), v, g.cfg.Floor)
	}
	if len(v.Alive) > e.alive {
		// More regions share the headroom than when this horizon's quota
		// was set (a region heard again, or a crossed view resolved): what
		// is left of it was their share too, and the weights it was shared
		// by lack them. The node keeps of what it had left only its part
		// among the regions alive now, as if they weighed alike, and it
		// does not grow until the next horizon. (Keeping none refused
		// requests far below the limit for the rest of the horizon, as at
		// a cluster's start, when each region hears the others.)
		left := satSub(e.quota, e.used)
		e.quota = e.used + window.MulDiv(left, uint64(max(e.alive, 1)), uint64(len(v.Alive)))
		e.alive, e.frozen = len(v.Alive), true
	}
	retry := max(e.start.Add(e.horizon).Sub(now), time.Millisecond)
	if hits > storeLimit {
		return Charged, storeLimit, retry
	}
	if limit < uint64(v.poolNodes()) {
		// A limit smaller than the pool: no share holds a hit for every
		// node, and shares and staggered probes would take the same
		// headroom twice, so the stagger decides every hit, with the one
		// hit past the limit that such a limit's bound allows
		// (max(1.10 L, L + 1)).
		if end := v.Grown.Add(e.horizon); now.Before(end) {
			// The pool grew past the limit a horizon ago or less: the
			// shares the others decided by until then may have taken the
			// headroom, unheard yet, and the stagger's bases do not hold
			// it (see View.Grown).
			return Stagger, storeLimit, end.Sub(now)
		}
		return e.stagger(now, hits, storeLimit, 0, 0, 0, v, smallSlack)
	}
	// What this region's admissions left the window: its nodes admit in
	// their place first (see refill).
	e.refill(now, v)
	e.reuse(now, hits, v)
	// The first request of a horizon whose quota is not yet known from a
	// store result goes to the store as a probe even when the stale quota
	// is exhausted: the store still decides on the fresh estimate, and Done
	// sets the quota from it. Without the probe a key whose last known
	// headroom was 0 would never learn that it grew back.
	probe := e.used == 0 && !e.known && e.reuseQ == 0
	// What the silent regions' charge grew by since the horizon's first
	// result: the window's slide frees their held hits too, and the
	// charge takes the place of those (see charge).
	grown := satSub(e.charged, storeLimit)
	if e.used+hits > e.quota+e.reuseQ && e.known && e.trails != nil {
		// The default sliding window: what left the estimate since the
		// horizon's first result, recomputed from its trails, less what
		// of it this region's nodes reuse and what the others may have.
		//
		// h0 lacks what the others admitted since t0, their shares of it
		// and in the place of what of theirs left the window: that is
		// held as it was at t0 (r0), and what of theirs left since is
		// not freed for this one.
		r := e.r0
		if reuses(lim, e.horizon) {
			r += e.trails.leavingOf(aliveRegion, e.t0, now)
		}
		e.setQuota(now, satSub(e.h0+e.trails.freed(now), e.over+grown+window.MulDivCeil(e.tokenized, 1, unit)+r), e.unreused(e.t0.Add(-e.horizon-reuseAge), e.t0)+e.unreused(e.t0, now), limit, e.weight, v, g.cfg.Floor)
	} else if e.used+hits > e.quota && e.known && e.oldest > 0 {
		// The window slides on within the horizon: the oldest bucket's
		// weight falls linearly until it leaves, freeing capacity that no
		// other region's traffic can have taken from what this region
		// knows. Share it as the headroom is shared.
		if freed := e.oldestFreed(e.t0, now); freed > 0 {
			e.setQuota(now, satSub(e.h0+freed-1, e.over+grown), 0, limit, e.weight, v, g.cfg.Floor)
		}
	}
	// A key this node has no answer for yet has a quota of the limit, not
	// of the headroom, which only the store knows: its first request is
	// a probe too, decided as one past the quota, so that regions that
	// start at once do not each take a share of what others used.
	if e.used+hits > e.quota+e.reuseQ || (probe && !e.seen) {
		if !probe {
			return Share, storeLimit, retry
		}
		held := e.pending(now)
		if r, ok := e.reserved(now, v); ok {
			held = window.SatAdd(held, r)
		}
		// And what is held for the late regions (see holdLate), as
		// from the quotas.
		held = window.SatAdd(held, e.holdLate(now, e.headroom, limit, v, g.cfg.Floor))
		c, whole := probeCut(storeLimit, limit, hits, held, e.weightsAt(now, v, lim), v, g.cfg.Floor)
		if !whole {
			// This node's share of the limit holds no whole request at any
			// estimate: the probe is staggered (see stagger). The regions
			// that admit by their shares also take their shares of what
			// the window's slide frees within their horizons, which may
			// have begun up to a horizon ago and run a horizon on: this
			// region's share of it holds no hit, so it leaves them all of
			// it.
			held := held // pending and the others' reserve (see reserved)
			if tr := cmp.Or(e.trails, e.last); tr != nil {
				held = window.SatAdd(held, tr.leaving(now.Add(-e.horizon), now.Add(e.horizon)))
			}
			// And the regions that admit by their shares take theirs of
			// the headroom this probe reads: the staggered regions'
			// bases and held are laid out over the rest.
			w := e.weightsAt(now, v, lim)
			sh := e.sharing
			if w.sum == 0 {
				sh = sharing(nil, limit, w, v, g.cfg.Floor, nil)
			}
			_, den, _ := share(limit, w, v, g.cfg.Floor)
			return e.stagger(now, hits, storeLimit, held, sh, den, v, 0)
		}
		if c > 0 {
			storeLimit -= c
			e.cut, e.cutLimit = c, storeLimit
		}
	}
	e.used += hits
	return Admitted, storeLimit, 0
}

// stagger lets hits go to the store as a staggered ask (see [stagger]):
// against storeLimit less what it needs past its region's base and held
// (see [staggerNeed]), once per node and slot. held is the other regions'
// pending shares when the ask is a probe whose share holds no whole hit:
// they admit by their shares, and what they took in the last horizon is
// not in this region's store yet; sharing, over den, is their shares of
// the headroom the ask reads (0 when every region is staggered). slack is
// how many hits past the headroom the pool may take: each base but the
// head's is lowered by it, so that the region at base b takes at most
// min(its nodes, h - b + slack) and the pool at most h + slack, and a
// region behind the head admits one hit sooner.
func (e *entry) stagger(now time.Time, hits, storeLimit, held, sharing, den uint64, v *View, slack uint64) (r Reason, limit uint64, retryAfter time.Duration) {
	base, may, wait := stagger(now, v)
	base = satSub(base, slack)
	need := staggerNeed(hits, base, held, sharing, den)
	if !may || need > storeLimit || now.Before(e.staggered) {
		return Stagger, storeLimit, wait
	}
	cut := need - hits
	e.cut, e.cutLimit = cut, storeLimit-cut
	e.unasked, e.staggered, e.asking = e.staggered, now.Add(wait), true
	e.used += hits
	return Admitted, storeLimit - cut, 0
}

// Done records the store's answer to a request that [Guard.Admit] let
// through: res is the store's result, decided against the limit Admit
// returned. The first answer of a horizon sets the horizon's quota from the
// fresh headroom it carries. When the store denied a probe only because
// Admit had lowered its limit to this node's share (the full limit would
// have admitted it), the denial is the guard's: Done returns the time
// left in the horizon (at least 1 ms) for the caller to answer as the
// retry-after of a guard denial, and 0 otherwise. A result the store
// held (region.Result.Held) only gives the request's hits back.
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
	e.noteLoss(now, v)
	if !res.Allowed {
		e.used -= min(e.used, hits)
		if !res.Held {
			g.refuse(s, key, lim, hits, now, v.Horizon)
		}
	}
	if e.reusing > 0 {
		// The answer may be another request's: taking the reuse back on
		// any denial errs on the side of the limit.
		t := min(e.reusing, hits)
		e.reusing -= t
		if !res.Allowed {
			e.reuseQ -= min(e.reuseQ, t)
		} else {
			g.reused.Add(t)
		}
	}
	if res.Held {
		return 0 // the store did not decide: nothing to learn
	}
	if e.asking && res.Limit == e.cutLimit {
		if !res.Allowed {
			e.staggered = e.unasked // the slot's ask is not spent
		}
		e.asking = false
	}
	if res.SubMs > 0 {
		e.wMs = res.SubMs
	}
	v = e.keyView(v, lim)
	var buf [8]regionDemand
	ownDem, dem := demands(s, key, lim, now, v.Horizon, v.Nodes, buf[:0])
	c, silent := counts(res, v, &e.lastSeen, now.UnixMilli(), dem)
	e.unseen = unseenShares(e.unseen, res, v, silent, e.lastSeen, now.UnixMilli(), limit, g.cfg.Floor)
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
	// horizon's first result. What it admitted since an alive region was
	// last heard from is fresh too: a region this node does not hear may
	// not hear it either (a cut link), and weighs it by what it had.
	// Without trails, in a horizon that follows none, a region of several
	// nodes cannot tell which of its count is fresh: it weighs none of it.
	ft, tracked := freshOwn(res, v.Region, earlier(e.start, v.heardAt(now)).Add(-e.horizon).UnixMilli())
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
	e.read(res, c, c.own-min(c.own, fresh)+ownDem, silent, limit, v, g.cfg.Floor, dem)
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
	// A result past the limit (a charge raised, or counts arrived) leaves
	// no headroom until as much has left the window: what slides out
	// first pays that.
	charged := res.Limit
	if e.cut > 0 && res.Limit == e.cutLimit {
		charged += e.cut
	}
	over := satSub(res.Estimate, charged)
	// What left until now is either credited or in the headroom read now,
	// not both.
	e.refill(now, v)
	e.headroom, e.seen, e.hAt, e.losses = rem, true, now, v.Losses
	if res.Allowed {
		e.admitted += hits
	}
	if !now.Before(e.start.Add(e.horizon)) {
		return guardRetry
	}
	if !e.known {
		e.known = true
		e.quota, e.others = 0, 0
		e.h0, e.over, e.charged, e.t0, e.tokAt = before, over, charged, now, now
		// The credits left at t0 are this node's still: the headroom
		// read now holds what they stand for.
		e.age(now)
		e.tokenized = e.tok[0] + e.tok[1]
		e.trails = newTrails(now, lim, hits, res, v)
		if e.trails != nil {
			num, den := demandPart(c.own, ownDem, c.asked)
			if !g.exchanging.Load() {
				// No demand is known: the shares of the headroom stand
				// for it.
				num, den, _ = share(limit, e.weight, v, g.cfg.Floor)
			}
			e.rho = unit - reuseShare(e.trails.estimateOf(now, ownRegion), e.trails.estimateOf(now, aliveRegion), num, den)
		}
		r, _ := e.reserved(now, v)
		e.r0 = r
		e.setQuota(now, satSub(before, window.SatAdd(r, window.MulDivCeil(e.tokenized, 1, unit))), e.unreused(now.Add(-e.horizon-reuseAge), now), limit, e.weight, v, g.cfg.Floor)
		if e.trails != nil {
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
	r, _ := e.reserved(now, v)
	e.setQuota(now, satSub(rem+e.admitted, over+window.MulDivCeil(e.tokenized, 1, unit)+r), e.unreused(now.Add(-e.horizon-reuseAge), now), limit, e.weight, v, g.cfg.Floor)
	return guardRetry
}

// NeedsRead reports whether this node should read key's counts (a store
// decision with Peek, given to [Guard.Learn]) before it asks [Guard.Admit]
// about it: it has no store result for the key, so it knows no weights,
// and its first probe would be decided by an equal share of the headroom
// while the regions that know the weights give its region only its floor
// share; or its last result is two windows old or more, so its weights
// are of counts that have left the window, or a window old while it
// refuses the key, so its weights lack the demand it reports (see
// [Demand]); or its store lost its counts since that result
// (View.Losses).
//
// A key the guard has no room for (its shard full even after a sweep)
// needs none: the store alone decides it; nor does a request Admit will
// refuse while the view holds (Restoring: the store lost its counts, and
// a read would give its weights as none; Joining).
func (g *Guard) NeedsRead(now time.Time, key string, lim window.Limit, v *View) bool {
	if v.Off() || len(v.Alive) <= 1 || lim.Limit < uint64(v.poolNodes()) || v.Restoring > 0 || v.Joining > 0 {
		return false
	}
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.keys[key]; e != nil {
		if !e.seen || e.losses != v.Losses {
			return true
		}
		// A new horizon's probe is decided by this region's share, and
		// weights read while fewer regions were alive would leave it to
		// equal shares (see weightsFor), while the regions that read the
		// counts since give this one its weighted share: read them again
		// first.
		if now.Before(e.start.Add(e.horizon)) {
			return false
		}
		// Weights read two windows ago or more are of counts that have
		// all left the window (a weight counts the current and the
		// previous bucket): a region idle since then would probe by the
		// shares of then, while the regions busy now give it its floor
		// share.
		if lim.Window > 0 && now.Sub(e.hAt) >= 2*lim.Window {
			return true
		}
		// A node refusing a key weighs by a demand that grows as it
		// refuses, while the weights it decides by are as of its last
		// result: it reads them again each window.
		if lim.Window > 0 && now.Sub(e.hAt) >= lim.Window && refusing(s, key, lim, now) {
			return true
		}
		return !e.weighs(e.keyView(v, lim))
	}
	return g.room(s, now)
}

// Share returns this node's share of key's headroom under v, as the
// shares of a horizon weigh it: its region's weight over the alive
// regions' (equal shares while nothing is known of the key, 1 alone),
// divided among the region's alive nodes as the quotas are. It is what a
// quota lease of this node, sized to a part of the limit's rate, takes
// as the node's part: sized by the region's share, every node of a
// region of two leased its clients the region's part, and the guard
// refused what it could not hold. It reads and changes nothing else.
func (g *Guard) Share(now time.Time, key string, lim window.Limit, v *View) float64 {
	if v.Off() || len(v.Alive) <= 1 {
		return 1
	}
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	var w weights
	if e := s.keys[key]; e != nil {
		w = e.weightsAt(now, e.keyView(v, lim), lim)
	}
	num, den, _ := share(lim.Limit, w, v, g.cfg.Floor)
	return float64(num) / float64(den) / float64(max(v.Nodes, 1))
}

// Learn records a read of key's counts (res, a store decision with Peek
// at now; a held one is ignored) that [Guard.NeedsRead] asked for: the
// weights, the silent regions' counts and the headroom, as a store result
// of a request would give them.
func (g *Guard) Learn(now time.Time, key string, lim window.Limit, v *View, res *region.Result) {
	if v.Off() || res.Held {
		return
	}
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := g.entryOf(s, key, now)
	if e == nil {
		return
	}
	e.noteLoss(now, v)
	if res.SubMs > 0 {
		e.wMs = res.SubMs
	}
	v = e.keyView(v, lim)
	var buf [8]regionDemand
	ownDem, dem := demands(s, key, lim, now, v.Horizon, v.Nodes, buf[:0])
	c, silent := counts(res, v, &e.lastSeen, now.UnixMilli(), dem)
	e.unseen = unseenShares(e.unseen, res, v, silent, e.lastSeen, now.UnixMilli(), lim.Limit, g.cfg.Floor)
	fresh, tracked := freshOwn(res, v.Region, v.heardAt(now).Add(-v.Horizon).UnixMilli())
	if !tracked && v.Nodes > 1 {
		fresh = c.own
	}
	e.read(res, c, c.own-min(c.own, fresh)+ownDem, silent, lim.Limit, v, g.cfg.Floor, dem)
	e.refill(now, v)
	e.headroom, e.seen, e.hAt, e.losses = satSub(res.Limit, res.Estimate), true, now, v.Losses
}

// read records what a store result res gives the shares: the weights of
// the alive regions' counts c, this region's being own (its count less
// what the others cannot have heard yet, and its demand), the other
// regions' demand dem, and the silent regions' counts.
func (e *entry) read(res *region.Result, c tally, own uint64, silent []heldCount, limit uint64, v *View, floor uint64, dem []regionDemand) {
	e.weight, e.wAlive = c.weigh(own), v.Alive
	// Which other regions admit by their shares matters only to a node
	// whose own share holds no whole hit (its probes are staggered).
	e.sharing = 0
	if num, den, _ := share(limit, e.weight, v, floor); window.MulDivCeil(uint64(max(v.Nodes, 1)), den, num) > res.Limit {
		e.sharing = sharing(res, limit, e.weight, v, floor, dem)
	}
	keepOlder(silent, e.silent)
	e.silent = silent
}

// entryOf returns key's entry in s, new when it has none, or nil when s
// has no room for it (see room). s.mu must be held.
func (g *Guard) entryOf(s *shard, key string, now time.Time) *entry {
	e := s.keys[key]
	if e == nil && g.room(s, now) {
		e = &entry{}
		s.keys[key] = e
	}
	return e
}

// room reports whether s may track one more key, sweeping it when it is
// full. s.mu must be held.
func (g *Guard) room(s *shard, now time.Time) bool {
	if len(s.keys) >= g.cfg.MaxKeys/len(g.shards) {
		sweep(s, now)
	}
	return len(s.keys) < g.cfg.MaxKeys/len(g.shards)
}

// Sweep forgets the keys whose horizon ended before now, except those
// read with [Guard.Learn] within the last second that no request has
// asked about since. Admit sweeps a shard when it is full; call Sweep
// periodically to free memory sooner.
func (g *Guard) Sweep(now time.Time) {
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		sweep(s, now)
		s.mu.Unlock()
	}
}

// Reused returns the hits the store admitted in the place of this
// region's own hits that left the window (see the package doc), since g
// was created.
func (g *Guard) Reused() uint64 { return g.reused.Load() }

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
	sweepDemand(s, now)
	for k, e := range s.keys {
		if e.start.IsZero() && now.Sub(e.hAt) < learnedTTL {
			continue // read for a request that has not asked yet
		}
		if !now.Before(e.start.Add(e.horizon)) && !now.Before(e.staggered) {
			delete(s.keys, k)
		}
	}
}

// learnedTTL is how long a sweep keeps a key read with [Guard.Learn] that
// no request has asked [Guard.Admit] about since: the read comes right
// before the request that wanted it, and a sweep between the two (a
// node's runs every second, in the background) would forget it and make
// that request read again.
const learnedTTL = time.Second

// satSub returns a - b, or 0 when b > a.
func satSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
