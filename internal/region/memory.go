package region

import (
	"container/list"
	"context"
	"hash/maphash"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rlcluster/rlcluster/internal/window"
)

// MemoryConfig configures a [Memory] store. Zero fields mean their default.
type MemoryConfig struct {
	// Region is the local region's name, the only region whose counts
	// Check increments. Default "local".
	Region string
	// MaxKeys bounds the number of keys held (one key per limit key, window
	// and algorithm). When a new key would exceed it, the least recently
	// used key is evicted and counted in Evictions. Default 1,000,000.
	MaxKeys int
	// SweepEvery is how often, in the time of the requests (Request.Now),
	// each shard drops its expired keys. Default 1s.
	SweepEvery time.Duration
	// MaxLogBytes bounds the memory the sliding logs hold, in bytes. Each
	// admitted SlidingLog request holds one 16-byte entry until it leaves
	// its window, and a log's slice may hold as much again in spare
	// capacity: the bound counts capacity, so it holds between MaxLogBytes/32
	// and MaxLogBytes/16 entries. Past it, least recently used keys are
	// evicted, as for MaxKeys, and counted in Evictions. Default 64 MiB
	// (2 to 4 million entries). MaxKeys alone does not bound these bytes:
	// one key with a limit of 10,000 may hold 10,000 entries.
	MaxLogBytes int64
	// Replica says that Region is a replica name (Region~id, see
	// [FallbackRegion]): the node is one of several of its region, each
	// on its own in-memory store, and each counts under its own replica.
	// Counter results then carry Region in Result.LocalRegion, so that
	// replication reports the replica's total under its name.
	Replica bool
}

const (
	memShards                = 64
	defaultMaxKeys           = 1_000_000
	defaultRegion            = "local"
	defaultSweepEvery        = time.Second
	defaultMaxLogBytes       = 64 << 20
	logEntryBytes            = int64(unsafe.Sizeof(window.LogEntry{}))
	kindCounter        uint8 = 0
	kindGCRA           uint8 = 1
	kindLog            uint8 = 2
)

// Memory is the embedded in-memory [Store]: a region's counts held in this
// process. It is sharded 64 ways by a hash of the key, safe for concurrent
// use, and bounded to MaxKeys keys (least recently used first out).
//
// For the counter algorithms it keeps, per key and window, the two newest
// buckets it has seen, each a vector of per-region counts, exactly as the
// Redis store keeps one hash per bucket; Merge max-merges remote totals into
// them. A bucket older than the previous one of the newest request is
// dropped, lazily on access and by a periodic sweep driven by Request.Now
// (the store never reads the clock).
type Memory struct {
	region      string
	replica     bool
	maxKeys     int64
	keys        atomic.Int64
	maxLogBytes int64
	logBytes    atomic.Int64 // capacity of every log, in bytes
	sweepMs     int64
	seed        maphash.Seed
	shards      [memShards]memShard
	evicted     atomic.Uint64
	dropped     atomic.Uint64 // merged totals over MaxRegionsPerBucket
}

var _ Store = (*Memory)(nil)

type memShard struct {
	mu        sync.Mutex
	m         map[memKey]*list.Element
	lru       list.List // of *memEntry, most recently used at the front
	lastSweep int64
	_         [40]byte // keep shards on separate cache lines
}

type memKey struct {
	key  string
	wMs  int64
	kind uint8
}

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

// NewMemory returns an empty in-memory store.
func NewMemory(cfg MemoryConfig) *Memory {
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = defaultMaxKeys
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = defaultSweepEvery
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = defaultMaxLogBytes
	}
	m := &Memory{
		region:      cfg.Region,
		replica:     cfg.Replica,
		maxKeys:     int64(cfg.MaxKeys),
		maxLogBytes: cfg.MaxLogBytes,
		sweepMs:     cfg.SweepEvery.Milliseconds(),
		seed:        maphash.MakeSeed(),
	}
	for i := range m.shards {
		m.shards[i].m = make(map[memKey]*list.Element)
	}
	return m
}

// Region returns the local region's name.
func (m *Memory) Region() string { return m.region }

// Evictions returns how many keys were evicted to respect MaxKeys.
func (m *Memory) Evictions() uint64 { return m.evicted.Load() }

// Keys returns the number of keys held.
func (m *Memory) Keys() int { return int(m.keys.Load()) }

// MemoryStats are a [Memory] store's gauges and counters.
type MemoryStats struct {
	// Keys is the number of keys held.
	Keys int
	// Evictions counts keys evicted to respect MaxKeys or MaxLogBytes.
	Evictions uint64
	// LogBytes is the memory the sliding logs hold (their capacity).
	LogBytes int64
	// RegionsDropped counts merged totals dropped because their bucket
	// already held MaxRegionsPerBucket regions.
	RegionsDropped uint64
}

// Stats returns the store's gauges and counters.
func (m *Memory) Stats() MemoryStats {
	return MemoryStats{Keys: m.Keys(), Evictions: m.evicted.Load(), LogBytes: m.logBytes.Load(), RegionsDropped: m.dropped.Load()}
}

