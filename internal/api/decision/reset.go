package decision

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// Resets. A reset of a store key K is an instant R (Unix ms): hits counted
// under K before R no longer count. R is kept as a replicated total of its
// own, beside the counters: key ResetKey(K), in the UTC calendar year that
// holds R ([ResetBucket]), count R, one entry per region that reset K. It
// is max-merged like every total, so a reset is never lost and a late
// message never undoes it, and the stores and replication treat it as any
// other count of a calendar bucket. The key's reset instant is the largest
// entry of the current and previous UTC years, so a reset is remembered
// until the end of the UTC year after the one it was made in: past the
// end of every bucket that holds R, a calendar year's in any zone
// included (no zone's year ends a day after UTC's), and past the previous
// bucket of every fixed window ([window.MaxWindow]).
//
// A decision applies R without reading the counters' layout: once a node
// knows of R, it counts K under the generation key GenKey(K, R), whose
// counters start empty, and the counts under K (or an older generation)
// are never read again; they expire. A node learns a reset from the store
// (its region's, where replication merges the other regions' resets) by
// a look at K: two more requests (the two years) in the decision's own
// store call; a decision that the look shows was made under an old
// generation is made again.
//
// A look is needed only when a reset may have come since the last. Each
// store keeps a reset marker ([region.ResetMarkKey]), a total in the same
// yearly buckets that the store raises, under its own region, after every
// merge of a reset instant into it (a local Reset's or replication's), so
// that the marker changes whenever a reset reaches the store, in whatever
// order resets arrive (a marker of the latest instant would not change
// for an older reset that arrives late). It is never replicated: each
// store keeps its own. A node reads the marker (two more requests, in a
// decision's call that needs it) about every ResetTTL/2, not per key, and
// numbers each read that differs from the one before (a generation). It
// records with each key's instant the marker's generation it had read
// before the look's call began. A decision skips K's look when the node
// looked at K within ResetTTL, or when the marker, read within ResetTTL,
// shows no reset in the current and previous UTC years or is still at
// the generation recorded with K's instant. That is exact: a reset that
// reached the store before the marker read that the decision trusts
// raised the marker before that read, so the read differs from the one
// read before K's look (then K is looked at), or that earlier read saw it
// too and K's look after it found the instant. Over many keys, none of
// them reset, a decision is then one store request.
//
// So a reset reaches every decision at most the replication delay (its
// merge and the marker's raise in the region's store) plus ResetTTL after
// it was made, and a decision made in a region before the reset reached
// it counts in the old generation: under-counted, never over.

// resetLimit is the limit of a reset instant's total: a UTC calendar
// year, so that a reset outlives every counter it clears.
var resetLimit = window.Limit{Limit: window.MaxLimit, Algorithm: window.FixedWindow, Calendar: window.Calendar{Unit: window.CalendarYear}}

// ResetBucket returns the bucket that keeps a reset made at atMs (Unix
// ms), as the stores and replication name buckets
// ([window.Limit.BucketAt]): the UTC calendar year that holds atMs.
func ResetBucket(atMs int64) (w time.Duration, b int64) { return resetLimit.BucketAt(atMs) }

// DefaultResetTTL is how long a node trusts what it last read of a key's
// reset instant (Config.ResetTTL).
const DefaultResetTTL = 500 * time.Millisecond

// The tags of resets' keys: a reset instant's key is tagReset + the store
// key, a generation's is tagGen + R + ":" + the store key. Neither starts
// any namespace's tag (key.go), so no caller's key reaches them.
const (
	tagReset = region.ResetKeyPrefix
	tagGen   = "g"
)

// maxGenPrefixBytes is the longest generation prefix: the tag, R in
// decimal (below 2^53) and the ':'.
const maxGenPrefixBytes = len(tagGen) + 16 + 1

// ResetKey returns the key of storeKey's reset instant.
func ResetKey(storeKey string) string { return tagReset + storeKey }

// GenKey returns the key storeKey counts under after a reset at atMs; 0
// (no reset) is storeKey itself.
func GenKey(storeKey string, atMs int64) string {
	if atMs <= 0 {
		return storeKey
	}
	return tagGen + strconv.FormatInt(atMs, 10) + ":" + storeKey
}

// ErrNoReset is returned by [Decider.Reset] when the store cannot keep a
// reset instant.
var ErrNoReset = errors.New("decision: the store cannot record resets")

// resetCache is what a node last read of keys' reset instants, in shards
// so that concurrent decisions seldom share a lock. It is safe for
// concurrent use and holds about max keys at most.
type resetCache struct {
	ttl    time.Duration
	max    int // per shard
	seed   maphash.Seed
	shards [resetShards]resetShard
}

