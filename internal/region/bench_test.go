package region_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// benchCheck runs batches of n requests over 10k keys from parallel
// goroutines.
func benchCheck(b *testing.B, s region.Store, n int) {
	l := window.Limit{Limit: 1 << 40, Window: time.Minute}
	var seq atomic.Uint64
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]region.Request, n)
		res := make([]region.Result, n)
		for pb.Next() {
			for i := range reqs {
				reqs[i] = region.Request{Key: "bench" + strconv.FormatUint(seq.Add(1)%10000, 10), Limit: l, Hits: 1, Now: now}
			}
			if err := s.Check(context.Background(), reqs, res); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkMemoryCheck(b *testing.B) {
	benchCheck(b, region.NewMemory(region.MemoryConfig{}), 1)
}

// BenchmarkMemoryCheckSteady decides on keys in their steady state: 1,000
// keys under a limit of 1,000 a minute (an exact trail), one decision per
// millisecond of a virtual clock, so that each key is hit once a second
// and its current and previous buckets hold up to 60 marks each, as
// uniform traffic leaves them. Two windows of warm-up fill them first.
func BenchmarkMemoryCheckSteady(b *testing.B) {
	benchSteady(b, region.NewMemory(region.MemoryConfig{}))
}

// benchSteady is BenchmarkMemoryCheckSteady's load on s.
func benchSteady(b *testing.B, s region.Store) {
	const keys = 1000
	l := window.Limit{Limit: 1000, Window: time.Minute}
	start := time.Unix(1_700_000_000, 0)
	var seq atomic.Int64
	check := func(res []region.Result) {
		i := seq.Add(1)
		req := []region.Request{{Key: "steady" + strconv.FormatInt(i%keys, 10), Limit: l, Hits: 1, Now: start.Add(time.Duration(i) * time.Millisecond)}}
		if err := s.Check(context.Background(), req, res); err != nil {
			b.Fatal(err)
		}
	}
	res := make([]region.Result, 1)
	for range 2 * 60_000 {
		check(res)
	}
	if got := len(res[0].Regions[0].PreviousTrail); got < 50 {
		b.Fatalf("previous trail of %d marks after warm-up, want about 60", got)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		res := make([]region.Result, 1)
		for pb.Next() {
			check(res)
		}
	})
}

// redisCPU returns the CPU seconds (user and system) Redis has used.
func redisCPU(b *testing.B, s *region.Redis) float64 {
	info, err := s.Client().Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		m := regexp.MustCompile(f + `:([0-9.]+)`).FindStringSubmatch(info)
		if m == nil {
			b.Fatalf("INFO cpu has no %s", f)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		sum += v
	}
	return sum
}

// BenchmarkRedisCheck measures decisions on Redis from 32 goroutines:
// single requests and CheckBatch-like calls of 10, coalesced or not,
// batched into one script call or one EVALSHA per decision, with Redis's
// script calls and CPU time per decision.
func BenchmarkRedisCheck(b *testing.B) {
	srv := redistest.Start(b)
	for _, tc := range []struct {
		name      string
		batch     int
		co        region.Coalesce
		unbatched bool
	}{
		{"single/coalesced", 1, region.Coalesce{}, false},
		{"single/direct", 1, region.Coalesce{Disabled: true}, false},
		{"batch10/coalesced", 10, region.Coalesce{}, false},
		{"batch10/direct", 10, region.Coalesce{Disabled: true}, false},
		{"single/coalesced/unbatched", 1, region.Coalesce{}, true},
		{"batch10/coalesced/unbatched", 10, region.Coalesce{}, true},
		{"batch10/direct/unbatched", 10, region.Coalesce{Disabled: true}, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := region.NewRedis(context.Background(), region.RedisConfig{URL: srv.URL(), Coalesce: tc.co})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if tc.unbatched {
				region.SetUnbatched(s)
			}
			b.SetParallelism(16)
			redistest.ResetStats(b, srv.Addr)
			cpu0 := redisCPU(b, s)
			benchCheck(b, s, tc.batch)
			b.ReportMetric(float64(s.Pipelines())/float64(b.N), "trips/op")
			decisions := float64(b.N * tc.batch)
			b.ReportMetric(float64(redistest.EvalshaCalls(b, srv.Addr))/decisions, "evalsha/decision")
			b.ReportMetric((redisCPU(b, s)-cpu0)*1e6/decisions, "redis-µs/decision")
		})
	}
}

