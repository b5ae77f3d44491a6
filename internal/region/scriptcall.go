package region

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/rlcluster/rlcluster/internal/window"
)

// A decision's script call: the keys and arguments one request sends
// (scriptCall), how a round trip's calls are grouped into EVALSHAs of the
// batch script, and how a script's reply becomes a Result, with the counts
// and trails of the bucket hashes it read.

// Script arguments boxed once: boxing a string computed at run time
// allocates.
var argTrue, argFalse any = "1", "0"

func boolArg(b bool) any {
	if b {
		return argTrue
	}
	return argFalse
}

// scriptCall is one request's script call. Its keys and arguments live in
// the call itself (keyBuf, argBuf, nums, packed), so that a round trip's
// decisions take one allocation, not two more each (docs/performance.md
// has what BenchmarkRedisCheck measures of it). Its integer arguments are
// passed as pointers into nums, its keys as pointers into keyBuf (see
// evalsha) and the counter script's packed numbers as a pointer to
// packed: boxing an integer of 256 or more, or a string, allocates, a
// pointer does not (go-redis writes both as their values).
type scriptCall struct {
	script int      // index in singleScripts and batchSources
	keys   []string // at most 255 (the batch header's byte): 4 at most
	args   []any    // at most 255 (the batch header's byte): 9 at most
	keyBuf [4]string
	argBuf [9]any
	nums   [3]int64
	counts [2]uint64 // the limit and the hits
	packed string    // counterScript's packed numbers
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
	var packed [counterArgBytes]byte
	s.packed = counterKeys(s.keyBuf[:nk], q.Key, w, [4]int64{b, b - 1, b + 1, b - 2},
		packCounterArgs(packed[:0], nowMs, wMs, q.Limit.Limit, q.Hits, 2*wMs+r.marginMs, q.Peek, counterMode(q.Limit), server))
	s.script = 0
	s.argBuf = [9]any{&s.packed, r.regionArg}
	s.keys, s.args = s.keyBuf[:nk], s.argBuf[:2]
}

// counterArgBytes is the length of counterScript's packed numbers.
const counterArgBytes = 5*8 + 3

// packCounterArgs appends counterScript's numbers (its ARGV[1]) to b as
// struct.pack('<dddddBBB') packs them: each integer as the double
// nearest it, which tonumber of its decimal also gives.
func packCounterArgs(b []byte, nowMs, wMs int64, limit, hits uint64, ttlMs int64, peek bool, mode byte, server bool) []byte {
	for _, f := range [5]float64{float64(nowMs), float64(wMs), float64(limit), float64(hits), float64(ttlMs)} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return append(b, b2u8(peek), mode, b2u8(server))
}

