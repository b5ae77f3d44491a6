package region_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/porttest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

var t0 = time.UnixMilli(1_760_000_040_000)

func check(t *testing.T, s region.Store, q region.Request) (region.Result, error) {
	t.Helper()
	res := make([]region.Result, 1)
	err := s.Check(context.Background(), []region.Request{q}, res)
	return res[0], err
}

func TestRedisKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(), "here", region.Coalesce{})
	c := s.Client()
	ctx := context.Background()
	for _, tt := range []struct {
		algo     window.Algorithm
		key      string
		min, max time.Duration
	}{
		{window.SlidingWindow, region.CounterKey("k", time.Minute, window.Bucket(window.Ms(t0), time.Minute)), 2 * time.Minute, 2*time.Minute + 10*time.Second},
		{window.TokenBucket, "rl:{k}:g:60000", time.Second, time.Second + 60*time.Second/5},
		{window.SlidingLog, "rl:{k}:l:60000", time.Minute, time.Minute + 10*time.Second},
	} {
		l := window.Limit{Limit: 5, Window: time.Minute, Algorithm: tt.algo}
		if r, err := check(t, s, region.Request{Key: "k", Limit: l, Hits: 1, Now: t0}); err != nil || !r.Allowed {
			t.Fatalf("%v: Check = %+v, %v", tt.algo, r.Decision, err)
		}
		ttl, err := c.PTTL(ctx, tt.key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < tt.min-time.Second || ttl > tt.max {
			t.Errorf("%v: PTTL(%s) = %v, want %v to %v", tt.algo, tt.key, ttl, tt.min, tt.max)
		}
	}
	// Merged totals expire too.
	b := window.Bucket(window.Ms(t0), time.Minute)
	if err := s.Merge(ctx, []region.Total{{Key: "m", Window: time.Minute, Bucket: b, Region: "far", Count: 3}}); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, region.CounterKey("m", time.Minute, b)).Val(); ttl <= 0 || ttl > 2*time.Minute+10*time.Second {
		t.Errorf("merged bucket PTTL = %v, want about two windows", ttl)
	}
	// An admission into a bucket that exists leaves its expiry alone: the
	// one set when the bucket was created covers its two windows.
	mk := region.CounterKey("m", time.Minute, b)
	if err := c.PExpire(ctx, mk, 90*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := check(t, s, region.Request{Key: "m", Limit: window.Limit{Limit: 5, Window: time.Minute}, Hits: 1, Now: t0}); err != nil || !r.Allowed {
		t.Fatalf("Check = %+v, %v", r.Decision, err)
	}
	if ttl := c.PTTL(ctx, mk).Val(); ttl <= 0 || ttl > 90*time.Second {
		t.Errorf("PTTL after an admission into an existing bucket = %v, want its own 90s or less", ttl)
	}
}

func TestRedisClusterBucketsShareASlot(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, mostly waited for
	cl := redistest.StartCluster(t)
	s := newRedisStore(t, cl.URL(), "here", region.Coalesce{})
	ctx := context.Background()
	for _, k := range []string{"a", "a}b", "{x}", "%", "日本"} {
		var slots []int64
		for _, rk := range []string{region.CounterKey(k, time.Minute, 9), region.CounterKey(k, time.Minute, 8), region.CounterKey(k, time.Hour, -1)} {
			slot, err := s.Client().ClusterKeySlot(ctx, rk).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots = append(slots, slot)
		}
		if slots[0] != slots[1] || slots[0] != slots[2] {
			t.Errorf("key %q: slots %v, want one slot", k, slots)
		}
	}
	// A batch over many keys spread over the three masters is one Check.
	reqs := make([]region.Request, 50)
	for i := range reqs {
		reqs[i] = region.Request{Key: string(rune('a'+i%26)) + string(rune('A'+i/26)), Limit: window.Limit{Limit: 1, Window: time.Minute}, Hits: 1, Now: t0}
	}
	res := make([]region.Result, len(reqs))
	if err := s.Check(ctx, reqs, res); err != nil {
		t.Fatal(err)
	}
	for i := range res {
		if !res[i].Allowed {
			t.Errorf("request %d denied", i)
		}
	}
}

// TestRedisReloadsScripts: decisions, peeks and merges that find the
// scripts flushed load them again and run; each decision or peek that did
// calls the OnReload hook once, before it runs again, and no other call
// does.
func TestRedisReloadsScripts(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(), "here", region.Coalesce{Disabled: true})
	ctx := context.Background()
	l := window.Limit{Limit: 2, Window: time.Minute}
	b := window.Bucket(window.Ms(t0), time.Minute)
	var seen []uint64 // k's count at each call of the hook
	s.OnReload(func(ctx context.Context) time.Duration {
		v, err := s.Vectors(ctx, []region.BucketRef{{Key: "k", Window: time.Minute, Bucket: b}})
		if err != nil {
			t.Errorf("Vectors in the hook: %v", err)
			return 0
		}
		var n uint64
		for _, tt := range v[0] {
			n += tt.Count
		}
		seen = append(seen, n)
		return 0
	})
	for i, want := range []bool{true, true, false} {
		if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		reqs := []region.Request{{Key: "k", Limit: l, Hits: 1, Now: t0}, {Key: "k2", Limit: l, Hits: 1, Now: t0}}
		res := make([]region.Result, 2)
		if err := s.Check(ctx, reqs, res); err != nil {
			t.Fatalf("check %d after SCRIPT FLUSH: %v", i, err)
		}
		if res[0].Allowed != want {
			t.Errorf("check %d: Allowed = %v, want %v", i, res[0].Allowed, want)
		}
		if _, err := check(t, s, region.Request{Key: "loaded", Limit: l, Hits: 1, Now: t0, Peek: true}); err != nil {
			t.Fatalf("check with the scripts loaded: %v", err)
		}
		if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := check(t, s, region.Request{Key: "single", Limit: l, Hits: 1, Now: t0, Peek: true}); err != nil {
			t.Fatalf("single check after SCRIPT FLUSH: %v", err)
		}
		if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Merge(ctx, []region.Total{{Key: "k", Window: time.Minute, Bucket: b, Region: "far", Count: 0}}); err != nil {
			t.Fatalf("merge after SCRIPT FLUSH: %v", err)
		}
	}
	// The hook runs before each check's decisions: k held 0, 1 and 2 (the
	// third was denied); and before each peek, after its check.
	if want := []uint64{0, 1, 1, 2, 2, 2}; !slices.Equal(seen, want) {
		t.Errorf("k's count at each call of the hook = %v, want %v", seen, want)
	}
}

