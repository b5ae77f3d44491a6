package region

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/rlcluster/rlcluster/internal/window"
)

// DenyCacheConfig configures a [DenyCache]. Zero fields mean their default.
type DenyCacheConfig struct {
	// MaxKeys bounds the number of denials held (one per key, window and
	// kind of state). When a shard is full, a new denial replaces an
	// expired one or, failing that, a random live one, counted in
	// Evictions. Default 100,000.
	MaxKeys int
	// Region is the wrapped store's local region, which answers from the
	// cache always list ([Open] sets it). Default: the store's, when it
	// has a Region() string method.
	Region string
}

// DefaultDenyCacheKeys is DenyCacheConfig.MaxKeys's default.
const DefaultDenyCacheKeys = 100_000

const (
	denyShards = 64
	// denySample is how many entries a full shard looks at for an expired
	// one before it evicts a live one.
	denySample = 4
)

// DenyCache is a [Store] that answers denials from memory. It wraps
// another store (normally [Redis]) and remembers, per key and window, the
// state the store last read for a request it denied:
//
//   - the counter algorithms: the bucket index b and the counts summed
//     over regions (prev, cur), with the per-region counts (and, for the
//     default SlidingWindow, the per-region trails, see
//     [RegionCount]);
//   - TokenBucket: the theoretical arrival time TAT.
//
// Counts and the TAT only ever grow (the local count by admitted
// decisions, remote counts by max-merge), so what a denial read is a lower
// bound of the store's state at any later instant. (The trails of the
// default sliding window count no fewer hits after any offset as they
// grow: a mark is only added after the last one, or moves later, and a
// merge keeps the granule with more hits.) A later request at time
// t in bucket b' first shifts the remembered counts to b' (b' = b: as they
// are; b' = b+1: prev = cur, cur = 0; later: zero) and decides on them with
// the same pure math the store uses ([window.Limit.DecideCounter],
// [window.Limit.DecideGCRA]). The estimate only grows with the counts, so
// when the remembered state denies, the store's would too: the request is
// answered from memory, with Remaining, RetryAfter and ResetAfter from that
// math and Regions and Local from the remembered (shifted) counts. When it
// allows, the request goes to the store. A request whose bucket is older
// than the remembered one also goes to the store. SlidingLog requests
// always go to the store.
//
// An entry expires at T = t + RetryAfter of a one-hit request at the time
// t of the denial, the first instant its state could admit anything; time is
// the requests' Now, the cache never reads the clock. Merge passes through
// and then forgets the merged keys' entries, so the stats shown stay
// current; the answers would be safe without it. Vectors and Close pass
// through. The one way a remembered denial can be stricter than the store
// is the store losing counts it held (an eviction in the in-memory store,
// a flushed or restarted Redis): the counts the cache holds were real.
//
// Only the local and remote counts the store reported are held; nothing is
// counted in the cache itself. A Result's Regions slice answered from the
// cache may be shared with other results and must not be modified.
//
// The cache has 64 shards, each a map under a read-write lock held for a
// map access only, never across I/O. It is safe for concurrent use.
type DenyCache struct {
	s       Store
	local   string // the store's local region, when it says
	seed    maphash.Seed
	perMax  int
	maxKeys int
	shards  [denyShards]denyShard
	hits    atomic.Uint64
	misses  atomic.Uint64
	evicted atomic.Uint64
}

var _ Store = (*DenyCache)(nil)

type denyShard struct {
	mu sync.RWMutex
	m  map[memKey]*denyEntry
	_  [32]byte // keep shards on separate cache lines
}

// denyEntry is what a denial read. It is never modified once stored.
type denyEntry struct {
	limit   window.Limit
	untilMs int64 // T: from then on the state admits a one-hit request
	// counter algorithms
	bucket  int64
	counts  window.Counts
	local   uint64
	regions []RegionCount
	// token bucket
	tatUs int64
}

// DenyCacheStats are a DenyCache's counters since it was made.
type DenyCacheStats struct {
	// Hits counts requests answered from memory.
	Hits uint64
	// Misses counts requests sent to the store (SlidingLog included).
	Misses uint64
	// Evictions counts live entries dropped to respect MaxKeys.
	Evictions uint64
	// Entries is the number of entries held, live or expired.
	Entries int
}

// NewDenyCache returns a DenyCache in front of s.
func NewDenyCache(s Store, cfg DenyCacheConfig) *DenyCache {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultDenyCacheKeys
	}
	c := &DenyCache{s: s, seed: maphash.MakeSeed(), perMax: max(1, (cfg.MaxKeys+denyShards-1)/denyShards), maxKeys: cfg.MaxKeys}
	c.local = cfg.Region
	if r, ok := s.(interface{ Region() string }); ok && c.local == "" {
		c.local = r.Region()
	}
	for i := range c.shards {
		c.shards[i].m = make(map[memKey]*denyEntry)
	}
	return c
}

