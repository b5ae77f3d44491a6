package guard

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

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
	// Ages is, per member region, the time since it was last heard from:
	// the guard counts a region quiet for a key from it (see
	// [entry.quiet]) and charges a silent region what it may have
	// refilled since (see [heldCount.refilled]). A region absent from it
	// counts as heard just now.
	Ages map[string]time.Duration
	// Unheard is, per alive region, the member regions it said recently
	// that it does not hear (absent: it hears every one). See
	// [View.Crossed].
	Unheard map[string][]string
	// RegionNodes is, per alive region, its alive nodes (see [stagger]);
	// a region absent from it is taken to have Nodes.
	RegionNodes map[string]int
	// Suspicion is how long a region goes unheard before it is silent
	// (see [unseenShares]); 0: unknown.
	Suspicion time.Duration
	// Grown is when the pool last grew by a node that joined, counted by
	// every member from that instant on (zero: never, or not known). A
	// limit the join takes past the pool's nodes is decided by the stagger
	// from then on, and what the others admitted by their shares just
	// before may not have arrived: the stagger asks nothing for a horizon
	// after it.
	Grown time.Time
	// Heartbeat is how often every other region's nodes send this one a
	// frame at the least, when idle (0: unknown). A region unheard for
	// longer than a heartbeat and a horizon is late (see [View.lateAfter]).
	Heartbeat time.Duration
	// Restoring is how much longer, at the most, this node waits for the
	// other regions' answers to the repair of its store (0: none). The
	// store lost its counts, the other regions' with its own, and until
	// the answers bring them back it would decide as if nothing had been
	// admitted: the guard refuses every request meanwhile, retryable after
	// Restoring or a horizon, whichever is sooner.
	Restoring time.Duration
	// Losses is how many times this node found that its store had lost
	// its counts. A key's counts read before the last loss describe a
	// store that no longer holds them (the silent regions' above all,
	// which no repair brings back while they are silent): the guard
	// reads the key again before it decides on them.
	Losses uint64
	// Joining is how much longer, at the most, this node's join may be
	// unknown to the other nodes (0: known). Until they know it, this
	// region's other nodes split its quota of a horizon among one node
	// fewer, each taking a whole part of it, and the other regions' bases
	// in the stagger lack it: the guard refuses every request meanwhile,
	// retryable after Joining or a horizon, whichever is sooner.
	Joining time.Duration
	// Apart reports that a node of this region counts apart: it decides
	// on a store of its own (its in-memory fallback while Redis is
	// unavailable, or the in-memory store), so the region's nodes do not
	// see each other's admissions at once. The stagger then places each of
	// the region's nodes in its rotation, not the region (see [stagger]).
	Apart bool
	// NodeRank is this node's place among its region's alive nodes, in
	// name order (0: first), for [View.Apart].
	NodeRank int
}

// JoiningRetry is when a request refused while v is Joining may be
// retried: the time left, or a horizon (at least 1 ms) when that is
// sooner.
func (v *View) JoiningRetry() time.Duration {
	return min(v.Joining, max(v.Horizon, time.Millisecond))
}

// JoinHold is how long a node that joined the pool holds its decisions
// ([View.Joining]): until memberlist's gossip (an alive message sent to a
// few members every gossip interval, relayed on) has reached every node
// of its region and, across the one-way delay, of the others, three gossip
// intervals and a horizon.
func JoinHold(gossipInterval, horizon time.Duration) time.Duration {
	return 3*gossipInterval + horizon
}

// JoinOneWay is the one-way delay between regions that [CountFromHold]
// allows for, a joining node not having measured it yet, and that a
// node's horizon allows for a region it has not measured a round trip to.
const JoinOneWay = 300 * time.Millisecond

// CountFromHold is how long after a node begins to join the pool's
// members start counting it, all from the same instant, which the node
// announces: JoinHold for a horizon of flush (the flush interval and the
// guard's margin) and JoinOneWay. Every member counts it from that one
// instant, so none decides by a count of the pool that another does not
// share yet (a limit the joined node takes past the pool's nodes is
// decided by shares on one side of that instant and by the stagger on the
// other); see [View.Grown].
func CountFromHold(gossipInterval, flush time.Duration) time.Duration {
	return JoinHold(gossipInterval, flush+JoinOneWay)
}

