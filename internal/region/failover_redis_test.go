package region_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/looptest"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// newRedisFailover returns a Failover for region "here" over a Redis
// store on srv, whose client waits 3s for a reply (far longer than any
// store timeout the tests set) and whose calls are bounded at cfg.Timeout
// (as [region.Open] makes them), with an in-memory fallback; cfg's Region
// is set.
func newRedisFailover(t *testing.T, srv *redistest.Server, cfg region.FailoverConfig) (*region.Redis, *region.Memory, *region.Failover) {
	t.Helper()
	r, err := region.NewRedis(context.Background(), region.RedisConfig{URL: srv.URL(), Region: "here",
		ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, DialTimeout: 3 * time.Second, CallTimeout: cmp.Or(cfg.Timeout, region.DefaultStoreTimeout)})
	if err != nil {
		t.Fatal(err)
	}
	fb := region.NewMemory(region.MemoryConfig{Region: region.FallbackRegion("here")})
	cfg.Region = "here"
	f, err := region.NewFailover(r, fb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return r, fb, f
}

// TestFailoverRedisOutage runs steady load against a Failover over a real
// redis-server while the server first stalls (SIGSTOP: commands hang), then
// dies (SIGKILL: connections refused), then restarts on the same port. Under
// every policy no decision errs, none waits much longer than the store
// timeout (latencies are logged; the bound asserted is far below the
// client's 3s read timeout that a missing timeout would hit), decisions
// follow the policy during the outage, and the node returns to Redis.
func TestFailoverRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("outage test skipped in -short mode")
	}
	for _, policy := range []region.Policy{region.PolicyLocal, region.PolicyOpen, region.PolicyClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			const timeout = 50 * time.Millisecond
			r, fb, f := newRedisFailover(t, srv, region.FailoverConfig{Policy: policy, Timeout: timeout,
				ProbeMin: 20 * time.Millisecond, ProbeMax: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})

			l := window.Limit{Limit: 1 << 40, Window: time.Minute}
			var (
				phase   atomic.Value // string
				mu      sync.Mutex
				lat     = map[string][]time.Duration{}
				allowed = map[string]int{}
				denied  = map[string]int{}
				errs    []error
			)
			phase.Store("healthy")
			stop := looptest.Start(t, 8, func(w, i int) {
				reqs := make([]region.Request, 1+i%3)
				for j := range reqs {
					reqs[j] = region.Request{Key: fmt.Sprintf("out/%d/%d", w, j), Limit: l, Hits: 1, Now: time.Now()}
				}
				res := make([]region.Result, len(reqs))
				ph := phase.Load().(string)
				start := time.Now()
				err := f.Check(context.Background(), reqs, res)
				el := time.Since(start)
				mu.Lock()
				lat[ph] = append(lat[ph], el)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", ph, err))
				}
				for _, x := range res {
					if x.Allowed {
						allowed[ph]++
					} else {
						denied[ph]++
					}
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
			})
			waitCount := func(ph string, n int) {
				t.Helper()
				polltest.Until(t, 20*time.Second, fmt.Sprintf("%d decisions in phase %s", n, ph), func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(lat[ph]) >= n
				})
			}
			waitCount("healthy", 200)

			phase.Store("stalled")
			srv.Pause(t)
			polltest.Until(t, 10*time.Second, "fallback mode", func() bool { return f.Status().Mode == region.ModeFallback })
			t.Logf("readyz while stalled: %s", f.Status())
			waitCount("stalled", 200)

			phase.Store("dead")
			srv.Stop() // SIGKILL, even while stopped
			waitCount("dead", 200)

			phase.Store("restarted")
			srv.Restart(t)
			polltest.Until(t, 20*time.Second, "the node to return to Redis", func() bool { return f.Status().Mode == region.ModePrimary })
			phase.Store("recovered")
			waitCount("recovered", 200)
			stop()

			for _, err := range errs[:min(len(errs), 5)] {
				t.Errorf("decision error: %v", err)
			}
			if len(errs) > 0 {
				t.Errorf("%d decisions erred, want none", len(errs))
			}
			for _, ph := range []string{"healthy", "stalled", "dead", "restarted", "recovered"} {
				d := lat[ph]
				if len(d) == 0 {
					continue
				}
				slices.Sort(d)
				t.Logf("%-9s %5d calls: p50 %8v  p99 %8v  max %8v  allowed %5d denied %5d", ph, len(d),
					d[len(d)/2].Round(time.Microsecond), d[len(d)*99/100].Round(time.Microsecond), d[len(d)-1].Round(time.Microsecond),
					allowed[ph], denied[ph])
				if d[len(d)-1] > 30*timeout {
					t.Errorf("%s: slowest decision took %v, want about the %v timeout (far below the 3s read timeout)", ph, d[len(d)-1], timeout)
				}
			}
			// Decisions during the outage follow the policy.
			for _, ph := range []string{"dead"} {
				switch policy {
				case region.PolicyClosed:
					if allowed[ph] != 0 {
						t.Errorf("closed: %d allowed while Redis was dead, want 0", allowed[ph])
					}
				default:
					if denied[ph] != 0 {
						t.Errorf("%s: %d denied while Redis was dead, want 0 (the limit is never reached)", policy, denied[ph])
					}
				}
			}
			// After recovery nothing is denied (the limit is never reached),
			// but under the closed policy a call that still took longer than
			// the timeout on a busy machine is denied by the policy.
			if policy != region.PolicyClosed && denied["recovered"] != 0 {
				t.Errorf("%d denied after recovery, want 0", denied["recovered"])
			}
			st := f.Status()
			t.Logf("status: mode %s, transitions %d, failures %d (timeouts %d), fallback decisions %d, written back %d",
				st.ModeName(), st.Transitions, st.Failures, st.Timeouts, st.FallbackDecisions, st.WriteBacks)
			if st.Transitions < 2 || st.FallbackDecisions == 0 {
				t.Errorf("Status(): %d transitions, %d fallback decisions; want >= 2 and > 0", st.Transitions, st.FallbackDecisions)
			}
			// Back on Redis: the restarted server holds this node's counts,
			// and under local the fallback's admissions were written back.
			b := window.Bucket(window.Ms(time.Now()), l.Window)
			vecs, err := r.Vectors(context.Background(), []region.BucketRef{{Key: "out/0/0", Window: l.Window, Bucket: b}})
			if err != nil {
				t.Fatalf("Vectors after recovery: %v", err)
			}
			regions := map[string]uint64{}
			for _, tt := range vecs[0] {
				regions[tt.Region] = tt.Count
			}
			t.Logf("Redis vector of out/0/0 after recovery: %v", regions)
			if regions["here"] == 0 {
				t.Errorf("Redis holds no count for region here after recovery: the node did not return to it")
			}
			if policy == region.PolicyLocal && regions[fb.Region()] == 0 && st.WriteBackDropped == 0 {
				// The bucket may have rolled over during the test; only
				// then can the written-back count be in another bucket.
				if window.Bucket(window.Ms(st.Since), l.Window) == b {
					t.Errorf("Redis holds no count for the fallback region %s after the write-back", fb.Region())
				}
			}
		})
	}
}

