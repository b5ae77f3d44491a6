package region

import (
	"slices"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// memEntry is one key's state. Which fields are used depends on kind.
type memEntry struct {
	k memKey
	// counter algorithms: the two newest buckets seen.
	b [2]memBucket
	// GCRA: theoretical arrival time, Unix µs.
	tatUs int64
	// sliding log: admitted requests, oldest first; logCap is the
	// capacity counted in Memory.logBytes.
	log    []window.LogEntry
	logCap int
}

type memBucket struct {
	idx    int64
	used   bool
	counts []regionN
	// private is set on a bucket read for one decision (a Redis reply):
	// nothing else holds its trails, so results may share them.
	private bool
}

// regionN is one region's state of a bucket: its count n, and the trail
// of where its hits fell (window.Trail) for the default sliding window. n
// is the authority on the count: hits counted without marks (the
// two-bucket and fixed window algorithms, or a peer that sent none) leave
// n above h.Count(); decisions read the trail fitted to n
// (window.Trail.Fit).
//
// Results lend h rather than copy it (regionN.trail): lent says that
// readers outside the lock may hold h's marks, so the next change to them
// in place copies them first (memBucket.add). Every other change makes a
// new slice (window.Trail.Merge), and a bucket's trails are never reused,
// so a trail once handed out never changes.
type regionN struct {
	region string
	n      uint64
	h      window.Trail
	lent   bool
}

// expired reports whether the entry holds nothing that matters at nowMs.
func (e *memEntry) expired(nowMs int64) bool {
	switch e.k.kind {
	case kindGCRA:
		return e.tatUs <= nowMs*1000
	case kindLog:
		return len(e.log) == 0 || e.log[len(e.log)-1].AtMs <= nowMs-e.k.wMs
	}
	// Both buckets older than the previous bucket of nowMs: each ended a
	// bucket's length ago or more.
	w := time.Duration(e.k.wMs) * time.Millisecond
	for i := range e.b {
		if _, end := window.BucketSpan(w, e.b[i].idx); e.b[i].used && end+max(e.k.wMs, -e.k.wMs) > nowMs {
			return false
		}
	}
	return true
}

func pruneLog(log []window.LogEntry, beforeMs int64) []window.LogEntry {
	i := 0
	for i < len(log) && log[i].AtMs < beforeMs {
		i++
	}
	switch {
	case i == 0:
		return log
	case i == len(log):
		return nil // let an idle key's memory go
	}
	return append(log[:0], log[i:]...)
}

// bucket returns the bucket with index b, or nil.
func (e *memEntry) bucket(b int64) *memBucket {
	for i := range e.b {
		if e.b[i].used && e.b[i].idx == b {
			return &e.b[i]
		}
	}
	return nil
}

// ensure returns the bucket with index b, making room for it by dropping the
// older of the two held buckets; it returns nil when b is older than both.
func (e *memEntry) ensure(b int64) *memBucket {
	if x := e.bucket(b); x != nil {
		return x
	}
	// Pick the unused slot, or the one with the lower index.
	j := 0
	switch {
	case !e.b[0].used:
		j = 0
	case !e.b[1].used:
		j = 1
	case e.b[1].idx < e.b[0].idx:
		j = 1
	}
	if e.b[j].used && e.b[j].idx > b {
		return nil
	}
	// A new newest bucket makes every bucket older than its previous one
	// stale.
	o := 1 - j
	if e.b[o].used && e.b[o].idx < b-1 {
		e.b[o] = memBucket{}
	}
	e.b[j] = memBucket{idx: b, used: true, counts: e.b[j].counts[:0]}
	return &e.b[j]
}

// sum returns the bucket's count summed over regions, saturating at the
// largest uint64 instead of wrapping, so a made-up huge count can only deny.
func (b *memBucket) sum() uint64 {
	if b == nil {
		return 0
	}
	var s uint64
	for _, c := range b.counts {
		s = window.SatAdd(s, c.n)
	}
	return s
}

func (b *memBucket) get(region string) uint64 {
	if b == nil {
		return 0
	}
	for _, c := range b.counts {
		if c.region == region {
			return c.n
		}
	}
	return 0
}

// getTrail returns region's trail of the bucket, coarse, as replication
// carries it (lent, see regionN.trail).
func (b *memBucket) getTrail(region string, wMs int64) window.Trail {
	if b == nil {
		return nil
	}
	if i := b.find(region); i >= 0 {
		return b.counts[i].trail(wMs, false, false, b.private)
	}
	return nil
}

// add counts n hits of region admitted at offset e of a bucket of wMs, in
// its trail too when marked is set (exact trails up to window.ExactMax).
func (b *memBucket) add(region string, n uint64, e, wMs int64, marked, exact bool) {
	i := b.find(region)
	if i < 0 {
		b.counts = append(b.counts, regionN{region: region})
		i = len(b.counts) - 1
	}
	c := &b.counts[i]
	c.n = window.SatAdd(c.n, n)
	if marked {
		if c.lent {
			// Lent marks stay as they are: an Add that would change the
			// last one in place works on a copy. One that appends leaves
			// them alone (readers hold them clipped to their length).
			if !c.h.Extends(e, wMs, exact) {
				c.h = slices.Clone(c.h)
			}
			c.lent = false
		}
		c.h.Add(e, wMs, n, exact)
	}
}

func (b *memBucket) find(region string) int {
	for i := range b.counts {
		if b.counts[i].region == region {
			return i
		}
	}
	return -1
}

// maxMerge raises region's count to n if it is lower and merges h into its
// trail (window.Trail.Merge). A region the bucket does not hold yet takes
// no slot for a zero count, and is added while the bucket holds fewer than
// MaxRegionsPerBucket; in a full bucket it takes the place of the region
// with the smallest count (never keep's) when its count is larger, and is
// dropped otherwise: a full bucket keeps the largest counts, so its sum is
// never below that of any MaxRegionsPerBucket regions offered to it, and
// made-up regions can raise it, never lower it. maxMerge reports whether
// a total was dropped (this one, or the one it replaced). h is not
// retained.
func (b *memBucket) maxMerge(region string, n uint64, h window.Trail, wMs int64, keep string) (dropped bool) {
	if i := b.find(region); i >= 0 {
		c := &b.counts[i]
		c.n = max(c.n, n)
		if !c.grow(h, wMs) {
			c.h.Merge(h, wMs)
		}
		return false
	}
	if n == 0 {
		return false
	}
	c := regionN{region: region, n: n, h: append(window.Trail(nil), h...)}
	if len(b.counts) >= MaxRegionsPerBucket {
		j := -1
		for i, c := range b.counts {
			if c.region != keep && (j < 0 || c.n < b.counts[j].n) {
				j = i
			}
		}
		if j >= 0 && b.counts[j].n < n {
			b.counts[j] = c
		}
		return true
	}
	b.counts = append(b.counts, c)
	return false
}

// grow makes c's trail o when o is that trail grown at its end, as the
// failover's mirror passes a bucket that gathers hits: the same marks
// but the last, which o may move later within its merge span
// (window.MergeSpan) and raise, and maybe more after it. o then holds as
// many hits as the trail or more in every span, so window.Trail.Merge
// would make o of them; grow does it in place, changing the last mark
// unless lent and appending o's new ones (readers hold lent marks
// clipped to their length). It reports whether it did; if not, c is
// unchanged.
func (c *regionN) grow(o window.Trail, wMs int64) bool {
	t := c.h
	k := len(t)
	if k == 0 || len(o) < k {
		return false
	}
	last, ol := t[k-1], o[k-1]
	if ol.At < last.At || ol.Cum < last.Cum || window.MergeSpan(ol.At, wMs) != window.MergeSpan(last.At, wMs) || !slices.Equal(t[:k-1], o[:k-1]) {
		return false
	}
	if ol != last {
		if c.lent {
			return false
		}
		t[k-1] = ol
	}
	if len(o) > k {
		c.h = append(t, o[k:]...)
		c.lent = false // the last mark is a new one, which no reader holds
	}
	return true
}

// trails appends the regions' trails of b (a bucket of wMs) to buf, for
// window.Limit.DecideTrails, and returns them with the index of region
// (-1 when absent). A region whose count exceeds its trail's (hits counted
// without marks) has the excess added at the bucket's last millisecond
// (window.Trail.Fit). The trails alias b's: they are valid until b
// next changes.
func (b *memBucket) trails(buf []window.Trail, wMs int64, region string) ([]window.Trail, int) {
	local := -1
	if b == nil {
		return buf, local
	}
	for _, c := range b.counts {
		if c.region == region {
			local = len(buf)
		}
		buf = append(buf, c.h.Fit(c.n, wMs))
	}
	return buf, local
}

// trail returns c's trail, exact when exact is set and the trail is, else
// coarse, with its excess (see trails) when excess is set, clipped to its
// length. Where that is c's own marks they are lent, not copied (c.lent,
// unless shared is set: a bucket read for one decision, which nothing else
// holds): they never change after.
func (c *regionN) trail(wMs int64, exact, excess, shared bool) window.Trail {
	h := c.h
	if excess {
		h = h.Fit(c.n, wMs)
	}
	if !exact {
		h = h.Coarse(wMs)
	}
	if len(h) == 0 {
		return h
	}
	if !shared && len(c.h) > 0 && &h[0] == &c.h[0] {
		c.lent = true
	}
	return h[:len(h):len(h)]
}

// regionCounts lists the per-region counts of cur and prev, sorted by
// region, with local always present. It takes O(n log n) for n regions, so
// that a bucket full of regions (MaxRegionsPerBucket) stays cheap to read.
// With marked, each region's trails are set (see RegionCount).
func regionCounts(local string, cur, prev *memBucket, wMs int64, marked, exact bool) []RegionCount {
	if cur.onlyOf(local) && prev.onlyOf(local) {
		// One region, the usual case: its one entry, nothing to sort or
		// merge.
		out := make([]RegionCount, 1)
		out[0] = RegionCount{Region: local}
		if cur != nil && len(cur.counts) == 1 {
			c := &cur.counts[0]
			out[0].Current, out[0].CurrentTrail = c.n, c.reported(local, wMs, marked, exact, cur.private)
		}
		if prev != nil && len(prev.counts) == 1 {
			c := &prev.counts[0]
			out[0].Previous, out[0].PreviousTrail = c.n, c.reported(local, wMs, marked, exact, prev.private)
		}
		return out
	}
	return mergedRegionCounts(local, cur, prev, wMs, marked, exact)
}

// mergedRegionCounts is regionCounts for any regions: every region's
// entries, sorted, then each region's merged into one.
func mergedRegionCounts(local string, cur, prev *memBucket, wMs int64, marked, exact bool) []RegionCount {
	n := 1
	if cur != nil {
		n += len(cur.counts)
	}
	if prev != nil {
		n += len(prev.counts)
	}
	out := make([]RegionCount, 1, n) // one allocation, whatever the regions
	out[0] = RegionCount{Region: local}
	if cur != nil {
		for i := range cur.counts {
			c := &cur.counts[i]
			out = append(out, RegionCount{Region: c.region, Current: c.n, CurrentTrail: c.reported(local, wMs, marked, exact, cur.private)})
		}
	}
	if prev != nil {
		for i := range prev.counts {
			c := &prev.counts[i]
			out = append(out, RegionCount{Region: c.region, Previous: c.n, PreviousTrail: c.reported(local, wMs, marked, exact, prev.private)})
		}
	}
	sortRegions(out)
	// A region is at most once in each bucket: merge its two entries (and
	// the local region's placeholder) into one.
	j := 0
	for i := 1; i < len(out); i++ {
		if out[i].Region == out[j].Region {
			out[j].Current = max(out[j].Current, out[i].Current)
			out[j].Previous = max(out[j].Previous, out[i].Previous)
			if out[i].PreviousTrail != nil {
				out[j].PreviousTrail = out[i].PreviousTrail
			}
			if out[i].CurrentTrail != nil {
				out[j].CurrentTrail = out[i].CurrentTrail
			}
			continue
		}
		j++
		out[j] = out[i]
	}
	return out[:j+1]
}

// onlyOf reports whether b (nil for none) holds no region's count but
// region's.
func (b *memBucket) onlyOf(region string) bool {
	return b == nil || len(b.counts) == 0 || (len(b.counts) == 1 && b.counts[0].region == region)
}

// reported returns the trail a RegionCount reports for c: none without
// marked, else as a decision reads it (with its excess; lent, see trail),
// exact for the local region's exact trail.
func (c *regionN) reported(local string, wMs int64, marked, exact, shared bool) window.Trail {
	if !marked {
		return nil
	}
	return c.trail(wMs, exact && c.region == local, true, shared)
}

func sortRegions(rc []RegionCount) {
	slices.SortFunc(rc, func(a, b RegionCount) int { return strings.Compare(a.Region, b.Region) })
}