// RestoringRetry is when a request refused while v is Restoring may be
// retried: the time left, or a horizon (at least 1 ms) when that is
// sooner, since the answers that end the wait may come before it runs out.
func (v *View) RestoringRetry() time.Duration {
	return min(v.Restoring, max(v.Horizon, time.Millisecond))
}

// nodesOf is the alive nodes of alive region r.
func (v *View) nodesOf(r string) int {
	if n := v.RegionNodes[r]; n > 0 {
		return n
	}
	return max(v.Nodes, 1)
}

// poolNodes is the alive nodes of the alive regions.
func (v *View) poolNodes() int {
	n := 0
	for _, r := range v.Alive {
		n += v.nodesOf(r)
	}
	return max(n, 1)
}

// heardAt is when every other alive region had last been heard from, for
// v taken at now (see [View.Ages]).
func (v *View) heardAt(now time.Time) time.Time {
	var age time.Duration
	for _, r := range v.Alive {
		if r != v.Region {
			age = max(age, v.Ages[r])
		}
	}
	return now.Add(-age)
}

// unheardFor reports whether an alive region other than this one has not
// been heard from for longer than d, for v taken at now (its ages are as
// of now).
func (v *View) unheardFor(_ time.Time, d time.Duration) bool {
	if len(v.Ages) == 0 {
		return false
	}
	for _, r := range v.Alive {
		if r != v.Region && v.Ages[r] > d {
			return true
		}
	}
	return false
}

// lateAfter is how long an alive region may go unheard before its silence
// is more than its heartbeats' spacing and their delay explain, for a
// horizon h: a heartbeat interval and a horizon, and at least two
// horizons.
func (v *View) lateAfter(h time.Duration) time.Duration {
	return max(2*h, v.Heartbeat+h)
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
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

// RejoinHold is how long a region heard again after a silence stays
// silent in a [View]: until it has been heard from that long after, when
// the totals it re-sends on hearing this region again (the open and
// previous buckets) can have arrived, two flush intervals plus two
// one-way delays. Taken for alive at once, it would stop being charged
// while the estimate still lacks what it admitted during the silence;
// taken for alive after the hold but heard only within it (a link healed
// for an instant, then cut again), it may never have re-sent them.
func RejoinHold(flush, oneWay time.Duration) time.Duration { return 2 * (flush + oneWay) }

// UnheardHold is how long a region's report of the regions it does not
// hear ([View.Unheard]) holds: a node sends one with every heartbeat
// while it has any, so three heartbeats without one mean it hears every
// region again.
func UnheardHold(heartbeat time.Duration) time.Duration { return 3 * heartbeat }

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
	name   string
	n      uint64
	bucket int64 // the bucket it was read in (see remember)
	at     int64 // for a share (see unseenShares): when its region was last heard, Unix ms
}

// counts returns the alive regions' counts (see [tally]) and the silent
// regions' counts (see [heldCount]), from the per-region counts of a
// store result (replicas region~id count for their region). The other
// alive regions weigh by their counts and their demand dem (see
// [demands]); this region's own count is c.own alone.
func counts(res *region.Result, v *View, seen *[]regionCount, nowMs int64, dem []regionDemand) (c tally, silent []heldCount) {
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
			silent = append(silent, heldCount{region: name, id: rc.Region, bucket: res.Bucket, cur: rc.Current, prev: rc.Previous,
				curTrail: lowTrail(rc.CurrentTrail), prevTrail: lowTrail(rc.PreviousTrail)})
		}
	}
	for _, d := range dem {
		if !slices.Contains(v.Alive, d.region) {
			continue
		}
		i := slices.IndexFunc(others, func(o regionCount) bool { return o.name == d.region })
		if i < 0 {
			others = append(others, regionCount{name: d.region})
			i = len(others) - 1
		}
		others[i].n = window.SatAdd(others[i].n, d.n)
	}
	*seen = remember(*seen, others, v, res, nowMs)
	for _, o := range others {
		c.asked = window.SatAdd(c.asked, o.n)
		x := weight(o.n)
		c.others += x
		if o.name < v.Region {
			c.before += x
		}
	}
	return c, silent
}

