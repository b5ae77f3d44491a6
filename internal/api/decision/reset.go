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
// (its region's, where replication merges the other regions' resets) at
// most Config.ResetTTL after its last look at K: the look is two more
// requests (the two years) in the decision's own store call, and a
// decision that it shows was made under an old generation is made again.
// So a reset reaches every decision at most the replication delay plus
// ResetTTL after it was made, and a decision made in a region before the
// reset reached it counts in the old generation: under-counted, never
// over.

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

// get returns key's reset instant and whether it was read within the TTL
// before now. When it was not and none is true, it records a read at now
// that found no instant, as put(key, 0, now) would, under the same lock.
func (c *resetCache) get(key string, now time.Time, none bool) (atMs int64, fresh bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	fresh = ok && now.Sub(e.readAt) < c.ttl && !now.Before(e.readAt)
	if !fresh && none {
		c.putLocked(sh, key, e, ok, 0, now)
	}
	return e.atMs, fresh
}

// put records key's reset instant as read at now; it never lowers one. It
// returns the instant it recorded.
func (c *resetCache) put(key string, atMs int64, now time.Time) int64 {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	return c.putLocked(sh, key, e, ok, atMs, now)
}

// putLocked is put with sh (key's shard) locked and key's entry e (ok:
// there is one) already looked up.
func (c *resetCache) putLocked(sh *resetShard, key string, e resetEntry, ok bool, atMs int64, now time.Time) int64 {
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
	sh.m[key] = resetEntry{atMs: atMs, readAt: now}
	return atMs
}

// resetPeekPair writes to out the two store requests that read key's reset
// instant at now: its current UTC year and the previous one.
func resetPeekPair(out []region.Request, key string, now time.Time) {
	k := ResetKey(key)
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

// resetGens points every request at its key's generation as this node
// last read it, and returns the requests whose key's reset instant must be
// read again (never read, or read more than the TTL ago). When the store
// holds no reset instant, it records for those what their read would
// find (none) instead, as learnResets would.
func (d *Decider) resetGens(reqs []Request) (stale []int) {
	none := d.resetless != nil && d.resetless.NoResets()
	for i := range reqs {
		q := &reqs[i].Store
		k := baseKey(q.Key)
		at, fresh := d.resets.get(k, q.Now, none)
		q.Key = GenKey(k, at)
		if !fresh && !none {
			stale = append(stale, i)
		}
	}
	return stale
}

// appendResetPeeks appends to dst the store requests that read the reset
// instants of reqs[stale]: resetPeeksPer of them per key, in stale's
// order.
func appendResetPeeks(dst []region.Request, reqs []Request, stale []int) []region.Request {
	n := len(dst)
	dst = slices.Grow(dst, resetPeeksPer*len(stale))[:n+resetPeeksPer*len(stale)]
	for j, i := range stale {
		resetPeekPair(dst[n+resetPeeksPer*j:], baseKey(reqs[i].Store.Key), reqs[i].Store.Now)
	}
	return dst
}

// resetPeeksPer is the number of store requests that read one key's reset
// instant.
const resetPeeksPer = 2

// learnResets records what the peeks of reqs[stale] read, and returns
// whether request stale[j] was decided under an older generation than
// that (its decision must be made again, on the key's current counts).
func (d *Decider) learnResets(reqs []Request, stale []int, res []region.Result) (redo []bool) {
	for j, i := range stale {
		q := &reqs[i].Store
		k := baseKey(q.Key)
		at := d.resets.put(k, resetInstant(res[resetPeeksPer*j:resetPeeksPer*(j+1)]), q.Now)
		if g := GenKey(k, at); g != q.Key {
			if redo == nil {
				redo = make([]bool, len(reqs))
			}
			redo[i] = true
			q.Key = g
		}
	}
	return redo
}

// readResets reads the reset instants of reqs[stale] in one store call
// and points the requests at their keys' generations.
func (d *Decider) readResets(ctx context.Context, reqs []Request, stale []int) error {
	peeks := appendResetPeeks(nil, reqs, stale)
	res := make([]region.Result, len(peeks))
	if err := d.cfg.Store.Check(ctx, peeks, res); err != nil {
		return err
	}
	d.learnResets(reqs, stale, res)
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
	d.resets.put(r.Store.Key, atMs, in.Now)
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