// DenyCacheStats returns the cache's counters.
func (c *DenyCache) DenyCacheStats() DenyCacheStats {
	st := DenyCacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evicted.Load()}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		st.Entries += len(s.m)
		s.mu.RUnlock()
	}
	return st
}

func (c *DenyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%denyShards]
}

// Check answers from memory each request that a remembered denial still
// denies and sends the others to the store in one call; see [Store] and
// [DenyCache].
func (c *DenyCache) Check(ctx context.Context, reqs []Request, res []Result) error {
	if len(reqs) == 1 {
		// The common case, without bookkeeping.
		hit, held := c.answer(&reqs[0], &res[0])
		if hit {
			c.hits.Add(1)
			return nil
		}
		c.misses.Add(1)
		if err := c.s.Check(ctx, reqs, res); err != nil {
			return err
		}
		c.remember(&reqs[0], &res[0], held)
		return nil
	}
	var miss []int
	var held []bool
	for i := range reqs {
		if hit, h := c.answer(&reqs[i], &res[i]); !hit {
			miss = append(miss, i)
			held = append(held, h)
		}
	}
	c.hits.Add(uint64(len(reqs) - len(miss)))
	c.misses.Add(uint64(len(miss)))
	switch {
	case len(miss) == 0:
		return nil
	case len(miss) == len(reqs):
		if err := c.s.Check(ctx, reqs, res); err != nil {
			return err
		}
	default:
		sub := make([]Request, len(miss))
		subRes := make([]Result, len(miss))
		for j, i := range miss {
			sub[j] = reqs[i]
		}
		if err := c.s.Check(ctx, sub, subRes); err != nil {
			return err
		}
		for j, i := range miss {
			res[i] = subRes[j]
		}
	}
	for j, i := range miss {
		c.remember(&reqs[i], &res[i], held[j])
	}
	return nil
}

// entryKey returns the key of q's entry: the store's own identity of the
// state (sliding and fixed windows share their buckets; a calendar
// window's is its current bucket's window, as Merge's totals name it).
func entryKey(q *Request) memKey {
	k := memKey{key: q.Key, wMs: q.Limit.WindowMs(), kind: kindOf(q.Limit.Algorithm)}
	if q.Limit.Calendar.Unit != 0 {
		w, _ := q.Limit.BucketAt(window.Ms(q.Now))
		k.wMs = w.Milliseconds()
	}
	return k
}

// answer writes to out the denial that the remembered state gives q, and
// reports whether there was one (hit) and whether an entry for q's key was
// held at all.
func (c *DenyCache) answer(q *Request, out *Result) (hit, held bool) {
	if q.Limit.Algorithm == window.SlidingLog {
		return false, false
	}
	nowMs := window.Ms(q.Now)
	s := c.shard(q.Key)
	k := entryKey(q)
	s.mu.RLock()
	e := s.m[k]
	s.mu.RUnlock()
	if e == nil {
		return false, false
	}
	if e.limit != q.Limit {
		return false, true
	}
	if nowMs >= e.untilMs {
		s.mu.Lock()
		if s.m[k] == e {
			delete(s.m, k)
		}
		s.mu.Unlock()
		return false, false
	}
	if q.Limit.Algorithm == window.TokenBucket {
		d, _ := q.Limit.DecideGCRA(nowMs, e.tatUs, q.Hits)
		if d.Allowed {
			return false, true
		}
		*out = Result{Decision: d, TAT: e.tatUs}
		return true, true
	}
	_, b := q.Limit.BucketAt(nowMs)
	if q.Limit.Algorithm.Trails() {
		return c.answerTrails(q, e, nowMs, b, out), true
	}
	switch {
	case b == e.bucket:
		d := q.Limit.DecideCounter(nowMs, e.counts, q.Hits)
		if d.Allowed {
			return false, true
		}
		*out = Result{Decision: d, Regions: e.regions, Local: e.local}
		return true, true
	case b == e.bucket+1:
		// The remembered current bucket is now the previous one.
		d := q.Limit.DecideCounter(nowMs, window.Counts{Prev: e.counts.Cur}, q.Hits)
		if d.Allowed {
			return false, true
		}
		*out = Result{Decision: d, Regions: c.shifted(e.regions)}
		return true, true
	}
	// An older bucket, or one in which nothing remembered counts any more.
	return false, true
}

// answerTrails is answer for the default sliding window, on the remembered
// per-region trails.
func (c *DenyCache) answerTrails(q *Request, e *denyEntry, nowMs, b int64, out *Result) bool {
	if b != e.bucket && b != e.bucket+1 {
		return false
	}
	var pb, cb [4]window.Trail
	prev, cur := pb[:0], cb[:0]
	local := -1
	for _, rc := range e.regions {
		if b == e.bucket {
			if rc.Region == c.local {
				local = len(cur)
			}
			prev, cur = append(prev, rc.PreviousTrail), append(cur, rc.CurrentTrail)
		} else {
			prev = append(prev, rc.CurrentTrail)
		}
	}
	d := q.Limit.DecideTrails(nowMs, prev, cur, local, q.Hits)
	if d.Allowed {
		return false
	}
	*out = Result{Decision: d, Regions: e.regions, Local: e.local}
	if b != e.bucket {
		*out = Result{Decision: d, Regions: c.shifted(e.regions)}
	}
	return true
}

