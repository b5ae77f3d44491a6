package region

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
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
	var re redis.Error
	switch {
	case err == nil:
		return faultNone
	case !errors.As(err, &re):
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
// dst, as substrings of one string: one allocation for a decision's two
// or four keys rather than one each.
func counterKeys(dst []string, key string, w time.Duration, buckets [4]int64) {
	var buf [384]byte // no more allocation for keys up to about 50 bytes
	var ends [4]int
	b := buf[:0]
	for i := range dst {
		b = appendCounterKey(b, key, w, buckets[i])
		ends[i] = len(b)
	}
	all, start := string(b), 0
	for i := range dst {
		dst[i], start = all[start:ends[i]], ends[i]
	}
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
	out, err := r.exec(ctx, reqs)
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
	out, err := r.exec(ctx, reqs)
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
func (r *Redis) exec(ctx context.Context, reqs []Request) ([]reply, error) {
	out := make([]reply, len(reqs))
	if err := r.run(ctx, reqs, out, nil); err != nil {
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
		if err := r.run(ctx, reqs, out, again); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// finish turns the decisions' replies into results.
func (r *Redis) finish(ctx context.Context, reqs []Request, out []reply, res []Result) error {
	for i := range out {
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
func (r *Redis) run(ctx context.Context, reqs []Request, out []reply, only []int) error {
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
		cmd := send(ctx, r.c, sc, groups[0])
		if err := cmd.Err(); classify(err) == faultNoReply {
			return r.wrap(ctx, "check", err)
		}
		collect(cmd, groups[0], out)
		return nil
	}
	pipe := r.c.Pipeline()
	cmds := make([]*redis.Cmd, len(groups))
	for g, idx := range groups {
		cmds[g] = send(ctx, pipe, sc, idx)
	}
	if _, err := pipe.Exec(ctx); classify(err) == faultNoReply {
		return r.wrap(ctx, "check", err)
	}
	for g, idx := range groups {
		collect(cmds[g], idx, out)
	}
	return nil
}

// Script arguments boxed once: boxing a string computed at run time
// allocates.
var (
	argTrue, argFalse any = "1", "0"
	modeArgs              = [4]any{"0", "1", "2", "3"}
)

func boolArg(b bool) any {
	if b {
		return argTrue
	}
	return argFalse
}

// scriptCall is one request's script call. Its keys and arguments live in
// the call itself (keyBuf, argBuf, nums), so that a round trip's
// decisions take one allocation, not two more each; with one allocation for a
// decision's keys (counterKeys) and none for parseVector's counts, that
// took BenchmarkRedisCheck from 30 to 26 allocations per decision (two
// keys; four with ServerClock save two more). Its integer arguments are
// passed as pointers into nums, and its keys as pointers into keyBuf (see
// evalsha): boxing an integer of 256 or more, or a string, allocates, a
// pointer does not (go-redis writes both as their values).
type scriptCall struct {
	script int      // index in singleScripts and batchSources
	keys   []string // at most 255 (the batch header's byte): 4 at most
	args   []any    // at most 255 (the batch header's byte): 9 at most
	keyBuf [4]string
	argBuf [9]any
	nums   [3]int64
	counts [2]uint64 // the limit and the hits
}

// setCall makes s the script call for one request.
func (r *Redis) setCall(s *scriptCall, q *Request) {
	nowMs := window.Ms(q.Now)
	wMs := q.Limit.WindowMs()
	n, c := &s.nums, &s.counts
	*c = [2]uint64{q.Limit.Limit, q.Hits}
	switch q.Limit.Algorithm {
	case window.TokenBucket:
		s.script = 1
		s.keyBuf[0] = gcraKey(q.Key, wMs)
		*n = [3]int64{nowMs * 1000, q.Limit.GCRAIncrement(q.Hits), q.Limit.GCRACapacity()}
		s.argBuf = [9]any{&n[0], &n[1], &n[2], boolArg(q.Peek)}
		s.keys, s.args = s.keyBuf[:1], s.argBuf[:4]
		return
	case window.SlidingLog:
		member := strconv.FormatUint(q.Hits, 10) + ":" + r.node + strconv.FormatUint(r.nonce.Add(1), 36)
		s.script = 2
		s.keyBuf[0] = logKey(q.Key, wMs)
		*n = [3]int64{nowMs, wMs, wMs + r.marginMs}
		s.argBuf = [9]any{&n[0], &n[1], &c[0], &c[1], boolArg(q.Peek), member, &n[2]}
		s.keys, s.args = s.keyBuf[:1], s.argBuf[:7]
		return
	}
	w, b := q.Limit.BucketAt(nowMs)
	// A calendar bucket (w < 0) follows the node's clock: the script's
	// server clock picks among buckets of one length.
	server := r.server && w > 0
	if w < 0 {
		wMs = -w.Milliseconds()
	}
	nk := 2
	if server {
		nk = 4
	}
	counterKeys(s.keyBuf[:nk], q.Key, w, [4]int64{b, b - 1, b + 1, b - 2})
	s.script = 0
	*n = [3]int64{nowMs, wMs, 2*wMs + r.marginMs}
	s.argBuf = [9]any{&n[0], &n[1], &c[0], &c[1], r.regionArg, boolArg(q.Peek),
		counterMode(q.Limit), &n[2], boolArg(server)}
	s.keys, s.args = s.keyBuf[:nk], s.argBuf[:9]
}

// maxScriptBatch is the most decisions one batch script call runs, so
// that one call never holds Redis much longer than a pipeline of single
// decisions would hold any one of its other clients.
const maxScriptBatch = 64

// groups splits the decisions listed in idx into script calls: batches of
// at most maxScriptBatch, on a Redis Cluster each of one hash slot (a
// script's keys must share a slot); each decision alone when batching is
// off.
func (r *Redis) groups(sc []scriptCall, idx []int) [][]int {
	if !r.batch || len(idx) == 1 {
		out := make([][]int, len(idx))
		for g := range idx {
			out[g] = idx[g : g+1 : g+1]
		}
		return out
	}
	if !r.cluster {
		if len(idx) <= maxScriptBatch {
			return [][]int{idx}
		}
		return slices.Collect(slices.Chunk(idx, maxScriptBatch))
	}
	var out [][]int
	at := make(map[uint16]int)
	for _, i := range idx {
		slot := keySlot(sc[i].keys[0])
		g, ok := at[slot]
		if !ok || len(out[g]) == maxScriptBatch {
			g = len(out)
			at[slot] = g
			out = append(out, nil)
		}
		out[g] = append(out[g], i)
	}
	return out
}

// send queues (or runs) one script call for the decisions sc[i] of idx:
// the decision's own script when alone, else the batch script.
func send(ctx context.Context, c doer, sc []scriptCall, idx []int) *redis.Cmd {
	if len(idx) == 1 {
		s := &sc[idx[0]]
		return evalsha(ctx, c, singleHashes[s.script], s.keys, s.args)
	}
	nk, na := 0, 1
	for _, i := range idx {
		nk += len(sc[i].keys)
		na += len(sc[i].args)
	}
	keys := make([]string, 0, nk)
	args := make([]any, 1, na)
	// The header, three bytes per decision (see batchScript): as three
	// arguments per decision it cost Redis 6k of the counter decision's
	// 133k instructions in calls of 8 (parsing them, and tonumber's
	// strtod; callgrind, one region, ServerClock).
	hdr := make([]byte, 0, 3*len(idx))
	for _, i := range idx {
		keys = append(keys, sc[i].keys...)
		hdr = append(hdr, byte(sc[i].script+1), byte(len(sc[i].keys)), byte(len(sc[i].args)))
		args = append(args, sc[i].args...)
	}
	args[0] = hdr
	return evalsha(ctx, c, batchHash, keys, args)
}

// doer runs or queues a command: a client, or a pipeline.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// The scripts' SHA1s, boxed once.
var (
	singleHashes = func() []any {
		out := make([]any, len(singleScripts))
		for i, s := range singleScripts {
			out[i] = s.Hash()
		}
		return out
	}()
	batchHash any = batchScript.Hash()
)

// evalsha queues (or runs) EVALSHA of the script sha with keys and args
// on c. It passes each key as a pointer into keys, which must stay
// unchanged until the command has run: go-redis's own EvalSha boxes each
// key, an allocation per key, and reads a *string key as the key itself,
// for writing it and for a Redis Cluster's routing alike. Unlike EvalSha,
// a NOSCRIPT reply stays a NOSCRIPT error.
func evalsha(ctx context.Context, c doer, sha any, keys []string, args []any) *redis.Cmd {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, "evalsha", sha, len(keys))
	for i := range keys {
		cmd = append(cmd, &keys[i])
	}
	return c.Do(ctx, append(cmd, args...)...)
}

// collect stores the replies of the script call cmd, made by send for the
// decisions of idx, in out.
func collect(cmd *redis.Cmd, idx []int, out []reply) {
	if err := cmd.Err(); err != nil {
		for _, i := range idx {
			out[i] = reply{err: err}
		}
		return
	}
	if len(idx) == 1 {
		out[idx[0]] = reply{v: cmd.Val()}
		return
	}
	rs, err := batchReplies(cmd.Val(), len(idx))
	for k, i := range idx {
		if err != nil {
			out[i] = reply{err: err}
		} else {
			out[i] = rs[k]
		}
	}
}

// counterMode returns counterScript's mode argument for l.
func counterMode(l window.Limit) any {
	switch {
	case l.Algorithm == window.FixedWindow:
		return modeArgs[1]
	case !l.Algorithm.Trails():
		return modeArgs[0]
	case l.Strict:
		return modeArgs[3]
	}
	return modeArgs[2]
}

// result turns a script's reply into a Result, deciding in Go from the
// counts the script read and keeping the script's verdict, which is what
// happened.
func (r *Redis) result(q *Request, v any, out *Result) error {
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return fmt.Errorf("region: redis check %q: unexpected reply %T", q.Key, v)
	}
	allowed, _ := arr[0].(int64)
	nowMs := window.Ms(q.Now)
	*out = Result{}
	switch q.Limit.Algorithm {
	case window.TokenBucket:
		var tat int64
		if s, _ := arr[1].(string); s != "" {
			t, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("region: redis check %q: bad TAT %q: %w", q.Key, s, err)
			}
			tat = t
		}
		out.Decision, _ = q.Limit.DecideGCRA(nowMs, tat, q.Hits)
		out.TAT = tat
	case window.SlidingLog:
		raw, _ := arr[1].([]any)
		log := make([]window.LogEntry, 0, len(raw)/2)
		for i := 0; i+1 < len(raw); i += 2 {
			m, _ := raw[i].(string)
			sc, _ := raw[i+1].(string)
			h, _, _ := strings.Cut(m, ":")
			hits, err1 := strconv.ParseUint(h, 10, 64)
			at, err2 := strconv.ParseFloat(sc, 64)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("region: redis check %q: bad log entry %q %q", q.Key, m, sc)
			}
			log = append(log, window.LogEntry{AtMs: int64(at), Hits: hits})
		}
		slices.SortStableFunc(log, func(a, b window.LogEntry) int { return int(a.AtMs - b.AtMs) })
		out.Decision = q.Limit.DecideLog(nowMs, log, q.Hits)
	default:
		// {allowed, estimate, now_ms, HGETALL previous, the elements of
		// HGETALL current}: see counterScript.
		if len(arr) < 4 {
			return fmt.Errorf("region: redis check %q: unexpected reply length %d", q.Key, len(arr))
		}
		// The two buckets on the stack (their counts escape, through
		// regionCounts): two allocations fewer per decision, 26 to 24 in
		// BenchmarkRedisCheck/single/coalesced.
		var curB, prevB memBucket
		cur, prev := &curB, &prevB
		if err := parseVector(cur, arr[4:]); err != nil {
			return fmt.Errorf("region: redis check %q: %w", q.Key, err)
		}
		raw, _ := arr[3].([]any)
		if err := parseVector(prev, raw); err != nil {
			return fmt.Errorf("region: redis check %q: %w", q.Key, err)
		}
		if used, ok := arr[2].(int64); ok {
			nowMs = used // the script's instant: Redis's TIME with ServerClock
		}
		var marked bool
		out.Decision, marked = decideCounter(q, nowMs, r.region, cur, prev)
		// The script's estimate, when it computed one below 2^53, is the Go
		// one.
		if est, _ := arr[1].(int64); est >= 0 && est < 1<<53 && uint64(est) != out.Estimate {
			r.mismatches.Add(1)
		}
		wMs := q.Limit.WindowMs()
		exact := q.Limit.Exact()
		if allowed == 1 && !q.Peek {
			start, _ := window.BucketSpan(q.Limit.BucketAt(nowMs))
			cur.add(r.region, q.Hits, nowMs-start, wMs, marked, exact)
		}
		out.Regions = regionCounts(r.region, cur, prev, wMs, marked, exact)
		out.Local = cur.get(r.region)
		if marked {
			out.LocalTrail = cur.getTrail(r.region, wMs)
		}
	}
	if out.Allowed != (allowed == 1) {
		r.mismatches.Add(1)
		out.Allowed = allowed == 1
		if out.Allowed {
			out.RetryAfter = 0
		}
	}
	return nil
}

// parseVector parses the elements of an HGETALL reply into b, which holds
// no counts yet.
func parseVector(b *memBucket, raw []any) error {
	b.used, b.private, b.counts = true, true, make([]regionN, 0, len(raw)/2)
	trails := false
	for i := 0; i+1 < len(raw); i += 2 {
		f, _ := raw[i].(string)
		if _, ok := trailField(f); ok {
			trails = true
			continue
		}
		s, _ := raw[i+1].(string)
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("bad count %q for region %q: %w", s, f, err)
		}
		b.counts = append(b.counts, regionN{region: f, n: n})
	}
	// The trails in a second pass, once every count is known.
	for i := 0; trails && i+1 < len(raw); i += 2 {
		f, _ := raw[i].(string)
		reg, ok := trailField(f)
		if !ok {
			continue
		}
		if j := b.find(reg); j >= 0 {
			s, _ := raw[i+1].(string)
			b.counts[j].h = parseTrail(s)
		} // a trail without a count is not counted, as by the script
	}
	return nil
}