const resetShards = 32

type resetShard struct {
	mu sync.Mutex
	m  map[string]resetEntry
}

type resetEntry struct {
	atMs   int64     // the reset instant, 0 for none
	readAt time.Time // when it was read
	// gen is the generation of the reset marker ([resetMark]) that the
	// node had read before it read atMs, 0 for none.
	gen uint64
}

func newResetCache(ttl time.Duration, max int) *resetCache {
	c := &resetCache{ttl: ttl, max: (max + resetShards - 1) / resetShards, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]resetEntry)
	}
	return c
}

func (c *resetCache) shard(key string) *resetShard {
	return &c.shards[maphash.String(c.seed, key)%resetShards]
}

// fresh reports whether what was read at readAt is still trusted at now.
func fresh(now, readAt time.Time, ttl time.Duration) bool {
	return now.Sub(readAt) < ttl && !now.Before(readAt)
}

// get returns key's reset instant as last read, and whether a decision at
// now must read it again (look): it was read more than the TTL ago (or
// never), and the marker as m shows it does not tell that it is unchanged
// since; byMark is set when the marker told. When m.none is set (the
// store holds no reset instant), it records a read at now that found none
// instead, as put(key, 0, now, m.gen) would, under the same lock.
func (c *resetCache) get(key string, now time.Time, m *markView) (atMs int64, look, byMark bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	switch {
	case ok && fresh(now, e.readAt, c.ttl):
	case m.none:
		c.putLocked(sh, key, e, ok, 0, now, m.gen)
	case m.gen != 0 && fresh(now, m.readAt, c.ttl) && (m.zero || (ok && e.gen == m.gen)):
		// The marker, read within the TTL, shows no reset at all, or
		// has not changed since the node read the key's instant.
		return e.atMs, false, true
	default:
		return e.atMs, true, false
	}
	return e.atMs, false, false
}

// put records key's reset instant as read at now, after the node had
// read the marker's generation gen; it never lowers an instant. It
// returns the instant it recorded.
func (c *resetCache) put(key string, atMs int64, now time.Time, gen uint64) int64 {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	return c.putLocked(sh, key, e, ok, atMs, now, gen)
}

// putOwn records a reset of key at atMs that this node made at now: the
// instant is in the store, and what the node read before stays true.
func (c *resetCache) putOwn(key string, atMs int64, now time.Time) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	c.putLocked(sh, key, e, ok, atMs, now, e.gen)
}

// putLocked is put with sh (key's shard) locked and key's entry e (ok:
// there is one) already looked up.
func (c *resetCache) putLocked(sh *resetShard, key string, e resetEntry, ok bool, atMs int64, now time.Time, gen uint64) int64 {
	if ok && e.atMs > atMs {
		atMs = e.atMs
	}
	if !ok && len(sh.m) >= c.max {
		// Full: forget about half of the shard. Which half does not
		// matter: the store has the truth, read again after a miss.
		n := 0
		for k := range sh.m {
			delete(sh.m, k)
			if n++; n >= c.max/2 {
				break
			}
		}
	}
	sh.m[key] = resetEntry{atMs: atMs, readAt: now, gen: gen}
	return atMs
}

// resetMark is what the node last read of its store's reset marker
// ([region.ResetMarkKey]), which changes whenever a reset instant may
// have reached the store. Each read that finds the marker other than the
// read before it gets a new generation. It is safe for concurrent use; a
// decision reads it without a lock.
type resetMark struct {
	ttl   time.Duration
	state atomic.Pointer[markState] // nil until the first read
	// claim is the Now (Unix ns) of a read of the marker asked for and
	// not learned yet, 0 when none: while it is younger than the TTL no
	// other decision asks, so that the node reads the marker about once
	// per TTL.
	claim atomic.Int64
	mu    sync.Mutex // serializes learn
}

// markState is one read of the marker.
type markState struct {
	gen    uint64    // from 1, one more for each read that differs
	readAt time.Time // the Now of the decisions of the call that read it
	counts []markCount
	zero   bool // no count: no reset in the current or previous UTC year
}

// markCount is one region's counts in one of the marker's two peeks.
type markCount struct {
	bucket            int64
	region            string
	current, previous uint64
}

// markView is what a decision knows of the marker before its store call.
type markView struct {
	gen    uint64 // 0 before the first read
	readAt time.Time
	zero   bool
	none   bool // the store holds no reset instant ([resetless])
}

// view returns what the node knows of the marker.
func (m *resetMark) view() markView {
	st := m.state.Load()
	if st == nil {
		return markView{}
	}
	return markView{gen: st.gen, readAt: st.readAt, zero: st.zero}
}