// remember returns the other regions' counts as last read while each was
// alive: those of others, read now in res's bucket, except for a region
// last heard from in an earlier bucket (its count there, already seen,
// is what it weighed itself by while this node could still hear it), and
// those of seen for the regions silent in v. It reuses seen's array.
func remember(seen, others []regionCount, v *View, res *region.Result, nowMs int64) []regionCount {
	out := seen[:0]
	for _, k := range seen {
		if slices.Contains(v.Silent, k.name) || k.frozen(v, res, nowMs) {
			out = append(out, k)
		}
	}
	for _, o := range others {
		if !slices.ContainsFunc(out, func(k regionCount) bool { return k.name == o.name }) {
			o.bucket = res.Bucket
			out = append(out, o)
		}
	}
	return out
}

// frozen reports whether k, a count read in an earlier bucket than res's,
// is the region's count in the bucket it was last heard from in. Buckets
// are numbered as [freshOwn] takes them (res.Bucket of res.SubMs); a
// calendar bucket, numbered by its start, never ends before a later one's
// start and so is never frozen.
func (k regionCount) frozen(v *View, res *region.Result, nowMs int64) bool {
	if k.bucket >= res.Bucket || res.SubMs <= 0 {
		return false
	}
	heard := nowMs - v.Ages[k.name].Milliseconds()
	return heard < (k.bucket+1)*res.SubMs
}

// heldCount is a silent region's counts in the current and previous
// buckets as a store result read them. Nothing newer arrives from a region
// this node does not hear, so what they add to the estimate only shrinks
// as the window slides: [heldCount.at] recomputes it at a later decision.
type heldCount struct {
	region, id          string // the region, and the replica (region~id) the counts are of
	bucket              int64
	cur, prev           uint64
	curTrail, prevTrail window.Trail
	olderTrail          window.Trail // the bucket before prev, kept from an earlier result (see keepOlder)
}

// heldMarks bounds the marks a [heldCount] keeps of each trail.
const heldMarks = 8

// lowTrail is a copy of t in at most heldMarks marks that never counts
// more of it in the window than t does: each kept mark stands for a run
// of t's marks, with their hits, at the earliest of their offsets, so it
// leaves the window when the first of them does. Held as high as t, a
// silent region would be charged less than its share once part of the
// run had left.
func lowTrail(t window.Trail) window.Trail {
	if len(t) <= heldMarks {
		return slices.Clone(t)
	}
	run := (len(t) + heldMarks - 1) / heldMarks
	out := make(window.Trail, 0, heldMarks)
	for i := 0; i < len(t); i += run {
		out = append(out, window.Mark{At: t[i].At, Cum: t[min(i+run, len(t))-1].Cum})
	}
	return out
}

// lostHeld is what the silent regions' counts in lost (see entry.lost)
// still hold in the window of lim at nowMs: hits the store no longer
// counts, charged on top of the silent regions' shares, since those
// shares are charged less what the store holds of them.
func lostHeld(lost []heldCount, silent []string, nowMs int64, lim window.Limit) uint64 {
	var n uint64
	for i := range lost {
		if slices.Contains(silent, lost[i].region) {
			n = window.SatAdd(n, lost[i].at(nowMs, lim))
		}
	}
	return n
}

// at is what h adds to the estimate of lim at nowMs, as the store would
// count it: by its trails for the default sliding window, else by
// [window.Limit.Estimate] (the current bucket's count for a calendar one).
func (h *heldCount) at(nowMs int64, lim window.Limit) uint64 {
	_, b := lim.BucketAt(nowMs)
	c, prevTrail := window.Counts{Cur: h.cur, Prev: h.prev}, h.prevTrail
	switch {
	case b == h.bucket:
	case lim.Window > 0 && b == h.bucket+1:
		c, prevTrail = window.Counts{Prev: h.cur}, h.curTrail
	default:
		return 0
	}
	switch {
	case lim.Algorithm.Trails():
		return window.SatAdd(c.Cur, prevTrail.After(nowMs-b*lim.WindowMs()))
	case lim.Window > 0:
		return lim.Estimate(nowMs, c)
	}
	return c.Cur
}