func (m *Memory) shard(key string) *memShard {
	return &m.shards[maphash.String(m.seed, key)%memShards]
}

// Check decides each request in order; see [Store]. It never fails.
func (m *Memory) Check(ctx context.Context, reqs []Request, res []Result) error {
	for i := range reqs {
		res[i] = m.check(&reqs[i])
	}
	return nil
}

func kindOf(a window.Algorithm) uint8 {
	switch a {
	case window.TokenBucket:
		return kindGCRA
	case window.SlidingLog:
		return kindLog
	}
	return kindCounter
}

func (m *Memory) check(r *Request) Result {
	nowMs := window.Ms(r.Now)
	k := memKey{key: r.Key, wMs: r.Limit.WindowMs(), kind: kindOf(r.Limit.Algorithm)}
	var w time.Duration
	var b int64
	if k.kind == kindCounter {
		w, b = r.Limit.BucketAt(nowMs) // a calendar bucket's own length
		k.wMs = w.Milliseconds()
	}
	s := m.shard(r.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	m.maybeSweep(s, nowMs)
	e := m.lookup(s, k, !r.Peek)
	var res Result
	switch k.kind {
	case kindGCRA:
		var tat int64
		if e != nil {
			tat = e.tatUs
		}
		d, newTat := r.Limit.DecideGCRA(nowMs, tat, r.Hits)
		if d.Allowed && !r.Peek {
			e.tatUs = newTat
		}
		res.Decision = d
		res.TAT = tat
	case kindLog:
		var log []window.LogEntry
		if e != nil {
			e.log = pruneLog(e.log, nowMs-k.wMs)
			m.countLog(e)
			log = e.log
		}
		d := r.Limit.DecideLog(nowMs, log, r.Hits)
		if d.Allowed && !r.Peek {
			e.log = append(e.log, window.LogEntry{AtMs: nowMs, Hits: r.Hits})
			m.countLog(e)
			for m.logBytes.Load() > m.maxLogBytes && m.evictOne(s, e, 1) {
			}
		}
		res.Decision = d
	default:
		var cur, prev *memBucket
		if e != nil {
			cur, prev = e.bucket(b), e.bucket(b-1)
		}
		d, marked := decideCounter(r, nowMs, m.region, cur, prev)
		exact := r.Limit.Exact()
		if d.Allowed && !r.Peek {
			cur = e.ensure(b)
			if cur != nil {
				start, _ := window.BucketSpan(w, b)
				cur.add(m.region, r.Hits, nowMs-start, k.wMs, marked, exact)
			}
		}
		res.Decision = d
		res.Regions = regionCounts(m.region, cur, prev, k.wMs, marked, exact)
		res.Local = cur.get(m.region)
		if marked {
			res.LocalTrail = cur.getTrail(m.region, k.wMs)
		}
		if m.replica {
			res.LocalRegion = m.region
		}
	}
	return res
}

// decideCounter decides a counter request on the buckets cur and prev
// (nil when absent) of the local region's store: with
// window.Limit.DecideTrails for the default sliding window (marked is then
// true), else with window.Limit.DecideCounter.
func decideCounter(r *Request, nowMs int64, local string, cur, prev *memBucket) (d window.Decision, marked bool) {
	if !r.Limit.Algorithm.Trails() {
		return r.Limit.DecideCounter(nowMs, window.Counts{Cur: cur.sum(), Prev: prev.sum()}, r.Hits), false
	}
	wMs := r.Limit.WindowMs()
	var pb, cb [4]window.Trail
	ph, _ := prev.trails(pb[:0], wMs, "")
	ch, i := cur.trails(cb[:0], wMs, local)
	return r.Limit.DecideTrails(nowMs, ph, ch, i, r.Hits), true
}

// lookup returns k's entry, moving it to the front, or creates it when
// create is set (evicting the least recently used key when the shard is
// full). It returns nil when the key is absent and create is unset.
func (m *Memory) lookup(s *memShard, k memKey, create bool) *memEntry {
	if el, ok := s.m[k]; ok {
		s.lru.MoveToFront(el)
		return el.Value.(*memEntry)
	}
	if !create {
		return nil
	}
	// Reserve the new key's place first, so that concurrent inserts in
	// other shards cannot together pass the bound.
	if m.keys.Add(1) > m.maxKeys {
		m.evictOne(s, nil, evictRounds)
	}
	e := &memEntry{k: k}
	s.m[k] = s.lru.PushFront(e)
	return e
}

// evictRounds bounds evictOne's passes over the shards.
const evictRounds = 1000

// evictOne evicts the least recently used key of s, whose lock is held, or
// when s holds no key but keep, of another shard it can lock without
// waiting (locking without waiting cannot deadlock), passing over the
// shards until one gives up a key: a shard is locked only briefly by a
// holder that is not itself looking elsewhere, for at most rounds passes.
// The bound is thus global, and the order least recently used within each
// shard. It reports whether it evicted a key.
func (m *Memory) evictOne(s *memShard, keep *memEntry, rounds int) bool {
	if m.evictBack(s, keep) {
		return true
	}
	for range rounds {
		for i := range m.shards {
			o := &m.shards[i]
			if o == s || !o.mu.TryLock() {
				continue
			}
			ok := m.evictBack(o, nil)
			o.mu.Unlock()
			if ok {
				return true
			}
		}
		runtime.Gosched()
	}
	return false
}

// evictBack removes the least recently used key of s, whose lock is held,
// unless it is keep, and counts the eviction.
func (m *Memory) evictBack(s *memShard, keep *memEntry) bool {
	old := s.lru.Back()
	if old == nil || old.Value.(*memEntry) == keep {
		return false
	}
	m.remove(s, old)
	m.evicted.Add(1)
	return true
}

// remove drops the key at el from s, whose lock is held.
func (m *Memory) remove(s *memShard, el *list.Element) {
	e := el.Value.(*memEntry)
	s.lru.Remove(el)
	delete(s.m, e.k)
	m.keys.Add(-1)
	if e.logCap != 0 {
		m.logBytes.Add(-int64(e.logCap) * logEntryBytes)
	}
}

// countLog brings Memory.logBytes in step with the capacity of e's log.
func (m *Memory) countLog(e *memEntry) {
	if c := cap(e.log); c != e.logCap {
		m.logBytes.Add(int64(c-e.logCap) * logEntryBytes)
		e.logCap = c
	}
}

// maybeSweep drops the shard's expired keys when SweepEvery of request time
// has passed since its last sweep.
func (m *Memory) maybeSweep(s *memShard, nowMs int64) {
	if nowMs-s.lastSweep < m.sweepMs {
		return
	}
	s.lastSweep = nowMs
	for _, el := range s.m {
		if el.Value.(*memEntry).expired(nowMs) {
			m.remove(s, el)
		}
	}
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
// largest uint64 instead of wrapping.
func (b *memBucket) sum() uint64 {
	if b == nil {
		return 0
	}
	var s uint64
	for _, c := range b.counts {
		s = satAdd(s, c.n)
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
	c.n = satAdd(c.n, n)
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
		b.counts[i].n = max(b.counts[i].n, n)
		b.counts[i].h.Merge(h, wMs)
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

// Merge max-merges remote totals; see [Store]. Totals for the local region,
// for non-positive windows and for buckets older than the two a key holds
// are ignored, and so are totals of a region new to a bucket that already
// holds MaxRegionsPerBucket regions (counted in RegionsDropped): remote
// input cannot make a bucket, and the decisions that read it, unbounded.
func (m *Memory) Merge(ctx context.Context, totals []Total) error {
	m.merge(totals, false)
	return nil
}

// Restore max-merges totals as Merge does, the local region's included:
// a peer echoes back totals this store once reported, after it lost them.
// It never fails.
func (m *Memory) Restore(ctx context.Context, totals []Total) error {
	m.merge(totals, true)
	return nil
}

// merge max-merges totals. Consecutive totals of one key and window (a
// decision's buckets and regions, as the failover's mirror passes them)
// share one lock and one lookup of their entry.
func (m *Memory) merge(totals []Total, own bool) {
	var (
		s *memShard // locked while e is set
		e *memEntry
		k memKey
	)
	for i := range totals {
		t := &totals[i]
		if (t.Region == m.region && !own) || t.Region == "" || !storedWindow(t.Window, t.Bucket) {
			continue
		}
		if e == nil || t.Key != k.key || t.Window.Milliseconds() != k.wMs {
			if e != nil {
				s.mu.Unlock()
			}
			k = memKey{key: t.Key, wMs: t.Window.Milliseconds(), kind: kindCounter}
			s = m.shard(t.Key)
			s.mu.Lock()
			e = m.lookup(s, k, true)
		}
		h := t.Trail
		if !ValidTrail(*t) {
			h = nil
		}
		if b := e.ensure(t.Bucket); b != nil && b.maxMerge(t.Region, t.Count, h, k.wMs, m.region) {
			m.dropped.Add(1)
		}
	}
	if e != nil {
		s.mu.Unlock()
	}
}

// Vectors returns the per-region counts of each bucket; see [Store].
func (m *Memory) Vectors(ctx context.Context, refs []BucketRef) ([][]Total, error) {
	out := make([][]Total, len(refs))
	for i, r := range refs {
		if !storedWindow(r.Window, r.Bucket) {
			continue
		}
		k := memKey{key: r.Key, wMs: r.Window.Milliseconds(), kind: kindCounter}
		s := m.shard(r.Key)
		s.mu.Lock()
		if el, ok := s.m[k]; ok {
			if b := el.Value.(*memEntry).bucket(r.Bucket); b != nil && len(b.counts) > 0 {
				v := make([]Total, 0, len(b.counts))
				for j := range b.counts {
					c := &b.counts[j]
					v = append(v, Total{Key: r.Key, Window: r.Window, Bucket: r.Bucket, Region: c.region, Count: c.n, Trail: c.trail(k.wMs, false, false, false)})
				}
				slices.SortFunc(v, func(a, b Total) int { return strings.Compare(a.Region, b.Region) })
				out[i] = v
			}
		}
		s.mu.Unlock()
	}
	return out, nil
}

// Close releases nothing; the store stays usable.
func (m *Memory) Close() error { return nil }