// tryClaim reports whether a decision at now may read the marker: no
// other read is in flight (one asked more than the TTL ago counts as
// lost). It returns the claim to pass to learn or release.
func (m *resetMark) tryClaim(now time.Time) (claim int64, ok bool) {
	n := max(now.UnixNano(), 1)
	c := m.claim.Load()
	if c != 0 && n >= c && n-c < int64(m.ttl) {
		return 0, false
	}
	return n, m.claim.CompareAndSwap(c, n)
}

// release gives up claim, whose read failed.
func (m *resetMark) release(claim int64) {
	if claim != 0 {
		m.claim.CompareAndSwap(claim, 0)
	}
}

// learn records the marker as its two peeks' results res show it, read
// in a call whose decisions' Now was readAt, and gives up claim.
func (m *resetMark) learn(res []region.Result, readAt time.Time, claim int64) {
	st := &markState{gen: 1, readAt: readAt, zero: true}
	for i := range res {
		for _, rc := range res[i].Regions {
			st.counts = append(st.counts, markCount{bucket: res[i].Bucket, region: rc.Region, current: rc.Current, previous: rc.Previous})
			st.zero = st.zero && rc.Current == 0 && rc.Previous == 0
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.release(claim)
	old := m.state.Load()
	if old != nil {
		if readAt.Before(old.readAt) {
			return // a later read is known already
		}
		st.gen = old.gen
		if !slices.Equal(old.counts, st.counts) {
			st.gen++
		}
	}
	m.state.Store(st)
}

// peekPair writes to out the two store requests that read the total k
// of a reset instant (or of the marker) at now: its current UTC year and
// the previous one.
func peekPair(out []region.Request, k string, now time.Time) {
	_, b := ResetBucket(window.Ms(now))
	prev := now
	if b > 0 {
		prev = time.UnixMilli(b - 1)
	}
	out[0] = region.Request{Key: k, Limit: resetLimit, Hits: 1, Now: now, Peek: true}
	out[1] = region.Request{Key: k, Limit: resetLimit, Hits: 1, Now: prev, Peek: true}
}

// resetInstant returns the reset instant that a key's two peeks' results
// show: the largest count of any region.
func resetInstant(res []region.Result) int64 {
	var at uint64
	for i := range res {
		for _, rc := range res[i].Regions {
			at = max(at, rc.Current, rc.Previous)
		}
	}
	return int64(min(at, window.MaxLimit))
}

// baseKey returns a store key without its generation prefix: the key
// that reset instants are kept for.
func baseKey(k string) string {
	if !strings.HasPrefix(k, tagGen) {
		return k
	}
	i := len(tagGen)
	for i < len(k) && k[i] >= '0' && k[i] <= '9' {
		i++
	}
	if i == len(tagGen) || i == len(k) || k[i] != ':' {
		return k
	}
	return k[i+1:]
}

// resetless is a store that can tell that it holds no reset instant at
// all ([region.Memory.NoResets]), so that reading one would find none.
type resetless interface {
	NoResets() bool
}

// resetLook is what a decision's store call reads of resets: the reset
// instants of reqs[stale] and, when claim is not 0, the marker.
type resetLook struct {
	stale []int
	gen   uint64    // the marker's generation known before the call
	claim int64     // the node's claim to read the marker, 0: no read
	now   time.Time // the first request's Now
}

// peeks returns the number of store requests the look adds to a call.
func (l *resetLook) peeks() int {
	n := resetPeeksPer * len(l.stale)
	if l.claim != 0 {
		n += resetPeeksPer
	}
	return n
}

// resetGens points every request at its key's generation as this node
// last read it, and returns what the decision must read of resets: the
// instants that must be read again (see resetCache.get), and the marker
// when the decision needs it (it reads an instant, or trusts one by the
// marker) and the node's read of it is older than half the TTL (so that
// while decisions keep coming it is read again before it expires) and no
// other decision is reading it. When the store holds no reset instant, it
// records for the keys what their read would find (none) instead, as
// learnResets would, and reads nothing.
func (d *Decider) resetGens(reqs []Request) (look resetLook) {
	var v markView
	if d.resetless != nil && d.resetless.NoResets() {
		v.none = true
	} else {
		v = d.mark.view()
	}
	look.gen = v.gen
	var byMark bool
	for i := range reqs {
		q := &reqs[i].Store
		k := baseKey(q.Key)
		at, stale, by := d.resets.get(k, q.Now, &v)
		q.Key = GenKey(k, at)
		byMark = byMark || by
		if stale {
			look.stale = append(look.stale, i)
		}
	}
	if len(look.stale) > 0 || byMark {
		look.now = reqs[0].Store.Now
		if v.gen == 0 || !fresh(look.now, v.readAt, d.cfg.ResetTTL/2) {
			look.claim, _ = d.mark.tryClaim(look.now)
		}
	}
	return look
}

// appendResetPeeks appends to dst the store requests that look reads:
// resetPeeksPer of them per key, in stale's order, then the marker's.
func appendResetPeeks(dst []region.Request, reqs []Request, look *resetLook) []region.Request {
	n := len(dst)
	dst = slices.Grow(dst, look.peeks())[:n+look.peeks()]
	for j, i := range look.stale {
		peekPair(dst[n+resetPeeksPer*j:], ResetKey(baseKey(reqs[i].Store.Key)), reqs[i].Store.Now)
	}
	if look.claim != 0 {
		peekPair(dst[n+resetPeeksPer*len(look.stale):], region.ResetMarkKey, look.now)
	}
	return dst
}

// resetPeeksPer is the number of store requests that read one key's reset
// instant, or the marker.
const resetPeeksPer = 2

// learnResets records what look read (res: the results of the requests
// appendResetPeeks added), and returns whether request stale[j] was
// decided under an older generation than that (its decision must be made
// again, on the key's current counts). Each instant is recorded with the
// marker's generation known before the call, never one the same call
// read: a store may take one call's requests in any order (a Redis
// Cluster's shards do).
func (d *Decider) learnResets(reqs []Request, look *resetLook, res []region.Result) (redo []bool) {
	for j, i := range look.stale {
		q := &reqs[i].Store
		k := baseKey(q.Key)
		at := d.resets.put(k, resetInstant(res[resetPeeksPer*j:resetPeeksPer*(j+1)]), q.Now, look.gen)
		if g := GenKey(k, at); g != q.Key {
			if redo == nil {
				redo = make([]bool, len(reqs))
			}
			redo[i] = true
			q.Key = g
		}
	}
	if look.claim != 0 {
		n := resetPeeksPer * len(look.stale)
		d.mark.learn(res[n:n+resetPeeksPer], look.now, look.claim)
	}
	return redo
}

// readResets reads what look asks for in one store call and points the
// requests at their keys' generations.
func (d *Decider) readResets(ctx context.Context, reqs []Request, look *resetLook) error {
	peeks := appendResetPeeks(nil, reqs, look)
	res := make([]region.Result, len(peeks))
	if err := d.cfg.Store.Check(ctx, peeks, res); err != nil {
		d.mark.release(look.claim)
		return err
	}
	d.learnResets(reqs, look, res)
	return nil
}

// restorer is a store that max-merges its own region's totals
// ([region.Stack.Restore], [region.Redis.Restore], [region.Memory.Restore]).
type restorer interface {
	Restore(ctx context.Context, totals []region.Total) error
}

// Reset records a reset of the counters that in names (its key under a
// rule, or in the inline namespace; an inline limit's window and algorithm
// do not matter, its scope does) at in.Now, and returns the reset's store
// key and instant. It validates in as a Peek would (the token's scope
// included). The instant goes to the store as this region's entry,
// max-merged, and to the Pool unless the limit is region-scoped.
func (d *Decider) Reset(ctx context.Context, in Input) (key string, at time.Time, err error) {
	in.Peek = true
	in.Hits = 1
	r, err := d.validate(in)
	if err != nil {
		return "", time.Time{}, err
	}
	st, ok := d.cfg.Store.(restorer)
	if !ok {
		return "", time.Time{}, ErrNoReset
	}
	atMs := window.Ms(in.Now)
	if atMs <= 0 {
		return "", time.Time{}, Invalid("the clock is before the epoch")
	}
	w, b := ResetBucket(atMs)
	t := region.Total{
		Key:    ResetKey(r.Store.Key),
		Window: w,
		Bucket: b,
		Region: d.cfg.Region,
		Count:  uint64(atMs),
	}
	if err := st.Restore(ctx, []region.Total{t}); err != nil {
		return "", time.Time{}, fmt.Errorf("record reset: %w", err)
	}
	if d.cfg.Pool != nil && r.Scope == rules.ScopeGlobal {
		t.Limit, t.Estimate = 1, 1 // at once
		d.cfg.Pool.Dirty(t)
	}
	d.resets.putOwn(r.Store.Key, atMs, in.Now)
	return r.Store.Key, time.UnixMilli(atMs), nil
}

// ReadableKey returns a store key without its generation prefix, for logs
// and the status page.
func ReadableKey(storeKey string) string {
	if !strings.HasPrefix(storeKey, tagGen) {
		return storeKey
	}
	if _, rest, ok := strings.Cut(storeKey, ":"); ok {
		return rest
	}
	return storeKey
}
