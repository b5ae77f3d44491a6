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
// region's (own, a count), the other alive regions' counts and refused
// hits summed (asked), and their weights summed over all of them
// (others) and over those named before this one (before).
type tally struct{ own, asked, others, before uint64 }

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

// sharing returns the sum of the shares' numerators (w_r + f, over the
// same denominator as [share]'s) of the other alive regions that admit by
// their shares: those whose share of the limit holds a whole hit for each
// of their nodes. The others' probes are staggered (see [probeCut]). res
// gives the regions' counts and dem their demand (see [demands]); nil,
// or weights w with nothing known (sum 0), means equal shares.
func sharing(res *region.Result, limit uint64, w weights, v *View, floor uint64, dem []regionDemand) uint64 {
	if len(v.Alive) <= 1 {
		return 0
	}
	r := uint64(len(v.Alive))
	if floor == 0 {
		floor = DefaultFloor
	}
	f := max(weight(limit)/(r*floor), 1)
	den := w.sum + r*f
	var sum uint64
	for _, a := range v.Alive {
		if a == v.Region {
			continue
		}
		var n uint64
		if res != nil && w.sum > 0 {
			for _, rc := range res.Regions {
				if name, _, _ := strings.Cut(rc.Region, "~"); name == a {
					n += rc.Current + rc.Previous
				}
			}
			for _, d := range dem {
				if d.region == a {
					n = window.SatAdd(n, d.n)
				}
			}
		}
		num := f
		if w.sum > 0 {
			num += weight(n)
		}
		if window.MulDivCeil(uint64(v.nodesOf(a)), den, num) <= limit {
			sum += num
		}
	}
	return sum
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
// decided, so that the store admits it only when its node's part of the
// region's quota of the headroom it reads (less pend) holds its hits, the
// region's N nodes taking floor((q + i) / N) of a quota q by their rank
// i, which sum to q: for a headroom x the region's quota is at least
// floor(x * num / den), which holds the node's hits once
//
//	x >= ceil((hits * N - i) * den / num)
//
// at most storeLimit - hits. The rank counts only while no region is
// silent or quiet in v: the limit is then charged, and the last-ranked
// node's probe taking the charged limit's last hit went past the bound
// (docs/design.md, "Demand"). whole is false when the limit cannot give
// this node's share hits at any estimate (a share of the whole limit below
// hits): then the cut is 0, and the caller staggers the probe instead
// (see [stagger]).
func probeCut(storeLimit, limit, hits, pend uint64, w weights, v *View, floor uint64) (cut uint64, whole bool) {
	num, den, _ := share(limit, w, v, floor)
	n := max(v.Nodes, 1)
	var rank uint64
	if len(v.Silent) == 0 {
		rank = uint64(min(max(v.NodeRank, 0), n-1))
	}
	need := window.MulDivCeil(hits*uint64(n)-rank, den, num)
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

// demandPart returns this region's part num/den of the alive regions'
// demand for a key: its count and refused hits (own and ownRefused) over
// those and the other alive regions' (asked, see [tally]), the part of
// the admissions that an exact sliding log would give it, which admits
// whoever asks first, in proportion to what each asks. A region whose
// part of the count is at most its part of the demand reuses all of what
// leaves of its own (see reuseShare). With nothing counted, the part is
// 1 of 1.
func demandPart(own, ownRefused, asked uint64) (num, den uint64) {
	num = window.SatAdd(own, ownRefused)
	den = window.SatAdd(num, asked)
	if den == 0 {
		return 1, 1
	}
	return num, den
}