// BenchmarkDenyCacheCheck measures the deny cache: a hot key far over its
// limit answered from memory (over Redis: no round trip at all), and 10k
// keys all allowed passing through it to the in-memory store (its
// overhead on admitted requests, against BenchmarkMemoryCheck).
func BenchmarkDenyCacheCheck(b *testing.B) {
	hot := func(b *testing.B, s region.Store) {
		l := window.Limit{Limit: 10, Window: time.Minute}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			reqs := make([]region.Request, 1)
			res := make([]region.Result, 1)
			for pb.Next() {
				reqs[0] = region.Request{Key: "hot", Limit: l, Hits: 1, Now: time.Now()}
				if err := s.Check(context.Background(), reqs, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("hotdenied/memory", func(b *testing.B) {
		hot(b, region.NewDenyCache(region.NewMemory(region.MemoryConfig{}), region.DenyCacheConfig{}))
	})
	b.Run("hotdenied/redis", func(b *testing.B) {
		srv := redistest.Start(b)
		r, err := region.NewRedis(context.Background(), region.RedisConfig{URL: srv.URL()})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		c := region.NewDenyCache(r, region.DenyCacheConfig{})
		hot(b, c)
		b.ReportMetric(float64(r.Pipelines())/float64(b.N), "trips/op")
	})
	b.Run("uniform10k/memory", func(b *testing.B) {
		benchCheck(b, region.NewDenyCache(region.NewMemory(region.MemoryConfig{}), region.DenyCacheConfig{}), 1)
	})
}

// BenchmarkFailoverCheck measures what the Failover adds to a decision:
// the primary's call on its own goroutine with a timeout, and the copy of
// the counts into the fallback (PolicyLocal), over an in-memory primary
// and over Redis.
func BenchmarkFailoverCheck(b *testing.B) {
	wrap := func(b *testing.B, p region.Store) region.Store {
		f, err := region.NewFailover(p, region.NewMemory(region.MemoryConfig{Region: region.FallbackRegion("local")}), region.FailoverConfig{Region: "local"})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = f.Close() })
		return f
	}
	b.Run("memory", func(b *testing.B) {
		benchCheck(b, wrap(b, region.NewMemory(region.MemoryConfig{})), 1)
	})
	// The mirror's copy into the fallback of keys in their steady state
	// (see BenchmarkMemoryCheckSteady).
	b.Run("memory/steady", func(b *testing.B) {
		benchSteady(b, wrap(b, region.NewMemory(region.MemoryConfig{})))
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		r, err := region.NewRedis(context.Background(), region.RedisConfig{URL: srv.URL()})
		if err != nil {
			b.Fatal(err)
		}
		b.SetParallelism(16)
		benchCheck(b, wrap(b, r), 1)
	})
}

// BenchmarkPeekFullBucket measures a decision on a key whose buckets hold
// MaxRegionsPerBucket regions each, the most that Merge lets remote input
// make them hold.
func BenchmarkPeekFullBucket(b *testing.B) {
	m := region.NewMemory(region.MemoryConfig{Region: "here"})
	l := window.Limit{Limit: 1 << 40, Window: time.Minute}
	now := time.UnixMilli(1_760_000_010_000)
	bucket := window.Bucket(window.Ms(now), l.Window)
	var totals []region.Total
	for i := range 2 * region.MaxRegionsPerBucket {
		totals = append(totals, region.Total{Key: "full", Window: l.Window, Bucket: bucket - int64(i%2), Region: "r" + strconv.Itoa(i), Count: 1})
	}
	if err := m.Merge(context.Background(), totals); err != nil {
		b.Fatal(err)
	}
	reqs := []region.Request{{Key: "full", Limit: l, Hits: 1, Now: now, Peek: true}}
	res := make([]region.Result, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Check(context.Background(), reqs, res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckModes compares one decision of the default sliding window
// with the two-bucket counter, one request at a time on one key whose
// buckets both hold counts from three regions: on the in-memory store, and
// on Redis, where script-µs/op is the script's own time inside Redis (INFO
// commandstats, usec_per_call of EVALSHA), without the round trip. The
// default's acceptance: at most 1.25 times the two-bucket counter's time.
func BenchmarkCheckModes(b *testing.B) {
	srv := redistest.Start(b)
	w := time.Minute
	start := time.Now().Truncate(w)
	seed := func(b *testing.B, s region.Store, key string) {
		bk := window.Bucket(window.Ms(start), w)
		var totals []region.Total
		for r, name := range []string{"r1", "r2"} {
			for _, bb := range []int64{bk - 1, bk} {
				var h window.Trail
				for i := int64(0); i < 200; i++ {
					h.Add((i*277+int64(r)*1000)%w.Milliseconds(), w.Milliseconds(), 3, false)
				}
				totals = append(totals, region.Total{Key: key, Window: w, Bucket: bb, Region: name, Count: h.Count(), Trail: h})
			}
		}
		if err := s.Merge(context.Background(), totals); err != nil {
			b.Fatal(err)
		}
	}
	modes := []struct {
		name string
		algo window.Algorithm
	}{{"two-bucket", window.SlidingWindowTwoBucket}, {"default", window.SlidingWindow}}
	run := func(b *testing.B, s region.Store, a window.Algorithm) {
		l := window.Limit{Limit: 1 << 40, Window: w, Algorithm: a}
		reqs := make([]region.Request, 1)
		res := make([]region.Result, 1)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			reqs[0] = region.Request{Key: "modes", Limit: l, Hits: 1, Now: start.Add(24*time.Second + time.Duration(i%4096)*time.Millisecond)}
			if err := s.Check(context.Background(), reqs, res); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, m := range modes {
		b.Run("memory/"+m.name, func(b *testing.B) {
			s := region.NewMemory(region.MemoryConfig{})
			seed(b, s, "modes")
			run(b, s, m.algo)
		})
	}
	for _, m := range modes {
		b.Run("redis/"+m.name, func(b *testing.B) {
			s, err := region.NewRedis(context.Background(), region.RedisConfig{URL: srv.URL(), Coalesce: region.Coalesce{Disabled: true}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Client().FlushAll(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
			seed(b, s, "modes")
			c := s.Client()
			if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
			run(b, s, m.algo)
			b.ReportMetric(scriptMicros(b, c), "script-µs/op")
		})
	}
}

// scriptMicros returns EVALSHA's usec_per_call from INFO commandstats.
func scriptMicros(b *testing.B, c redis.UniversalClient) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
					f, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return f
				}
			}
		}
	}
	b.Fatal("no cmdstat_evalsha in INFO commandstats")
	return 0
}

// BenchmarkRedisMemoryPerKey reports the Redis memory of one key of the
// default sliding window at limits of 10, 1000 and 100000 per minute, once
// a window's worth of hits has been admitted at 0.9x the limit, spread
// evenly (MEMORY USAGE of the current bucket's hash, SAMPLES 0), beside
// the two-bucket counter on the same hits. An exact trail (up to
// window.ExactMax) holds a mark per millisecond that admitted hits; a
// coarse one at most window.Granules. It measures once, whatever b.N.
//
//	go test ./internal/region -run '^$' -bench RedisMemoryPerKey -benchtime 1x
func BenchmarkRedisMemoryPerKey(b *testing.B) {
	srv := redistest.Start(b)
	s, err := region.NewRedis(context.Background(), region.RedisConfig{URL: srv.URL(), Region: "here"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	start := time.UnixMilli(window.Bucket(time.Now().UnixMilli(), time.Minute) * 60000)
	for b.Loop() {
		for _, lim := range []uint64{10, 1000, 100000} {
			for _, algo := range []window.Algorithm{window.SlidingWindow, window.SlidingWindowTwoBucket} {
				l := window.Limit{Limit: lim, Window: time.Minute, Algorithm: algo}
				key := "mem/" + algo.String() + "/" + strconv.FormatUint(lim, 10)
				n := lim * 9 / 10
				reqs := make([]region.Request, 1)
				res := make([]region.Result, 1)
				for i := range n {
					reqs[0] = region.Request{Key: key, Limit: l, Hits: 1, Now: start.Add(time.Duration(i*59000/n) * time.Millisecond)}
					if err := s.Check(ctx, reqs, res); err != nil {
						b.Fatal(err)
					}
				}
				bytes, err := s.Client().MemoryUsage(ctx, region.CounterKey(key, time.Minute, window.Bucket(window.Ms(start), time.Minute)), 0).Result()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(bytes), "B/key-"+algo.String()+"@"+strconv.FormatUint(lim, 10))
			}
		}
	}
}