// trailField returns the region of a bucket hash field that holds a trail
// (see trailSuffix).
func trailField(f string) (reg string, ok bool) {
	return strings.CutSuffix(f, trailSuffix)
}

// parseTrail unpacks a trail as the scripts store it (see trailSuffix).
// It stops at the first mark that does not follow from the ones before
// (offsets not increasing, counts not growing, or not integers below
// 2^53): the hits after it are then the count's excess, which counts as
// late as any (window.Trail.Fit), as in the script.
func parseTrail(s string) window.Trail {
	k := len(s) / markBytes
	if k == 0 {
		return nil
	}
	t := make(window.Trail, 0, k)
	var cum uint64
	for i := range k {
		m := s[i*markBytes:]
		at := int64(binary.LittleEndian.Uint32([]byte(m[:4])))
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(m[4:12])))
		if !(f > float64(cum) && f <= 1<<53) || f != math.Trunc(f) || (len(t) > 0 && at <= t[len(t)-1].At) {
			break
		}
		t = append(t, window.Mark{At: at, Cum: uint64(f)})
		cum = uint64(f)
	}
	return t
}

// formatTrail packs t as the scripts store it (see trailSuffix).
func formatTrail(t window.Trail) string {
	b := make([]byte, 0, len(t)*markBytes)
	for _, m := range t {
		b = binary.LittleEndian.AppendUint32(b, uint32(m.At))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(m.Cum)))
	}
	return string(b)
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

func (r *Redis) merge(ctx context.Context, totals []Total, own bool) error {
	var cmds []*redis.Cmd
	queue := func() redis.Pipeliner {
		pipe := r.c.Pipeline()
		cmds = cmds[:0]
		for _, t := range totals {
			if (t.Region == r.region && !own) || t.Region == "" || !storedWindow(t.Window, t.Bucket) {
				continue
			}
			wMs := t.Window.Milliseconds()
			if wMs < 0 { // a calendar bucket: live two of its lengths
				wMs = -wMs
			}
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
			if _, ok := trailField(reg); ok {
				continue
			}
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("region: redis vectors %q: bad count %q: %w", refs[i].Key, s, err)
			}
			t := Total{Key: refs[i].Key, Window: refs[i].Window, Bucket: refs[i].Bucket, Region: reg, Count: n}
			if x, ok := m[reg+trailSuffix]; ok && refs[i].Window > 0 {
				t.Trail = parseTrail(x).Coarse(refs[i].Window.Milliseconds())
			}
			v = append(v, t)
		}
		slices.SortFunc(v, func(a, b Total) int { return strings.Compare(a.Region, b.Region) })
		out[i] = v
	}
	return out, nil
}
