package region

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlcluster/rlcluster/internal/window"
)

// RedisConfig configures a [Redis] store. Zero fields mean their default.
type RedisConfig struct {
	// URL names the Redis deployment; see the package documentation for the
	// forms accepted (standalone, TLS, Cluster, Sentinel). Required.
	URL string
	// Password, when set, is the AUTH password, in place of any the URL
	// holds (in the Sentinel forms, the sentinels' too unless the URL's
	// sentinel_password says otherwise), so that the URL need hold no
	// secret.
	Password string
	// Region is the local region's name, the only hash field that Check
	// increments. Default "local".
	Region string
	// DialTimeout bounds opening a connection. Default 2s.
	DialTimeout time.Duration
	// ReadTimeout bounds waiting for a reply. Default 1s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a command. Default 1s.
	WriteTimeout time.Duration
	// PoolSize is the number of connections per Redis node. Default
	// go-redis's (10 per GOMAXPROCS).
	PoolSize int
	// MaxRetries is how many times go-redis retries a command after a
	// network error. Default 0 (-1 below): a decision whose reply was lost
	// may already have counted, so retrying it could count it twice.
	MaxRetries int
	// ServerClock takes the instant of counter decisions (sliding and
	// fixed window) from Redis's clock (TIME, inside the script), which
	// every node of the region shares, instead of Request.Now: nodes with
	// skewed clocks then agree on bucket boundaries. Request.Now still
	// picks the candidate buckets, so a node clock off by a window or more
	// falls back to Request.Now. Default false (Request.Now); rlnode turns
	// it on (--redis-clock).
	ServerClock bool
	// TTLMargin is added to the two windows a bucket must live. Default 10s.
	TTLMargin time.Duration
	// Coalesce gathers concurrent Check calls into shared pipelines (see
	// [Coalesce]). The zero value turns coalescing on with its defaults.
	Coalesce Coalesce
	// CallTimeout, when set, bounds how long a Check waits for its answer:
	// past it, Check returns an error wrapping [ErrTimeout] while the
	// round trip goes on (see [Redis.Check]). One timer per round trip
	// bounds every call it carries. Default 0: only ctx bounds a call.
	// [Open] sets it to the failover's timeout.
	CallTimeout time.Duration
	// TLSConfig, when set, replaces the TLS settings a rediss:// (or
	// rediss+sentinel://) URL implies: a CA pool in RootCAs, client
	// certificates for Redis's tls-auth-clients. ServerName defaults to the
	// URL's host. Setting it for a URL without TLS is an error.
	TLSConfig *tls.Config
}

// Redis is the [Store] on a region's Redis: standalone, Sentinel or
// Cluster, through go-redis's UniversalClient. A decision alone is one
// EVALSHA of its Lua script; the decisions of one round trip (one Check of
// several requests, or concurrent Checks gathered by [Coalesce]) are one
// EVALSHA of a batch script that runs each of them as its own script would,
// or on a Redis Cluster one such EVALSHA per hash slot, in one pipeline. It
// is safe for concurrent use.
//
// Key layout (W_ms is the window in milliseconds, b the bucket index, and
// the key escaped so '}' and '%' never appear raw, which keeps the hash tag
// whole and distinct keys distinct):
//
//	rl:{<key>}:<W_ms>:<b>   hash, one field per region: a counter bucket
//	rl:{<key>}:g:<W_ms>     string, the GCRA theoretical arrival time (µs)
//	rl:{<key>}:l:<W_ms>     sorted set, the sliding log
//
// Memory in Redis: a counter bucket is one small hash per key and window
// (one field per region, at most MaxRegionsPerBucket); a sliding log holds
// one sorted-set member per admitted request still in its window, about
// 130 bytes each on Redis 7.0 (MEMORY USAGE rl:{k}:l:3600000 SAMPLES 0 is
// 1,291,632 bytes after 10,000 admissions of limit 10,000 in an hour). A
// log is bounded by its limit; the total is bounded by Redis's maxmemory,
// not by the store.
type Redis struct {
	c      redis.UniversalClient
	region string
	// regionArg is region boxed once for the counter script's arguments.
	regionArg any
	marginMs  int64
	server    bool // RedisConfig.ServerClock
	nonce     atomic.Uint64
	node      string
	co        *coalescer
	batch     bool // one script call for many decisions (see batchScript)
	cluster   bool // batches hold only decisions of one hash slot
	pooled    bool // script replies read into pooled buffers (see roundTrip)

	// reloaded is called when a decision finds the scripts gone (see
	// OnReload); nil when unset.
	reloaded atomic.Pointer[func(context.Context) time.Duration]
	// heldUntil is until when (Unix ns, of the requests' clock) decisions
	// are held after the hook asked for it; 0 when never.
	heldUntil atomic.Int64

	mismatches     atomic.Uint64
	pipelines      atomic.Uint64
	regionsDropped atomic.Uint64
}

