package guard

import (
	"math"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

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
// nearly all (docs/design.md, "Even shares", has the figures). A concave
// weight brings the regions' counts back together, by the square root of
// their ratio per window; a region below its demand still weighs by what
// it uses. The square root is IEEE-exact, so every region computes the
// same weights from the same counts.
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

// phaseStep is the shift of the slots' layout from one second to the
// next, as a fraction of it: the golden ratio's, which spreads the shifts
// evenly over [0, 1).
const phaseStep = 0.6180339887498949

// phase is where the slots of a horizon starting at start begin, as a
// fraction of the layout (see [slots]): it moves every second of the Unix
// clock, so that the region whose part holds the first slots changes,
// instead of always being the same one. Regions whose horizons start in
// the same second lay out the slots alike.
func phase(start time.Time) float64 {
	_, f := math.Modf(float64(start.Unix()) * phaseStep)
	return f
}

// layout is where the slots of a horizon lie (see [slots]): at the phase
// of the second it started in, and, when it started within two horizons
// of that second's start, at the phase of the second before too. A region
// then takes the fewer of its slots in the two, so that it takes none
// that a region whose horizon began in the second before, not heard from
// yet, took as its own.
type layout struct {
	ph [2]float64
	n  int
}

// layoutOf returns the layout of a horizon of length hz starting at start.
func layoutOf(start time.Time, hz time.Duration) layout {
	l := layout{ph: [2]float64{phase(start)}, n: 1}
	if before := start.Add(-2 * hz); before.Unix() != start.Unix() {
		l.ph[1], l.n = phase(before), 2
	}
	return l
}

// slots is the fewer of this region's slots of headroom h in the
// layout's phases (see the function slots).
func (l layout) slots(h, num, den, b uint64) uint64 {
	q := slots(h, num, den, b, l.ph[0])
	if l.n > 1 {
		q = min(q, slots(h, num, den, b, l.ph[1]))
	}
	return q
}

// quota is this node's share of headroom h for one horizon (see the
// package doc) and the other alive regions' shares of it together. The
// alive regions are laid out in name order over [0, den), each over its
// share num (its weight plus f), and each hit of the headroom has a slot
// in that layout (see [slots]): a region takes the hits whose slots fall
// in its part, so the regions' quotas sum to h exactly, and the others
// take h - q_region; the region's nodes each take floor(q_region / N).
// w.sum 0: nothing known, equal shares.
func quota(h, limit uint64, w weights, v *View, floor uint64, l layout) (q, others uint64) {
	num, den, b := share(limit, w, v, floor)
	qr := l.slots(h, num, den, b)
	return qr / uint64(max(v.Nodes, 1)), h - qr
}

// slotRes is the resolution of the slots' layout: positions are in
// [0, slotRes).
const slotRes = 1 << 20

// slotStep is the distance between consecutive slots' positions: the
// golden ratio's fraction of slotRes, odd, so that the positions spread
// evenly and run through every one before they repeat.
const slotStep = 648055

// slotsMax is the most hits [slots] lays out one by one; floorSum's
// products stay within 64 bits up to it.
const slotsMax = 1 << 24

// slots is how many of the headroom's first h hits fall in this region's
// part of the layout: hit k (from 1) lies at ph + k * slotStep (mod
// slotRes), and the region's part is [b, b+num) of den scaled to
// slotRes. A hit's place does not depend on h, so the region's slots of a
// larger headroom hold those of a smaller one: regions that read
// different headrooms in the same second still take disjoint hits, at
// most the largest headroom together.
func slots(h, num, den, b uint64, ph float64) uint64 {
	if h == 0 || num == 0 {
		return 0
	}
	if h > slotsMax {
		// Past slotsMax each region takes its share of the rest rounded
		// down: still only growing with h, the regions together at most
		// h, and less by under a hit each, which no longer shows.
		return slots(slotsMax, num, den, b, ph) + window.MulDiv(h-slotsMax, num, den)
	}
	lo := window.MulDiv(b, slotRes, den)
	ln := window.MulDiv(b+num, slotRes, den) - lo
	if ln >= slotRes {
		return h
	}
	c := (uint64(ph*slotRes) + slotRes - lo%slotRes) % slotRes
	y := c + slotStep
	return h + floorSum(h, slotRes, slotStep, y) - floorSum(h, slotRes, slotStep, y+slotRes-ln)
}

// firstSlots is the least headroom whose slots (see [slots]) hold k
// hits, or more than most when none up to most does.
func firstSlots(k, most, num, den, b uint64, l layout) uint64 {
	if l.slots(most, num, den, b) < k {
		return most + 1
	}
	lo, hi := k, most
	for lo < hi {
		mid := lo + (hi-lo)/2
		if l.slots(mid, num, den, b) >= k {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// floorSum is the sum of floor((a*i + b) / m) for i in [0, n).
func floorSum(n, m, a, b uint64) uint64 {
	var sum uint64
	for {
		if a >= m {
			sum += n * (n - 1) / 2 * (a / m)
			a %= m
		}
		if b >= m {
			sum += n * (b / m)
			b %= m
		}
		y := a*n + b
		if y < m {
			return sum
		}
		n, b = y/m, y%m
		m, a = a, m
	}
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

// sharing returns the sum of the shares' numerators (w_r + f, over the
// same denominator as [share]'s) of the other alive regions that admit by
// their shares: those whose part of the layout (see [slots]) holds a whole
// hit for each of their nodes within the limit, laid out at phase ph. The
// others' probes are staggered (see [probeCut]). res gives the regions'
// counts; nil, or weights w with nothing known (sum 0), means equal
// shares.
func sharing(res *region.Result, limit uint64, w weights, v *View, floor uint64, l layout) uint64 {
	if len(v.Alive) <= 1 {
		return 0
	}
	r := uint64(len(v.Alive))
	if floor == 0 {
		floor = DefaultFloor
	}
	f := max(weight(limit)/(r*floor), 1)
	den := w.sum + r*f
	var buf [16]uint64
	nums := buf[:0]
	for _, a := range v.Alive {
		num := f
		switch {
		case a == v.Region:
			num += w.own
		case res != nil && w.sum > 0:
			var n uint64
			for _, rc := range res.Regions {
				if name, _, _ := strings.Cut(rc.Region, "~"); name == a {
					n += rc.Current + rc.Previous
				}
			}
			num += weight(n)
		}
		nums = append(nums, num)
	}
	var sum uint64
	for i, a := range v.Alive {
		if a == v.Region {
			continue
		}
		// The regions named before a come before it in the layout.
		var b uint64
		for j, x := range v.Alive {
			if x < a {
				b += nums[j]
			}
		}
		if l.slots(limit, nums[i], den, min(b, den-min(nums[i], den))) >= uint64(v.nodesOf(a)) {
			sum += nums[i]
		}
	}
	return sum
}

// holdsWhole reports whether this region's part of the layout at phase
// ph holds a whole hit for each of its nodes within a headroom of limit:
// if not, its probes are staggered (see [probeCut]).
func holdsWhole(limit uint64, w weights, v *View, floor uint64, l layout) bool {
	num, den, b := share(limit, w, v, floor)
	return l.slots(limit, num, den, b) >= uint64(max(v.Nodes, 1))
}

// staggerNeed is the headroom a staggered probe must read to be admitted:
// hits past its base and held (see [Guard.Admit]) in the staggered
// regions' part of it, the regions admitting by their shares (whose
// numerators sum to sharing, over den) taking theirs of the rest.
func staggerNeed(hits, base, held, sharing, den uint64) uint64 {
	need := base + held + hits
	if sharing > 0 && den > sharing {
		need = window.MulDivCeil(need, den, den-sharing)
	}
	return need
}

// probeCut is how much lower than storeLimit a probe past the quota is
// decided, so that the store admits it only when this node's quota of the
// headroom it reads (less pend) holds its hits: its region's slots (see
// [slots]) of a headroom x only grow with x, and hold hits for each of
// its N nodes once x reaches the least headroom whose slots hold hits * N,
// at most storeLimit - hits. whole is false when the limit cannot give
// this node's share hits at any estimate (the slots of storeLimit hold
// fewer): then the cut is 0, and the caller staggers the probe instead
// (see [stagger]). (With the least x at which floor(x * num / den) held
// them, ceil(hits * N * den / num), a region of a small share probed only
// at a large headroom, and under saturation never found one.)
func probeCut(storeLimit, limit, hits, pend uint64, w weights, v *View, floor uint64, l layout) (cut uint64, whole bool) {
	num, den, b := share(limit, w, v, floor)
	need := firstSlots(window.MulDivCeil(hits, uint64(max(v.Nodes, 1)), 1), storeLimit, num, den, b, l)
	if storeLimit < need {
		return 0, false
	}
	return min(pend+need, storeLimit) - hits, true
}

// smallSlack is the hits past the headroom that the pool may take of a
// limit smaller than the pool (see [entry.stagger]): the bound of such a
// limit is max(1.10 L, L + 1), L + 1 below 10.
const smallSlack = 1

// staggerSlot is the least length of a slot of the stagger (see
// [stagger]).
const staggerSlot = time.Second

// stagger places this node's region for a limit that shares cannot hold
// (see [Guard.Admit]). Every slot one of the alive regions is at the head
// of the pool, the others following in name order (wrapping around); a
// region's base is the alive nodes of the regions ahead of it, and each
// of its nodes may admit once per slot, decided against the limit less
// the base. When every node asks at once on an estimate e, with headroom
// h = L - e, each region's store sees its own admissions at once, so a
// region at base b takes at most min(its nodes, h - b): the pool takes at
// most the headroom, whichever nodes ask, and which regions may take it
// rotates. When the region's nodes do not share a store ([View.Apart]),
// each node's base is that of its region plus the region's nodes named
// before it, so that they take turns as the regions do. The head is drawn
// from the slot's number ([window.Mix64])
// rather than taken in turn, so that traffic as periodic as a rotation (a
// request every R slots) does not always find its region past the
// headroom. A node asks only in
// the first S - H of a slot S, so that what it admitted reaches every
// node before the next slot, and a region not heard from since the slot
// began adds its nodes to the base. Slots are of staggerSlot, or twice the
// horizon rounded up to whole seconds when that is longer, aligned to the
// Unix epoch, so that nodes with the same view agree on the bases.
//
// It returns this region's base in the slot of now, whether this node may
// ask now, and the time until the next slot begins.
func stagger(now time.Time, v *View) (base uint64, ok bool, wait time.Duration) {
	slotLen := max(staggerSlot, (2*v.Horizon+time.Second-1)/time.Second*time.Second)
	ms, sm := now.UnixMilli(), slotLen.Milliseconds()
	slot := ms / sm
	wait = time.Duration((slot+1)*sm-ms) * time.Millisecond
	ok = ms-slot*sm < sm-v.Horizon.Milliseconds()
	r := len(v.Alive)
	if r <= 1 {
		return 0, ok, wait
	}
	me := int(rank(v))
	for i := int(window.Mix64(uint64(slot)) % uint64(r)); i != me; i = (i + 1) % r {
		base += uint64(v.nodesOf(v.Alive[i]))
	}
	if v.Apart {
		// The region's nodes do not share a store: each admits on what
		// its own store holds, so they take turns as regions do, the
		// node's place in its region after the regions ahead.
		base += uint64(min(v.NodeRank, max(v.Nodes, 1)-1))
	}
	// What another region admitted in the slot before reaches this node
	// by the time this slot begins, and every frame heard after it
	// carries it; a region not heard from since the slot began may have
	// admitted there unheard (a split that began right after its asks),
	// so each of its nodes counts as having taken a hit.
	since := time.Duration(ms-slot*sm) * time.Millisecond
	for _, a := range v.Alive {
		if age, known := v.Ages[a]; a != v.Region && known && age > since {
			base += uint64(v.nodesOf(a))
		}
	}
	return base, ok, wait
}