// refilled is what of h's hits left the window between t0, when its region
// was last heard, and t0+d (at most nowMs), and so may have been admitted
// again by that region before it could tell that it was unheard: a region
// that keeps its window full refills what slides out, and those hits are
// in no estimate here. They leave a window after they left. It counts from
// the default sliding window's trails, and is 0 for other counters.
func (h *heldCount) refilled(t0 int64, d time.Duration, nowMs int64, lim window.Limit) uint64 {
	if !lim.Algorithm.Trails() || lim.Window <= 0 {
		return 0
	}
	w := lim.WindowMs()
	a, b := max(t0, nowMs-w)-w, min(t0+d.Milliseconds(), nowMs)-w
	if a >= b {
		return 0
	}
	var n uint64
	in := func(t window.Trail, start int64) {
		n = window.SatAdd(n, satSub(t.After(a-start), t.After(b-start)))
	}
	start := h.bucket * w
	in(h.curTrail, start)
	in(h.prevTrail, start-w)
	in(h.olderTrail, start-2*w)
	return n
}

// keepOlder gives each of silent the trail of the bucket before its
// previous one from old, the silent counts of an earlier result: a result
// in a later bucket no longer holds it, and [heldCount.refilled] may
// still need it.
func keepOlder(silent, old []heldCount) {
	for i := range silent {
		for _, o := range old {
			if o.id != silent[i].id {
				continue
			}
			switch o.bucket {
			case silent[i].bucket - 1:
				silent[i].olderTrail = o.prevTrail
			case silent[i].bucket:
				silent[i].olderTrail = o.olderTrail
			}
		}
	}
}

// charge takes the silent regions' unseen shares off h (a limit or a
// headroom) when v says this side charges them: the silent regions
// together are charged what they may have admitted that this side does
// not see, each region r max(share - held, refilled), held being what
// the estimate of lim at nowMs holds of it (see [heldCount.at]; 0 when
// unknown) and refilled what it may have admitted again, unheard, in the
// undetected time after it was last heard (see [heldCount.refilled]).
//
// Once they can tell that they are unheard, the silent regions admit at
// most their equal shares, ceil(limit/R_all) each. Until then they admit
// by their weighted shares, which after a quiet spell elsewhere are most
// of the headroom, and none of it reaches this side: while what a region
// may have admitted in that undetected time can still be in the window,
// its share is the larger of its equal one and the largest it could have
// given itself then (see [unseenShares]); under a limit below the pool's
// nodes, decided by the stagger, a hit per node of the region, as at the
// head of a slot (the whole limit when its nodes are not known here). The
// charge is the larger of the two sums.
func charge(h, limit uint64, silent []heldCount, unseen []regionCount, nowMs int64, lim window.Limit, v *View, undetected time.Duration) uint64 {
	if !v.Charge() {
		return h
	}
	equal := window.MulDivCeil(limit, 1, uint64(len(v.Alive)+len(v.Silent)))
	// A limit below the pool's nodes is decided by the stagger, where a
	// region at the head of a slot may take a hit per node.
	pool := uint64(v.poolNodes())
	for _, name := range v.Silent {
		pool += uint64(v.nodesOf(name))
	}
	staggered := limit < pool
	var needEqual, needWeighted uint64
	for _, name := range v.Silent {
		var c, refill uint64
		t0 := nowMs - v.Ages[name].Milliseconds()
		for i := range silent {
			if silent[i].region == name {
				c = window.SatAdd(c, silent[i].at(nowMs, lim))
				refill = window.SatAdd(refill, silent[i].refilled(t0, undetected, nowMs, lim))
			}
		}
		share := equal // unknown: as if it knew
		if j := slices.IndexFunc(unseen, func(u regionCount) bool { return u.name == name }); j >= 0 {
			share = unseen[j].n
		}
		needEqual = window.SatAdd(needEqual, max(satSub(equal, c), refill))
		weighted := equal
		switch {
		case nowMs >= t0+undetected.Milliseconds()+lim.WindowMs():
		case staggered:
			weighted = min(limit, uint64(v.nodesOf(name)))
			if _, ok := v.RegionNodes[name]; !ok {
				weighted = limit // its nodes are not known here
			}
		default:
			weighted = share
		}
		needWeighted = window.SatAdd(needWeighted, max(satSub(weighted, c), refill))
	}
	return satSub(h, max(needEqual, needWeighted))
}