func b2u8(b bool) byte {
	if b {
		return 1
	}
	return 0
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
func (r *Redis) send(ctx context.Context, c doer, sc []scriptCall, idx []int, w *bytes.Buffer) redis.Cmder {
	if len(idx) == 1 {
		s := &sc[idx[0]]
		return r.evalsha(ctx, c, singleHashes[s.script], s.keys, s.args, w)
	}
	nk, na := 0, 1
	for _, i := range idx {
		nk += len(sc[i].keys)
		na += len(sc[i].args)
	}
	keys := make([]string, 0, nk)
	args := make([]any, 1, na)
	// The header, three bytes per decision (see batchScript), not three
	// arguments: Redis parses those and runs tonumber on each
	// (docs/performance.md has what it cost).
	hdr := make([]byte, 0, 3*len(idx))
	for _, i := range idx {
		keys = append(keys, sc[i].keys...)
		hdr = append(hdr, byte(sc[i].script+1), byte(len(sc[i].keys)), byte(len(sc[i].args)))
		args = append(args, sc[i].args...)
	}
	args[0] = hdr
	return r.evalsha(ctx, c, batchHash, keys, args, w)
}

// doer runs or queues a command: a client, or a pipeline.
type doer interface {
	Process(ctx context.Context, cmd redis.Cmder) error
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
//
// Its reply is kept raw (see rawReply), in w when w is not nil, except on
// a Redis Cluster: there go-redis must see an error reply (MOVED, ASK) to
// follow it, which a redis.RawCmd hides.
func (r *Redis) evalsha(ctx context.Context, c doer, sha any, keys []string, args []any, w *bytes.Buffer) redis.Cmder {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", sha, len(keys))
	for i := range keys {
		a = append(a, &keys[i])
	}
	a = append(a, args...)
	var cmd redis.Cmder
	switch {
	case r.cluster:
		cmd = redis.NewCmd(ctx, a...)
	case w != nil:
		cmd = redis.NewRawWriteToCmd(ctx, w, a...)
	default:
		cmd = redis.NewRawCmd(ctx, a...)
	}
	_ = c.Process(ctx, cmd) // its error stays in cmd
	return cmd
}

// A script call's reply, read raw, is as large as the trails it carries:
// kilobytes per decision, that go-redis's redis.RawCmd reads into a
// buffer of its own, grown from nothing for every call. Where go-redis
// never retries a call (RedisConfig.MaxRetries, off by default), the
// replies are read into buffers that round trips reuse
// (redis.RawWriteToCmd, which go-redis does not retry): a reply's bytes
// are dead once its results are read.

// replyBufs holds buffers that script replies were read into, for the
// replies of later round trips.
var replyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxKeptReply bounds the buffers replyBufs keeps.
const maxKeptReply = 1 << 20

// roundTrip holds the buffers of one round trip's script replies until
// its replies are turned into results.
type roundTrip struct {
	pooled bool // read replies into pooled buffers
	bufs   []*bytes.Buffer
}

// buffer returns an empty buffer for one script call's reply, or nil when
// t does not pool them.
func (t *roundTrip) buffer() *bytes.Buffer {
	if !t.pooled {
		return nil
	}
	b := replyBufs.Get().(*bytes.Buffer)
	b.Reset()
	t.bufs = append(t.bufs, b)
	return b
}

// release gives t's buffers back: the replies read into them are gone.
func (t *roundTrip) release() {
	for _, b := range t.bufs {
		if b.Cap() <= maxKeptReply {
			replyBufs.Put(b)
		}
	}
	t.bufs = nil
}

// collect stores the replies of the script call cmd, made by send for the
// decisions of idx with w, in out.
func collect(cmd redis.Cmder, w *bytes.Buffer, idx []int, out []reply) {
	v, err := rawReply(cmd, w)
	if err != nil {
		for _, i := range idx {
			out[i] = reply{err: err}
		}
		return
	}
	if len(idx) == 1 {
		out[idx[0]] = reply{v: v}
		return
	}
	rs, err := batchReplies(v, len(idx))
	for k, i := range idx {
		if err != nil {
			out[i] = reply{err: err}
		} else {
			out[i] = rs[k]
		}
	}
}

// counterMode returns counterScript's mode for l.
func counterMode(l window.Limit) byte {
	switch {
	case l.Algorithm == window.FixedWindow:
		return 1
	case !l.Algorithm.Trails():
		return 0
	case l.Strict:
		return 3
	}
	return 2
}

// result turns a script's reply v (raw RESP) into a Result, deciding in
// Go from the counts the script read and keeping the script's verdict,
// which is what happened.
func (r *Redis) result(q *Request, v []byte, out *Result) error {
	p := respReader{b: v}
	n := p.array()
	if n < 2 {
		return fmt.Errorf("region: redis check %q: unexpected reply %.100q", q.Key, v)
	}
	allowed, _ := p.int()
	nowMs := window.Ms(q.Now)
	*out = Result{}
	switch q.Limit.Algorithm {
	case window.TokenBucket:
		var tat int64
		if s, _ := p.str(); len(s) > 0 {
			t, err := strconv.ParseInt(string(s), 10, 64)
			if err != nil {
				return fmt.Errorf("region: redis check %q: bad TAT %q: %w", q.Key, s, err)
			}
			tat = t
		}
		out.Decision, _ = q.Limit.DecideGCRA(nowMs, tat, q.Hits)
		out.TAT = tat
	case window.SlidingLog:
		k := p.array()
		log := make([]window.LogEntry, 0, max(k, 0)/2)
		for i := 0; i+1 < k; i += 2 {
			m, _ := p.str()
			sc, _ := p.str()
			h, _, _ := bytes.Cut(m, []byte(":"))
			hits, err1 := strconv.ParseUint(string(h), 10, 64)
			at, err2 := strconv.ParseFloat(string(sc), 64)
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
		if n < 4 {
			return fmt.Errorf("region: redis check %q: unexpected reply length %d", q.Key, n)
		}
		est, _ := p.int()
		if used, ok := p.int(); ok {
			nowMs = used // the script's instant: Redis's TIME with ServerClock
		}
		// The two buckets on the stack (their counts escape, through
		// regionCounts): two allocations fewer per decision.
		var curB, prevB memBucket
		cur, prev := &curB, &prevB
		if err := parseVector(prev, &p, max(p.array(), 0), r.region, 0); err != nil {
			return fmt.Errorf("region: redis check %q: %w", q.Key, err)
		}
		// Room in the local trail for the mark an admission adds below.
		if err := parseVector(cur, &p, n-4, r.region, 1); err != nil {
			return fmt.Errorf("region: redis check %q: %w", q.Key, err)
		}
		var marked bool
		out.Decision, marked = decideCounter(q, nowMs, r.region, cur, prev)
		// The script's estimate, when it computed one below 2^53, is the Go
		// one.
		if est >= 0 && est < 1<<53 && uint64(est) != out.Estimate {
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
	if p.err != nil {
		return fmt.Errorf("region: redis check %q: %w", q.Key, p.err)
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

// parseVector reads the n elements of an HGETALL reply from p into b,
// which holds no counts yet. A field named local takes the string local
// rather than a copy, and its trail room for that many more marks.
func parseVector(b *memBucket, p *respReader, n int, local string, room int) error {
	b.used, b.private, b.counts = true, true, make([]regionN, 0, n/2)
	trails := false
	from := *p // the trails in a second pass, once every count is known
	for i := 0; i+1 < n; i += 2 {
		f, _ := p.str()
		s, _ := p.str()
		if _, ok := trailField(f); ok {
			trails = true
			continue
		}
		c, err := strconv.ParseUint(string(s), 10, 64)
		if err != nil {
			return fmt.Errorf("bad count %q for region %q: %w", s, f, err)
		}
		reg := local
		if string(f) != local {
			reg = string(f)
		}
		b.counts = append(b.counts, regionN{region: reg, n: c})
	}
	if n%2 == 1 {
		p.skip()
	}
	for i := 0; trails && i+1 < n; i += 2 {
		f, _ := from.str()
		s, _ := from.str()
		reg, ok := trailField(f)
		if !ok {
			continue
		}
		if j := b.find(string(reg)); j >= 0 {
			extra := 0
			if b.counts[j].region == local {
				extra = room
			}
			b.counts[j].h = parseTrail(s, extra)
		} // a trail without a count is not counted, as by the script
	}
	return p.err
}

// trailField returns the region of a bucket hash field that holds a trail
// (see trailSuffix).
func trailField(f []byte) (reg []byte, ok bool) {
	return bytes.CutSuffix(f, []byte(trailSuffix))
}

// parseTrail unpacks a trail as the scripts store it (see trailSuffix).
// It stops at the first mark that does not follow from the ones before
// (offsets not increasing, counts not growing, or not integers below
// 2^53): the hits after it are then the count's excess, which counts as
// late as any (window.Trail.Fit), as in the script. The trail has room
// for room more marks.
func parseTrail(s []byte, room int) window.Trail {
	k := len(s) / markBytes
	if k == 0 {
		return nil
	}
	t := make(window.Trail, 0, k+room)
	var cum uint64
	for i := range k {
		m := s[i*markBytes:]
		at := int64(binary.LittleEndian.Uint32(m[:4]))
		f := math.Float64frombits(binary.LittleEndian.Uint64(m[4:12]))
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