var _ Store = (*Redis)(nil)

// NewRedis connects to the Redis named by cfg.URL, checks that it answers
// and loads the scripts on every primary. ([Open] also accepts a Redis
// that does not answer yet.)
func NewRedis(ctx context.Context, cfg RedisConfig) (*Redis, error) {
	r, err := newRedis(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.connect(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// newRedis makes the store for cfg without any I/O.
func newRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	if cfg.TTLMargin <= 0 {
		cfg.TTLMargin = 10 * time.Second
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	r := &Redis{c: c, region: cfg.Region, marginMs: cfg.TTLMargin.Milliseconds(), server: cfg.ServerClock, node: hex.EncodeToString(id[:])}
	r.regionArg = r.region
	r.co = newCoalescer(cfg.Coalesce, cfg.CallTimeout, r)
	r.batch = true
	_, r.cluster = c.(*redis.ClusterClient)
	r.pooled = !r.cluster && cfg.MaxRetries <= 0
	return r, nil
}

// connect checks that Redis answers and loads the scripts on every
// primary. (A store that has not connected loads them on its first
// decision, which NOSCRIPT makes it do.)
func (r *Redis) connect(ctx context.Context) error {
	if err := r.c.Ping(ctx).Err(); err != nil {
		return r.wrap(ctx, "ping", err)
	}
	return r.load(ctx)
}

// load loads every script on every primary.
func (r *Redis) load(ctx context.Context) error {
	scripts := allScripts
	if r.batch {
		scripts = append(slices.Clip(scripts), batchScript)
	}
	for _, s := range scripts {
		if err := s.Load(ctx, r.c).Err(); err != nil {
			return r.wrap(ctx, "load scripts", err)
		}
	}
	return nil
}

// wrap wraps err from operation op; it also wraps ErrUnavailable unless
// err is an error reply to the command itself (see [classify]) or ctx
// ended.
func (r *Redis) wrap(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil || classify(err) == faultReply {
		return fmt.Errorf("region: redis %s: %w", op, err)
	}
	return fmt.Errorf("region: redis %s: %w: %w", op, ErrUnavailable, err)
}

// fault is the kind of an error from Redis; see [classify].
type fault uint8

const (
	faultNone fault = iota
	// faultReply is an error reply to one command (WRONGTYPE, NOSCRIPT, a
	// script's error): the command failed, the connection and the server
	// serve on.
	faultReply
	// faultBusy is an error reply of a server that cannot serve now:
	// LOADING (reading its dataset), TRYAGAIN (a slot being resharded),
	// MASTERDOWN (a replica cut off from its master) or CLUSTERDOWN.
	faultBusy
	// faultNoReply is a failure without a reply: a refused, lost or
	// closed connection, a timeout.
	faultNoReply
)

// classify returns the kind of err, an error of go-redis or a reply of
// Redis. Every error of the store is judged by it: a round trip fails only
// on faultNoReply (replies, failed ones included, stay with their
// commands), and only faultReply leaves Redis available (see [Redis.wrap]).
func classify(err error) fault {
	if err == nil {
		return faultNone
	}
	// Declared past the nil check: errors.As moves re to the heap, an
	// allocation per round trip that succeeded.
	var re redis.Error
	if !errors.As(err, &re) {
		return faultNoReply
	}
	code, _, _ := strings.Cut(re.Error(), " ")
	switch code {
	case "LOADING", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN":
		return faultBusy
	}
	return faultReply
}

// Region returns the local region's name.
func (r *Redis) Region() string { return r.region }

// Client returns the underlying go-redis client (for health checks).
func (r *Redis) Client() redis.UniversalClient { return r.c }

// Pipelines returns how many round trips Check has made to Redis (a
// single EVALSHA or a pipeline each).
func (r *Redis) Pipelines() uint64 { return r.pipelines.Load() }

// Mismatches returns how many decisions of the scripts disagreed with the Go
// computation from the same counts. It should stay 0.
func (r *Redis) Mismatches() uint64 { return r.mismatches.Load() }

// RedisStats are a [Redis] store's counters since it was made.
type RedisStats struct {
	// Pipelines counts Check's round trips (one EVALSHA or one pipeline).
	Pipelines uint64
	// Mismatches counts decisions of the scripts that disagreed with the
	// Go computation from the same counts; it should stay 0.
	Mismatches uint64
	// RegionsDropped counts merged totals dropped because their bucket
	// already held MaxRegionsPerBucket regions.
	RegionsDropped uint64
}

// Stats returns the store's counters.
func (r *Redis) Stats() RedisStats {
	return RedisStats{Pipelines: r.pipelines.Load(), Mismatches: r.mismatches.Load(), RegionsDropped: r.regionsDropped.Load()}
}

// Close stops coalescing and closes the client.
func (r *Redis) Close() error {
	r.co.close()
	return r.c.Close()
}

// escapeKey escapes '%' and '}' so the key can sit inside a hash tag.
func escapeKey(key string) string {
	if !strings.ContainsAny(key, "%}") {
		return key
	}
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		switch key[i] {
		case '%':
			b.WriteString("%25")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(key[i])
		}
	}
	return b.String()
}

// CounterKey returns the Redis key of a counter bucket.
func CounterKey(key string, w time.Duration, bucket int64) string {
	var buf [96]byte // one allocation, the string, for keys up to about 50 bytes
	return string(appendCounterKey(buf[:0], key, w, bucket))
}

func appendCounterKey(b []byte, key string, w time.Duration, bucket int64) []byte {
	b = append(b, "rl:{"...)
	b = append(b, escapeKey(key)...)
	b = append(b, "}:"...)
	b = strconv.AppendInt(b, w.Milliseconds(), 10)
	b = append(b, ':')
	return strconv.AppendInt(b, bucket, 10)
}

// counterKeys sets dst[i] to CounterKey(key, w, buckets[i]) for each i of
// dst and returns tail, as substrings of one string: one allocation for a
// decision's two or four keys and its packed arguments rather than one
// each.
func counterKeys(dst []string, key string, w time.Duration, buckets [4]int64, tail []byte) string {
	var buf [448]byte // no more allocation for keys up to about 50 bytes
	var ends [4]int
	b := buf[:0]
	for i := range dst {
		b = appendCounterKey(b, key, w, buckets[i])
		ends[i] = len(b)
	}
	b = append(b, tail...)
	all, start := string(b), 0
	for i := range dst {
		dst[i], start = all[start:ends[i]], ends[i]
	}
	return all[start:]
}

func gcraKey(key string, wMs int64) string {
	return "rl:{" + escapeKey(key) + "}:g:" + strconv.FormatInt(wMs, 10)
}

func logKey(key string, wMs int64) string {
	return "rl:{" + escapeKey(key) + "}:l:" + strconv.FormatInt(wMs, 10)
}

// Check decides each request; see [Store]. Concurrent calls are coalesced
// into shared pipelines unless RedisConfig.Coalesce disables it.
//
// A call leaves when ctx ends or its RedisConfig.CallTimeout passes, even
// while the round trip goes on: go-redis reads a
// reply until its own read timeout, whatever ctx's deadline (its
// ContextTimeoutEnabled is off, so that a caller's deadline never closes a
// connection that other calls' pipelines share). Such a call is in doubt:
// its hits may count.
func (r *Redis) Check(ctx context.Context, reqs []Request, res []Result) error {
	return r.co.check(ctx, reqs, res)
}

// checkDirect runs reqs as one EVALSHA or one pipeline of them.
func (r *Redis) checkDirect(ctx context.Context, reqs []Request, res []Result) error {
	t := roundTrip{pooled: r.pooled}
	defer t.release()
	out, err := r.exec(ctx, reqs, &t)
	if err != nil {
		return err
	}
	return r.finish(ctx, reqs, out, res)
}

// checkCalls runs the requests of calls as one pipeline and hands each
// call its results and error; see [roundTripper].
func (r *Redis) checkCalls(ctx context.Context, calls []*call) {
	n := 0
	for _, cl := range calls {
		n += len(cl.reqs)
	}
	reqs := make([]Request, 0, n)
	for _, cl := range calls {
		reqs = append(reqs, cl.reqs...)
	}
	t := roundTrip{pooled: r.pooled}
	defer t.release() // each call's results are read before its done
	out, err := r.exec(ctx, reqs, &t)
	off := 0
	for _, cl := range calls {
		n := len(cl.reqs)
		e := err
		if e == nil {
			e = r.finish(ctx, cl.reqs, out[off:off+n], cl.res)
		}
		off += n
		cl.done <- e
	}
}

// exec sends reqs as one round trip (plus one to reload the scripts and
// rerun what NOSCRIPT refused, which did not run). Errors of single
// decisions are left in their replies.
func (r *Redis) exec(ctx context.Context, reqs []Request, t *roundTrip) ([]reply, error) {
	out := make([]reply, len(reqs))
	only, held := r.unheld(reqs, out)
	if held && len(only) == 0 {
		return out, nil
	}
	if err := r.run(ctx, reqs, out, only, t); err != nil {
		return nil, err
	}
	// Scripts flushed (SCRIPT FLUSH, a restart, a failover): reload them and
	// rerun what NOSCRIPT refused; those requests did not run.
	var again []int
	for i := range out {
		if err := out[i].err; err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		if err := r.load(ctx); err != nil {
			return nil, err
		}
		if f := r.reloaded.Load(); f != nil {
			if hold := (*f)(ctx); hold > 0 {
				var latest time.Time
				for _, i := range again {
					out[i] = reply{err: heldError(hold)}
					if reqs[i].Now.After(latest) {
						latest = reqs[i].Now
					}
				}
				// Decisions that come meanwhile are held too: their
				// callers may have asked the guard before it knew.
				r.heldUntil.Store(latest.Add(hold).UnixNano())
				return out, nil
			}
		}
		if err := r.run(ctx, reqs, out, again, t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// unheld sets the replies of the requests held (see heldUntil) and
// returns whether any is, and the indexes of the others when one is.
func (r *Redis) unheld(reqs []Request, out []reply) (only []int, held bool) {
	until := r.heldUntil.Load()
	if until == 0 {
		return nil, false
	}
	for i := range reqs {
		if left := until - reqs[i].Now.UnixNano(); left > 0 {
			out[i] = reply{err: heldError(time.Duration(left))}
			held = true
			continue
		}
		only = append(only, i)
	}
	if !held {
		r.heldUntil.CompareAndSwap(until, 0) // over: skip this loop
		return nil, false
	}
	return only, true
}

// heldError is the reply of a decision that OnReload's hook held: the
// store lost its counts, and the decision is denied, retryable after it,
// instead of running on what is left.
type heldError time.Duration

func (h heldError) Error() string {
	return fmt.Sprintf("decision held for %v: the store lost its counts", time.Duration(h))
}

// heldResult is the denial of q while the store waits for its lost counts
// (see [Redis.OnReload]): Held, retryable after hold.
func heldResult(q *Request, hold time.Duration) Result {
	res := Result{Decision: window.Decision{Limit: q.Limit.Limit, RetryAfter: hold, ResetAfter: hold}, Held: true}
	if q.Limit.Algorithm.Counted() {
		_, res.Bucket = q.Limit.BucketAt(window.Ms(q.Now))
	}
	return res
}

// finish turns the decisions' replies into results.
func (r *Redis) finish(ctx context.Context, reqs []Request, out []reply, res []Result) error {
	for i := range out {
		if h, ok := out[i].err.(heldError); ok {
			res[i] = heldResult(&reqs[i], time.Duration(h))
			continue
		}
		if err := out[i].err; err != nil {
			return r.wrap(ctx, "check "+strconv.Quote(reqs[i].Key), err)
		}
		if err := r.result(&reqs[i], out[i].v, &res[i]); err != nil {
			return err
		}
	}
	return nil
}

// run sends reqs (those listed in only, or all when only is nil) as one
// round trip and stores their replies in out. Decisions that may share a
// script call (see [Redis.groups]) go as one EVALSHA of the batch script,
// others as one EVALSHA each, in one pipeline when there is more than one
// call. Error replies, a busy server's included, are left in the replies;
// only a failure without a reply fails the round trip (see [classify]).
func (r *Redis) run(ctx context.Context, reqs []Request, out []reply, only []int, t *roundTrip) error {
	r.pipelines.Add(1)
	if only == nil {
		only = make([]int, len(reqs))
		for i := range only {
			only[i] = i
		}
	}
	sc := make([]scriptCall, len(reqs))
	for _, i := range only {
		r.setCall(&sc[i], &reqs[i])
	}
	groups := r.groups(sc, only)
	if len(groups) == 1 {
		w := t.buffer()
		cmd := r.send(ctx, r.c, sc, groups[0], w)
		if err := cmd.Err(); classify(err) == faultNoReply {
			return r.wrap(ctx, "check", err)
		}
		collect(cmd, w, groups[0], out)
		return nil
	}
	pipe := r.c.Pipeline()
	cmds := make([]redis.Cmder, len(groups))
	ws := make([]*bytes.Buffer, len(groups))
	for g, idx := range groups {
		ws[g] = t.buffer()
		cmds[g] = r.send(ctx, pipe, sc, idx, ws[g])
	}
	if _, err := pipe.Exec(ctx); classify(err) == faultNoReply {
		return r.wrap(ctx, "check", err)
	}
	for g, idx := range groups {
		collect(cmds[g], ws[g], idx, out)
	}
	return nil
}

// Merge max-merges remote totals in one pipeline; see [Store]. A region
// new to a bucket takes no slot for a zero count; in a bucket that already
// holds MaxRegionsPerBucket regions it replaces the one with the smallest
// count when its own is larger, and is dropped otherwise: either way one
// total is counted in RedisStats.RegionsDropped.
func (r *Redis) Merge(ctx context.Context, totals []Total) error {
	return r.merge(ctx, totals, false)
}

// Restore max-merges totals as Merge does, the local region's own count
// included: after Redis lost its counts (see [Redis.Epoch]), peers echo
// back the totals this region once reported, and taking their maximum
// never exceeds what the region admitted.
func (r *Redis) Restore(ctx context.Context, totals []Total) error {
	return r.merge(ctx, totals, true)
}

// OnReload sets f to be called, after the scripts are loaded again and
// before the decisions they refused run again, each time a decision finds
// the scripts gone (NOSCRIPT): Redis restarted, was flushed of its scripts
// or failed over to a replica without them, and may have lost its counts
// with them, which [Redis.Epoch] tells. When f returns a hold above 0,
// those decisions do not run: each is denied, retryable after the hold,
// and marked Held, and so is every decision whose instant falls within
// the hold (its caller may have asked the burst guard before the node
// knew). f runs on the decision's goroutine, with its ctx: it should take
// no longer than a round trip to Redis. rlnode has gossip read the epoch
// there (gossip.Node.CheckEpoch), so that a node finds a lost store at
// its first decision after the loss, not at its next read, and holds its
// decisions until the other regions have sent the counts back.
func (r *Redis) OnReload(f func(ctx context.Context) (hold time.Duration)) {
	if f == nil {
		r.reloaded.Store(nil)
		return
	}
	r.reloaded.Store(&f)
}

// EpochKey is the Redis key of the store's epoch marker.
const EpochKey = "rl:epoch"

// Epoch returns the store's epoch: a random marker kept in Redis (EpochKey,
// no expiry), created when absent, in which case fresh is true. A Redis
// restarted without its data, or flushed, has lost the marker with the
// counts: the next Epoch creates a new one, and a node that saw another
// knows the counts are gone. (On a Redis Cluster the marker lives on one
// shard: the loss of another shard's data goes unseen.)
func (r *Redis) Epoch(ctx context.Context) (epoch string, fresh bool, err error) {
	var id [8]byte
	_, _ = rand.Read(id[:])
	mine := hex.EncodeToString(id[:])
	old, err := r.c.SetArgs(ctx, EpochKey, mine, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return mine, true, nil
	case err != nil:
		return "", false, r.wrap(ctx, "epoch", err)
	}
	return old, false, nil
}

// merges reports whether merge takes t (see mergeable).
func (r *Redis) merges(t *Total, own bool) bool { return mergeable(t, r.region, own) }

// absMs is the length of a bucket of w in ms: a calendar bucket's (named
// by minus its length) too.
func absMs(w time.Duration) int64 {
	if ms := w.Milliseconds(); ms >= 0 {
		return ms
	}
	return -w.Milliseconds()
}

func (r *Redis) merge(ctx context.Context, totals []Total, own bool) error {
	var cmds []*redis.Cmd
	queue := func() redis.Pipeliner {
		pipe := r.c.Pipeline()
		cmds = cmds[:0]
		for _, t := range totals {
			if !r.merges(&t, own) {
				continue
			}
			wMs := absMs(t.Window)
			var trail string
			if ValidTrail(t) {
				trail = formatTrail(t.Trail)
			}
			cmds = append(cmds, mergeScript.EvalSha(ctx, pipe, []string{CounterKey(t.Key, t.Window, t.Bucket)},
				t.Region, strconv.FormatUint(t.Count, 10), 2*wMs+r.marginMs, MaxRegionsPerBucket, trail, wMs, r.region))
		}
		return pipe
	}
	pipe := queue()
	if len(cmds) == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Merging is idempotent: rerunning the whole batch is safe.
		if err := r.load(ctx); err != nil {
			return err
		}
		_, err = queue().Exec(ctx)
	}
	if err != nil {
		return r.wrap(ctx, "merge", err)
	}
	for _, c := range cmds {
		if n, _ := c.Int64(); n < 0 {
			r.regionsDropped.Add(1)
		}
	}
	return r.raiseMark(ctx, totals, own)
}

// raiseMark raises the reset marker ([ResetMarkKey]) once in the bucket of
// every reset instant's total of totals that merge took, whether or not
// the total raised the instant: a marker left unraised by a failed call
// is raised by the next merge of the same total (replication sends an
// urgent total twice), where a raise only when the instant grew would
// never come. It runs after merge's round trip, not in it: on a Redis
// Cluster the marker lives on another shard, and a reader that sees the
// marker's new count must see the instant.
func (r *Redis) raiseMark(ctx context.Context, totals []Total, own bool) error {
	var pipe redis.Pipeliner
	for _, t := range totals {
		if !isResetInstant(t.Key) || !r.merges(&t, own) {
			continue
		}
		if pipe == nil {
			pipe = r.c.Pipeline()
		}
		k := CounterKey(ResetMarkKey, t.Window, t.Bucket)
		pipe.HIncrBy(ctx, k, r.region, 1)
		pipe.PExpire(ctx, k, time.Duration(2*absMs(t.Window)+r.marginMs)*time.Millisecond)
	}
	if pipe == nil {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return r.wrap(ctx, "raise reset marker", err)
	}
	return nil
}

// Vectors reads the named buckets with one pipeline of HGETALL; see
// [Store].
func (r *Redis) Vectors(ctx context.Context, refs []BucketRef) ([][]Total, error) {
	out := make([][]Total, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	pipe := r.c.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(refs))
	for i, ref := range refs {
		cmds[i] = pipe.HGetAll(ctx, CounterKey(ref.Key, ref.Window, ref.Bucket))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, r.wrap(ctx, "vectors", err)
	}
	for i, c := range cmds {
		m := c.Val()
		if len(m) == 0 {
			continue
		}
		v := make([]Total, 0, len(m))
		for reg, s := range m {
			if strings.HasSuffix(reg, trailSuffix) {
				continue
			}
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("region: redis vectors %q: bad count %q: %w", refs[i].Key, s, err)
			}
			t := Total{Key: refs[i].Key, Window: refs[i].Window, Bucket: refs[i].Bucket, Region: reg, Count: n}
			if x, ok := m[reg+trailSuffix]; ok && refs[i].Window > 0 {
				t.Trail = parseTrail([]byte(x), 0).Coarse(refs[i].Window.Milliseconds())
			}
			v = append(v, t)
		}
		slices.SortFunc(v, func(a, b Total) int { return strings.Compare(a.Region, b.Region) })
		out[i] = v
	}
	return out, nil
}