// TestFailoverRedisStallOneCaller checks the store timeout where no other
// call shares the round trip: a node deciding one request at a time, and
// its readiness probe, while its redis-server is stalled (SIGSTOP). Each
// call must leave at about the timeout: go-redis itself would read until
// its 3s read timeout, whatever the caller's deadline.
func TestFailoverRedisStallOneCaller(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 50 * time.Millisecond
	_, _, f := newRedisFailover(t, srv, region.FailoverConfig{Timeout: timeout, Threshold: 3, ProbeMin: time.Hour})
	l := window.Limit{Limit: 1 << 40, Window: time.Minute}
	decide := func() (time.Duration, error) {
		res := make([]region.Result, 1)
		start := time.Now()
		err := f.Check(context.Background(), []region.Request{{Key: "one", Limit: l, Hits: 1, Now: time.Now()}}, res)
		if err == nil && !res[0].Allowed {
			err = fmt.Errorf("denied under limit %d", l.Limit)
		}
		return time.Since(start), err
	}
	if _, err := decide(); err != nil {
		t.Fatal(err)
	}

	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	start := time.Now()
	err := f.Ping(context.Background())
	took := time.Since(start)
	t.Logf("readiness probe while stalled: %v after %v", err, took)
	if took > 10*timeout {
		t.Errorf("readiness probe took %v while Redis was stalled, want about the %v timeout", took, timeout)
	}
	for i := range 3 { // the probe counted one failure; these open the breaker
		took, err := decide()
		t.Logf("decision %d while stalled: %v, err %v", i, took, err)
		if err != nil {
			t.Errorf("decision %d: %v", i, err)
		}
		if took > 10*timeout {
			t.Errorf("decision %d took %v while Redis was stalled, want about the %v timeout (far below the 3s read timeout)", i, took, timeout)
		}
	}
	if st := f.Status(); st.Mode != region.ModeFallback || st.Timeouts < 3 {
		t.Errorf("status after the stalled calls: mode %s, %d timeouts; want fallback after at least 3", st.ModeName(), st.Timeouts)
	}
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// shared is a primary store shared by two Failovers; only the test closes
// it.
type shared struct{ region.Store }

func (shared) Close() error { return nil }

// TestFailoverTimeoutsLeaveBatchesIntact: callers that give up on a
// coalesced Redis batch at a tiny timeout do not break the batch for the
// callers that wait: every patient decision comes from Redis, and Redis
// counts exactly the patient admissions on their keys.
func TestFailoverTimeoutsLeaveBatchesIntact(t *testing.T) {
	srv := redistest.Start(t)
	r := newRedisStore(t, srv.URL(), "here", region.Coalesce{})
	region.SetGathering(r, time.Millisecond, 0)
	mk := func(timeout time.Duration) *region.Failover {
		fb := region.NewMemory(region.MemoryConfig{Region: region.FallbackRegion("here")})
		f, err := region.NewFailover(shared{r}, fb, region.FailoverConfig{Region: "here", Timeout: timeout, Threshold: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	impatient, patient := mk(50*time.Microsecond), mk(10*time.Second)
	l := window.Limit{Limit: 1 << 40, Window: time.Hour}
	now := time.Now()
	const workers, calls = 8, 200
	var wg sync.WaitGroup
	var fromFallback, errs atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := patient
			if w%2 == 1 {
				f = impatient
			}
			res := make([]region.Result, 2)
			for i := range calls {
				reqs := []region.Request{
					{Key: fmt.Sprintf("intact/%d", w), Limit: l, Hits: 1, Now: now},
					{Key: fmt.Sprintf("intact/%d/%d", w, i%5), Limit: l, Hits: 1, Now: now},
				}
				if err := f.Check(context.Background(), reqs, res); err != nil {
					errs.Add(1)
					continue
				}
				if f == patient && (res[0].LocalRegion != "" || res[1].LocalRegion != "") {
					fromFallback.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() != 0 || fromFallback.Load() != 0 {
		t.Fatalf("%d errors and %d patient decisions from the fallback, want none", errs.Load(), fromFallback.Load())
	}
	t.Logf("impatient callers: %d timeouts of %d calls", impatient.Status().Timeouts, workers/2*calls)
	b := window.Bucket(window.Ms(now), l.Window)
	for w := 0; w < workers; w += 2 {
		v, err := r.Vectors(context.Background(), []region.BucketRef{{Key: fmt.Sprintf("intact/%d", w), Window: l.Window, Bucket: b}})
		if err != nil {
			t.Fatal(err)
		}
		if len(v[0]) != 1 || v[0][0].Count != calls {
			t.Errorf("Redis count of patient key intact/%d = %v, want %d", w, v[0], calls)
		}
	}
}
