package region

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

var batchT0 = time.UnixMilli(1_760_000_040_000)

func newTestRedis(t *testing.T, cfg RedisConfig) *Redis {
	t.Helper()
	if cfg.Region == "" {
		cfg.Region = "here"
	}
	r, err := NewRedis(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := r.Mismatches(); n != 0 {
			t.Errorf("%d decisions of the scripts disagreed with the Go decisions", n)
		}
		_ = r.Close()
	})
	return r
}

// batchRequests returns n decisions over every algorithm (the sliding
// window strict too), each on its own key, some of them peeks.
func batchRequests(n int) []Request {
	algos := []window.Algorithm{window.SlidingWindow, window.FixedWindow, window.TokenBucket, window.SlidingLog, window.SlidingWindowTwoBucket, window.SlidingWindow}
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{
			Key:   "k" + strconv.Itoa(i),
			Limit: window.Limit{Limit: uint64(2 + i%3), Window: time.Minute, Algorithm: algos[i%len(algos)], Strict: i%len(algos) == 5},
			Hits:  uint64(1 + i%2),
			Now:   batchT0.Add(time.Duration(i) * time.Second),
			Peek:  i%5 == 4,
		}
	}
	return reqs
}

// N concurrent decisions gathered by the coalescer run as one EVALSHA and
// decide exactly as the same decisions made one at a time.
func TestBatchConcurrentDecisionsOneEvalsha(t *testing.T) {
	const n = 24
	srv := redistest.Start(t)
	ctx := context.Background()
	seq := newTestRedis(t, RedisConfig{URL: srv.URL(), Coalesce: Coalesce{Disabled: true}})
	SetUnbatched(seq)
	reqs := batchRequests(n)
	// seed gives every key some history, one decision at a time.
	seed := func() {
		for i := range reqs {
			q := reqs[i]
			q.Peek = false
			if err := seq.Check(ctx, []Request{q}, make([]Result, 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	seed()
	want := make([]Result, n)
	for i := range reqs {
		if err := seq.Check(ctx, reqs[i:i+1], want[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}

	if err := seq.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	seed()
	co := newTestRedis(t, RedisConfig{URL: srv.URL(), ReadTimeout: time.Minute})
	SetGathering(co, time.Hour, n)
	redistest.ResetStats(t, srv.Addr)
	// A blocked round trip in flight makes the next n calls gather into
	// one batch, sent when full.
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	var wg sync.WaitGroup
	blockErr := make(chan error, 1)
	go func() {
		blockErr <- co.Check(ctx, []Request{{Key: "blocker", Limit: window.Limit{Limit: 1, Window: time.Minute}, Hits: 1, Now: batchT0}}, make([]Result, 1))
	}()
	inFlight := func(want int) func() bool {
		return func() bool {
			co.co.mu.Lock()
			defer co.co.mu.Unlock()
			return co.co.inFlight == want
		}
	}
	polltest.Until(t, 5*time.Second, "the blocking call in flight", inFlight(1))
	got := make([]Result, n)
	errs := make([]error, n)
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = co.Check(ctx, reqs[i:i+1], got[i:i+1])
		}()
	}
	polltest.Until(t, 5*time.Second, "the full batch sent", inFlight(2))
	srv.Resume(t)
	resumed = true
	wg.Wait()
	if err := <-blockErr; err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		if errs[i] != nil {
			t.Fatalf("decision %d: %v", i, errs[i])
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("decision %d (%v): batched %+v, want %+v as made alone", i, reqs[i].Limit.Algorithm, got[i], want[i])
		}
	}
	if got, want := redistest.EvalshaCalls(t, srv.Addr), 2; got != want {
		t.Errorf("EVALSHA calls = %d, want %d (the blocking call and one batch of %d)", got, want, n)
	}
	if got, want := co.Pipelines(), uint64(2); got != want {
		t.Errorf("round trips = %d, want %d", got, want)
	}
}

// One decision's error inside a batch fails that decision only.
func TestBatchErrorStaysInItsDecision(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	r := newTestRedis(t, RedisConfig{URL: srv.URL()})
	l := window.Limit{Limit: 5, Window: time.Minute}
	b := window.Bucket(window.Ms(batchT0), time.Minute)
	// A string where the bad key's counter hash should be: WRONGTYPE.
	if err := r.Client().Set(ctx, CounterKey("bad", time.Minute, b), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	reqs := []Request{
		{Key: "good1", Limit: l, Hits: 1, Now: batchT0},
		{Key: "bad", Limit: l, Hits: 1, Now: batchT0},
		{Key: "good2", Limit: l, Hits: 2, Now: batchT0},
	}
	redistest.ResetStats(t, srv.Addr)
	out, err := r.exec(ctx, reqs, &roundTrip{pooled: r.pooled})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := redistest.EvalshaCalls(t, srv.Addr), 1; got != want {
		t.Errorf("EVALSHA calls = %d, want %d", got, want)
	}
	if !redis.HasErrorPrefix(out[1].err, "WRONGTYPE") {
		t.Errorf("bad decision: error %v, want WRONGTYPE", out[1].err)
	}
	for i, want := range map[int]string{0: "1", 2: "2"} {
		if out[i].err != nil {
			t.Errorf("decision %d: %v", i, out[i].err)
		}
		if got := r.Client().HGet(ctx, CounterKey(reqs[i].Key, time.Minute, b), "here").Val(); got != want {
			t.Errorf("%s counted %q, want %q", reqs[i].Key, got, want)
		}
	}
	// Through Check, the call holding the bad decision fails, as it would
	// alone, and wraps the reply as a Redis error, not an outage.
	err = r.Check(ctx, reqs, make([]Result, len(reqs)))
	if err == nil || !redis.HasErrorPrefix(err, "WRONGTYPE") {
		t.Errorf("Check with a bad decision: %v, want WRONGTYPE", err)
	}
}

func TestKeySlotMatchesRedis(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, mostly waited for
	cl := redistest.StartCluster(t)
	c := redis.NewClient(&redis.Options{Addr: cl.Addrs[0]})
	defer c.Close()
	ctx := context.Background()
	for _, k := range []string{"", "a", "rl:{a}:60000:1", "rl:{}:x", "{", "}{", "a{b}c{d}", "rl:{日本}:g:1", "rl:{a%7Db}:l:5", "{{}}"} {
		want, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(k); int64(got) != want {
			t.Errorf("keySlot(%q) = %d, want %d", k, got, want)
		}
	}
}

// On a Redis Cluster, decisions are batched per hash slot: a round trip
// makes one EVALSHA per slot its keys fall in, and decides in order.
func TestBatchClusterPerSlot(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, mostly waited for
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	r := newTestRedis(t, RedisConfig{URL: cl.URL()})
	if !r.cluster || !r.batch {
		t.Fatalf("cluster = %v, batch = %v, want both", r.cluster, r.batch)
	}
	l := window.Limit{Limit: 2, Window: time.Minute}
	var reqs []Request
	slots := map[uint16]bool{}
	for i := range 10 {
		k := fmt.Sprintf("key%d", i)
		slots[keySlot(CounterKey(k, time.Minute, 0))] = true
		for range 3 {
			reqs = append(reqs, Request{Key: k, Limit: l, Hits: 1, Now: batchT0})
		}
	}
	for _, a := range cl.Addrs {
		redistest.ResetStats(t, a)
	}
	res := make([]Result, len(reqs))
	if err := r.Check(ctx, reqs, res); err != nil {
		t.Fatal(err)
	}
	for i := range res {
		if got, want := res[i].Allowed, i%3 != 2; got != want {
			t.Errorf("request %d (%s): Allowed = %v, want %v", i, reqs[i].Key, got, want)
		}
	}
	calls := 0
	for _, a := range cl.Addrs {
		calls += redistest.EvalshaCalls(t, a)
	}
	if got, want := calls, len(slots); got != want {
		t.Errorf("EVALSHA calls = %d, want %d (one per slot)", got, want)
	}
}

// A round trip of more decisions than one script call may carry is split
// into several batch calls, in order.
func TestBatchSplitsLongRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	r := newTestRedis(t, RedisConfig{URL: srv.URL(), Coalesce: Coalesce{Disabled: true}})
	l := window.Limit{Limit: 100, Window: time.Minute}
	n := 2*maxScriptBatch + 3
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Key: "same", Limit: l, Hits: 1, Now: batchT0}
	}
	redistest.ResetStats(t, srv.Addr)
	res := make([]Result, n)
	if err := r.Check(ctx, reqs, res); err != nil {
		t.Fatal(err)
	}
	for i := range res {
		if got, want := res[i].Allowed, i < 100; got != want {
			t.Errorf("request %d: Allowed = %v, want %v", i, got, want)
		}
	}
	if got, want := redistest.EvalshaCalls(t, srv.Addr), 3; got != want {
		t.Errorf("EVALSHA calls = %d, want %d", got, want)
	}
}

// A store that reads script replies into pooled buffers (retries off, the
// default) decides rounds of batches of shrinking and growing size, which
// reuse the buffers, exactly as one that reads them as go-redis keeps
// them (retries on) decides the same rounds.
func TestPooledRepliesDecideAsRawCmd(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	pooled := newTestRedis(t, RedisConfig{URL: srv.URL(), Coalesce: Coalesce{Disabled: true}})
	raw := newTestRedis(t, RedisConfig{URL: srv.URL(), Coalesce: Coalesce{Disabled: true}, MaxRetries: 1})
	if !pooled.pooled || raw.pooled {
		t.Fatalf("pooled: %v and %v, want true and false", pooled.pooled, raw.pooled)
	}
	run := func(r *Redis) [][]Result {
		if err := r.Client().FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var out [][]Result
		for round, n := range []int{24, 3, 24, 1, 12, 24} {
			reqs := batchRequests(n)
			for i := range reqs {
				reqs[i].Now = reqs[i].Now.Add(time.Duration(round) * time.Second)
			}
			res := make([]Result, n)
			if err := r.Check(ctx, reqs, res); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			out = append(out, res)
		}
		return out
	}
	want := run(raw)
	if got := run(pooled); !reflect.DeepEqual(got, want) {
		t.Errorf("pooled replies decided\n%+v\nwant (go-redis's replies)\n%+v", got, want)
	}
}
