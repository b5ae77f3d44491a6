package api

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
)

// discardWriter is a minimal http.ResponseWriter that keeps the status and
// drops the body, so the benchmarks measure the handler, not a recorder.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header  { return w.h }
func (w *discardWriter) WriteHeader(code int) { w.status = code }
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(b)
	return len(b), nil
}

// benchHandler posts Connect JSON Check requests to the handler directly
// (no network), from parallel goroutines, with the body made by body(i).
func benchHandler(b *testing.B, store region.Store, body func(i uint64) []byte) {
	benchHandlerConfig(b, Config{Store: store}, body)
}

// benchHandlerConfig is benchHandler on a handler of cfg, its registry
// filled in and its clock time.Now unless set.
func benchHandlerConfig(b *testing.B, cfg Config, body func(i uint64) []byte) {
	benchHandlerWarm(b, cfg, body, 0)
}

// benchHandlerWarm is benchHandlerConfig after warm requests, made from
// 16 goroutines before the timer starts.
func benchHandlerWarm(b *testing.B, cfg Config, body func(i uint64) []byte, warm int) {
	cfg.Registerer = prometheus.NewRegistry()
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h, err := NewHandler(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Uint64
	loop := func(next func() bool) {
		serveChecks(b, h, "application/json", next, func(uint64) []byte { return body(seq.Add(1)) })
	}
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(warm))
	for range 16 {
		wg.Go(func() { loop(func() bool { return left.Add(-1) >= 0 }) })
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) { loop(pb.Next) })
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// BenchmarkHandlerCheckJSON measures one Connect JSON Check through the
// whole handler (routing, decoding, validation, the store, metrics,
// encoding) on the in-memory store: 10k keys all allowed, and one hot key
// far over its limit, behind the deny cache or not.
func BenchmarkHandlerCheckJSON(b *testing.B) {
	uniform := func(i uint64) []byte {
		return []byte(`{"key":"user` + strconv.FormatUint(i%10000, 10) + `","limit":{"limit":"1000000000","window":"60s"}}`)
	}
	hot := []byte(`{"key":"hot","limit":{"limit":"10","window":"60s"}}`)
	b.Run("uniform10k/memory", func(b *testing.B) {
		benchHandler(b, region.NewMemory(region.MemoryConfig{}), uniform)
	})
	b.Run("uniform10k/memory+denycache", func(b *testing.B) {
		benchHandler(b, region.NewDenyCache(region.NewMemory(region.MemoryConfig{}), region.DenyCacheConfig{}), uniform)
	})
	b.Run("hotdenied/memory", func(b *testing.B) {
		benchHandler(b, region.NewMemory(region.MemoryConfig{}), func(uint64) []byte { return hot })
	})
	b.Run("hotdenied/memory+denycache", func(b *testing.B) {
		benchHandler(b, region.NewDenyCache(region.NewMemory(region.MemoryConfig{}), region.DenyCacheConfig{}), func(uint64) []byte { return hot })
	})
}

// BenchmarkHandlerCheckStack measures one Connect JSON Check through the
// whole handler on the store stacks rlnode runs ([region.Open]): in
// memory, and on Redis behind the failover (which copies every decision
// into its fallback) and the deny cache, 10k keys all allowed. With a
// reset TTL of 1 ns every decision finds what the node read of its key's
// reset instant, and of the store's reset marker, out of date: on Redis
// the worst case, a look and a read of the marker in every decision. The
// unseen row decides each key once, with the default TTL: a key the node
// has not read within the TTL, as in the bench's 10k-key rows, where a
// key comes back less often than the TTL (docs/performance.md), while
// what it read of the marker stays as fresh as in a running node. The
// uniform10k row decides 10k keys over and over with the default TTL, as
// the bench's 10k-key rows do: the failover's mirror finds each key's
// entry in its fallback and merges into it.
func BenchmarkHandlerCheckStack(b *testing.B) {
	uniform := func(i uint64) []byte {
		return []byte(`{"key":"user` + strconv.FormatUint(i%10000, 10) + `","limit":{"limit":"1000000000","window":"60s"}}`)
	}
	unseen := func(i uint64) []byte {
		return []byte(`{"key":"user` + strconv.FormatUint(i, 10) + `","limit":{"limit":"1000000000","window":"60s"}}`)
	}
	b.Run("memory", func(b *testing.B) {
		benchHandlerConfig(b, Config{Store: storetest.Open(b, region.Config{}), ResetTTL: time.Nanosecond}, uniform)
	})
	b.Run("redis", func(b *testing.B) {
		st := storetest.Open(b, region.Config{Redis: region.RedisConfig{URL: redistest.Start(b).URL()}, DenyCache: &region.DenyCacheConfig{}})
		b.SetParallelism(16)
		benchHandlerConfig(b, Config{Store: st, ResetTTL: time.Nanosecond}, uniform)
	})
	b.Run("redis/uniform10k", func(b *testing.B) {
		st := &requestCounter{Store: storetest.Open(b, region.Config{Redis: region.RedisConfig{URL: redistest.Start(b).URL()}, DenyCache: &region.DenyCacheConfig{}})}
		b.SetParallelism(16)
		benchHandlerConfig(b, Config{Store: st}, uniform)
		b.ReportMetric(float64(st.n.Load())/float64(b.N), "storereqs/op")
	})
	// Each key back every half second of a clock that moves a fixed
	// step per request, after two windows of warm-up: both buckets of a
	// key hold coarse trails of about 120 marks, as keys do in a running
	// node, and the response carries the previous one's marks.
	b.Run("redis/steady", func(b *testing.B) {
		const keys, step = 1000, 500 * time.Microsecond
		st := &requestCounter{Store: storetest.Open(b, region.Config{Redis: region.RedisConfig{URL: redistest.Start(b).URL()}, DenyCache: &region.DenyCacheConfig{}})}
		start := time.Unix(1_700_000_000, 0)
		var tick atomic.Int64
		now := func() time.Time { return start.Add(time.Duration(tick.Add(1)) * step) }
		b.SetParallelism(16)
		steady := func(i uint64) []byte {
			return []byte(`{"key":"user` + strconv.FormatUint(i%keys, 10) + `","limit":{"limit":"1000000000","window":"60s"}}`)
		}
		warm := int(2 * time.Minute / step)
		benchHandlerWarm(b, Config{Store: st, Now: now}, steady, warm)
		b.ReportMetric(float64(tick.Load())/float64(warm+b.N), "nows/op")
		b.ReportMetric(float64(st.n.Load())/float64(warm+b.N), "storereqs/op")
	})
	b.Run("redis/unseen", func(b *testing.B) {
		st := &requestCounter{Store: storetest.Open(b, region.Config{Redis: region.RedisConfig{URL: redistest.Start(b).URL()}, DenyCache: &region.DenyCacheConfig{}})}
		b.SetParallelism(16)
		benchHandlerConfig(b, Config{Store: st}, unseen)
		b.ReportMetric(float64(st.n.Load())/float64(b.N), "storereqs/op")
	})
}

// requestCounter counts the requests a store is asked to decide.
type requestCounter struct {
	region.Store
	n atomic.Int64
}

func (s *requestCounter) Check(ctx context.Context, reqs []region.Request, res []region.Result) error {
	s.n.Add(int64(len(reqs)))
	return s.Store.Check(ctx, reqs, res)
}
