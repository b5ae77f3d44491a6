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
	// resetKeys is at least the number of reset instants' keys held
	// (isResetInstant): raised before such a key is inserted, lowered
	// after it is removed.
	resetKeys atomic.Int64
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

// NoResets reports whether the store holds no reset instant's key (one
// that starts with [ResetKeyPrefix], the marker [ResetMarkKey] aside), so
// that a request on one, at the instant NoResets returns true, would read
// no count.
func (m *Memory) NoResets() bool { return m.resetKeys.Load() == 0 }

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
	if isResetInstant(k.key) {
		m.resetKeys.Add(1)
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
	if isResetInstant(e.k.key) {
		m.resetKeys.Add(-1)
	}
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
// share one lock and one lookup of their entry. Each reset instant it
// raises raises the reset marker after ([ResetMarkKey]).
func (m *Memory) merge(totals []Total, own bool) {
	var (
		s      *memShard // locked while e is set
		e      *memEntry
		k      memKey
		raised []BucketRef // reset instants' buckets raised, for the marker
	)
	for i := range totals {
		t := &totals[i]
		if !mergeable(t, m.region, own) {
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
		b := e.ensure(t.Bucket)
		if b == nil {
			continue
		}
		reset := isResetInstant(t.Key)
		var before uint64
		if reset {
			before = b.get(t.Region)
		}
		if b.maxMerge(t.Region, t.Count, h, k.wMs, m.region) {
			m.dropped.Add(1)
		}
		if reset && b.get(t.Region) > before {
			raised = append(raised, BucketRef{Window: t.Window, Bucket: t.Bucket})
		}
	}
	if e != nil {
		s.mu.Unlock()
	}
	for _, r := range raised {
		m.raiseMark(r.Window, r.Bucket)
	}
}

// raiseMark counts one more raise of a reset instant in bucket b of w in
// the reset marker ([ResetMarkKey]), under the store's own region. It runs
// after the raise, once its shard is unlocked: a reader that sees the
// marker's new count and then reads the instant sees the raise.
func (m *Memory) raiseMark(w time.Duration, b int64) {
	k := memKey{key: ResetMarkKey, wMs: w.Milliseconds(), kind: kindCounter}
	s := m.shard(k.key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := m.lookup(s, k, true).ensure(b); x != nil {
		x.add(m.region, 1, 0, k.wMs, false, false)
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