// unseenShares returns, for each region silent in v, the largest share
// of limit it could have given itself before it could tell that it was
// unheard, by the weights it had then: its own count as this node last
// read it while it heard it (seen, see [remember]; a count read after the
// bucket it was last heard in rolled over is not taken: its view still
// held the older bucket), the other silent regions' counts (silent, read
// from res under v at nowMs), and each alive region's count as of when
// it was last heard (t0) or earlier (see asOf below), in the buckets of
// that instant (what the alive regions admitted after it, it cannot have
// weighed; a bucket res no longer holds counts as empty, and a count
// without trails as nothing: both give it the larger share). It reuses
// out's array.
func unseenShares(out []regionCount, res *region.Result, v *View, silent []heldCount, seen []regionCount, nowMs int64, limit, floor uint64) []regionCount {
	if len(v.Silent) == 0 {
		return out[:0]
	}
	r := uint64(len(v.Alive) + len(v.Silent))
	f := max(weight(limit)/(r*max(floor, 1)), 1)
	silentW := func(name string) uint64 {
		var n uint64
		for i := range silent {
			if silent[i].region == name {
				n = window.SatAdd(n, silent[i].cur+silent[i].prev)
			}
		}
		for _, k := range seen {
			if k.name == name {
				n = max(n, k.n)
			}
		}
		return weight(n)
	}
	var sw uint64 // the silent regions' weights
	for _, name := range v.Silent {
		sw += silentW(name)
	}
	prior := slices.Clone(out) // the shares of the last result, a few
	out = out[:0]
	for _, name := range v.Silent {
		t0 := nowMs - v.Ages[name].Milliseconds()
		// An alive region whose link to name was cut before this node's
		// says so a suspicion timeout after, and its word arrives within
		// a horizon or so: one that has not said so heard name until then,
		// and name it. Without a suspicion timeout, the alive regions count
		// as idle.
		asOf := min(t0, nowMs-(v.Suspicion+3*v.Horizon).Milliseconds())
		if v.Suspicion <= 0 {
			asOf = math.MinInt64
		}
		last := uint64(0)
		if j := slices.IndexFunc(prior, func(u regionCount) bool { return u.name == name }); j >= 0 && abs(prior[j].at-t0) <= 1 {
			// Still the silence of the last result, whose share was
			// read as of an earlier instant. Once asOf is before the
			// current bucket, res lacks the bucket before it, and would
			// weigh the alive regions as idle: the share stays.
			if res.SubMs > 0 && asOf < res.Bucket*res.SubMs {
				out = append(out, prior[j])
				continue
			}
			last = prior[j].n
		}
		den := r*f + sw
		var buf [16]regionCount // no allocation up to 16 alive regions
		alive := buf[:0]
		for _, rc := range res.Regions {
			a, _, _ := strings.Cut(rc.Region, "~")
			if !slices.Contains(v.Alive, a) {
				continue
			}
			j := slices.IndexFunc(alive, func(o regionCount) bool { return o.name == a })
			if j < 0 {
				alive = append(alive, regionCount{name: a})
				j = len(alive) - 1
			}
			alive[j].n = window.SatAdd(alive[j].n, countAt(rc, res, asOf))
		}
		for _, a := range alive {
			den += weight(a.n)
		}
		out = append(out, regionCount{name: name, n: max(last, window.MulDivCeil(limit, silentW(name)+f, den)), at: t0})
	}
	return out
}

// countAt is rc's count in the current and previous buckets as of tMs, in
// the buckets of tMs, from its trails: 0 for a bucket res no longer holds
// or a count without trails. A coarse trail's mark may stand for hits a
// granule after it, so hits within a granule before tMs count as after.
func countAt(rc region.RegionCount, res *region.Result, tMs int64) uint64 {
	w := res.SubMs
	if w <= 0 || rc.CurrentTrail.Count() != rc.Current || rc.PreviousTrail.Count() != rc.Previous {
		return 0
	}
	before := func(t window.Trail, off int64) uint64 {
		return satSub(t.Count(), t.After(off-max(w/window.Granules, 1)))
	}
	start := res.Bucket * w
	switch {
	case tMs >= start && tMs < start+w:
		return window.SatAdd(rc.Previous, before(rc.CurrentTrail, tMs-start))
	case tMs >= start-w && tMs < start:
		return before(rc.PreviousTrail, tMs-(start-w))
	}
	return 0
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