// TestRedisReloadHeld: when the OnReload hook returns a hold, the
// decisions that found the scripts gone do not run: each is denied,
// retryable after the hold, marked held, and counts nothing; so is a
// decision within the hold, and the first after it runs.
func TestRedisReloadHeld(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(), "here", region.Coalesce{Disabled: true})
	ctx := context.Background()
	const hold = 150 * time.Millisecond
	s.OnReload(func(context.Context) time.Duration { return hold })
	l := window.Limit{Limit: 5, Window: time.Minute}
	if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	reqs := []region.Request{{Key: "k", Limit: l, Hits: 1, Now: t0}, {Key: "k2", Limit: l, Hits: 1, Now: t0}}
	res := make([]region.Result, 2)
	if err := s.Check(ctx, reqs, res); err != nil {
		t.Fatalf("check after SCRIPT FLUSH: %v", err)
	}
	b := window.Bucket(window.Ms(t0), time.Minute)
	for i, r := range res {
		if r.Allowed || !r.Held || r.RetryAfter != hold || r.Limit != l.Limit || r.Bucket != b {
			t.Errorf("held decision %d = allowed %v, held %v, retry after %v, limit %d, bucket %d; want denied, held, %v, %d, %d",
				i, r.Allowed, r.Held, r.RetryAfter, r.Limit, r.Bucket, hold, l.Limit, b)
		}
	}
	r, err := check(t, s, region.Request{Key: "k", Limit: l, Hits: 1, Now: t0.Add(hold / 3)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed || !r.Held || r.RetryAfter != hold-hold/3 {
		t.Errorf("a decision within the hold = allowed %v, held %v, retry after %v; want held, %v", r.Allowed, r.Held, r.RetryAfter, hold-hold/3)
	}
	r, err = check(t, s, region.Request{Key: "k", Limit: l, Hits: 1, Now: t0.Add(hold)})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Allowed || r.Local != 1 {
		t.Errorf("the next decision: allowed %v, local count %d; want allowed, 1 (the held one counted nothing)", r.Allowed, r.Local)
	}
}

func TestRedisUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(), "here", region.Coalesce{})
	l := window.Limit{Limit: 2, Window: time.Minute}
	srv.Stop()
	_, err := check(t, s, region.Request{Key: "k", Limit: l, Hits: 1, Now: t0})
	if !errors.Is(err, region.ErrUnavailable) {
		t.Errorf("Check with Redis down: error %v, want ErrUnavailable", err)
	}
	if err := s.Merge(context.Background(), []region.Total{{Key: "k", Window: time.Minute, Region: "far", Count: 1}}); !errors.Is(err, region.ErrUnavailable) {
		t.Errorf("Merge with Redis down: error %v, want ErrUnavailable", err)
	}
	if _, err := s.Vectors(context.Background(), []region.BucketRef{{Key: "k", Window: time.Minute}}); !errors.Is(err, region.ErrUnavailable) {
		t.Errorf("Vectors with Redis down: error %v, want ErrUnavailable", err)
	}
	// A restarted server has lost the scripts: they are reloaded.
	srv.Restart(t)
	var r region.Result
	polltest.Until(t, 5*time.Second, "a decision after the restart", func() bool {
		r, err = check(t, s, region.Request{Key: "k", Limit: l, Hits: 1, Now: t0})
		return err == nil
	})
	if !r.Allowed {
		t.Errorf("after restart: denied")
	}
	port := porttest.Free(t)
	_, err = region.NewRedis(context.Background(), region.RedisConfig{URL: "redis://127.0.0.1:" + strconv.Itoa(port), DialTimeout: time.Second})
	if !errors.Is(err, region.ErrUnavailable) {
		t.Errorf("NewRedis on a closed port: error %v, want ErrUnavailable", err)
	}
}

func TestRedisSentinelURL(t *testing.T) {
	master := redistest.Start(t)
	sen := redistest.StartSentinel(t, master)
	s := newRedisStore(t, "redis+sentinel://"+sen.Addr+"/mymaster", "here", region.Coalesce{})
	l := window.Limit{Limit: 1, Window: time.Minute}
	for i, want := range []bool{true, false} {
		r, err := check(t, s, region.Request{Key: "k", Limit: l, Hits: 1, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed != want {
			t.Errorf("check %d: Allowed = %v, want %v", i, r.Allowed, want)
		}
	}
	// The count is in the master.
	direct := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer direct.Close()
	b := window.Bucket(window.Ms(t0), time.Minute)
	if got := direct.HGet(context.Background(), region.CounterKey("k", time.Minute, b), "here").Val(); got != "1" {
		t.Errorf("master holds %q, want 1", got)
	}
}