// shifted returns the per-region counts of rs one bucket later: each
// current count becomes the previous one. As a store lists them, regions
// with nothing left are dropped, except the local region.
func (c *DenyCache) shifted(rs []RegionCount) []RegionCount {
	out := make([]RegionCount, 0, len(rs))
	for _, rc := range rs {
		if rc.Current > 0 || rc.Region == c.local {
			out = append(out, RegionCount{Region: rc.Region, Previous: rc.Current, PreviousTrail: rc.CurrentTrail})
		}
	}
	return out
}

// remember keeps the state behind res when the store denied q. When the
// store allowed q and an entry for its key was held, the entry is dropped:
// the counts have grown past it, and a denial shows the counts it was made
// on. (Keeping it would be safe; dropping it keeps the stats exact.)
func (c *DenyCache) remember(q *Request, res *Result, held bool) {
	if res.Allowed {
		if held {
			c.forget(q.Key, entryKey(q))
		}
		return
	}
	nowMs := window.Ms(q.Now)
	e := &denyEntry{limit: q.Limit}
	switch q.Limit.Algorithm {
	case window.SlidingLog:
		return
	case window.TokenBucket:
		d, _ := q.Limit.DecideGCRA(nowMs, res.TAT, 1)
		if d.Allowed {
			if held {
				c.forget(q.Key, entryKey(q))
			}
			return
		}
		e.tatUs = res.TAT
		e.untilMs = nowMs + d.RetryAfter.Milliseconds()
	default:
		var n window.Counts
		for _, rc := range res.Regions {
			n.Cur = window.SatAdd(n.Cur, rc.Current)
			n.Prev = window.SatAdd(n.Prev, rc.Previous)
		}
		d := q.Limit.DecideCounter(nowMs, n, 1)
		if q.Limit.Algorithm.Trails() {
			var pb, cb [4]window.Trail
			prev, cur := pb[:0], cb[:0]
			local := -1
			for _, rc := range res.Regions {
				if rc.Region == c.local {
					local = len(cur)
				}
				prev, cur = append(prev, rc.PreviousTrail), append(cur, rc.CurrentTrail)
			}
			d = q.Limit.DecideTrails(nowMs, prev, cur, local, 1)
		}
		if d.Allowed || d.Bucket != res.Bucket {
			if held {
				c.forget(q.Key, entryKey(q))
			}
			return
		}
		e.bucket, e.counts, e.local, e.regions = res.Bucket, n, res.Local, res.Regions
		e.untilMs = nowMs + d.RetryAfter.Milliseconds()
	}
	s := c.shard(q.Key)
	k := entryKey(q)
	s.mu.Lock()
	if _, ok := s.m[k]; !ok && len(s.m) >= c.perMax {
		c.makeRoom(s, nowMs)
	}
	s.m[k] = e
	s.mu.Unlock()
}

// makeRoom drops one entry of the full shard s, whose lock is held: an
// expired one among the first few that map iteration (random) yields, or
// else the first, which is a random eviction.
func (c *DenyCache) makeRoom(s *denyShard, nowMs int64) {
	var victim memKey
	n := 0
	for k, e := range s.m {
		if e.untilMs <= nowMs {
			delete(s.m, k)
			return
		}
		if n == 0 {
			victim = k
		}
		if n++; n == denySample {
			break
		}
	}
	delete(s.m, victim)
	c.evicted.Add(1)
}

// Merge max-merges totals into the store, then forgets the merged keys'
// remembered denials so that later answers show the merged counts.
func (c *DenyCache) Merge(ctx context.Context, totals []Total) error {
	err := c.s.Merge(ctx, totals)
	for _, t := range totals {
		c.forget(t.Key, memKey{key: t.Key, wMs: t.Window.Milliseconds(), kind: kindCounter})
	}
	return err
}

// forget drops the entry k of key, if held.
func (c *DenyCache) forget(key string, k memKey) {
	s := c.shard(key)
	s.mu.RLock()
	_, ok := s.m[k]
	s.mu.RUnlock()
	if ok {
		s.mu.Lock()
		delete(s.m, k)
		s.mu.Unlock()
	}
}

// Vectors passes through to the store.
func (c *DenyCache) Vectors(ctx context.Context, refs []BucketRef) ([][]Total, error) {
	return c.s.Vectors(ctx, refs)
}

// Close closes the store.
func (c *DenyCache) Close() error { return c.s.Close() }
