package region

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// fakeTrips is a roundTripper whose round trips take rtt of the bubble's
// time; it records the keys of each round trip and answers every request
// allowed with Local = its position in its trip.
type fakeTrips struct {
	rtt   time.Duration
	mu    sync.Mutex
	trips [][]string
}

func (f *fakeTrips) record(reqs []Request) {
	keys := make([]string, len(reqs))
	for i := range reqs {
		keys[i] = reqs[i].Key
	}
	f.mu.Lock()
	f.trips = append(f.trips, keys)
	f.mu.Unlock()
}

// checkDirect takes the whole rtt whatever ctx's deadline, as go-redis
// does with ContextTimeoutEnabled off.
func (f *fakeTrips) checkDirect(ctx context.Context, reqs []Request, res []Result) error {
	f.record(reqs)
	time.Sleep(f.rtt)
	for i := range res {
		res[i] = Result{Decision: window.Decision{Allowed: true}, Local: uint64(i)}
	}
	return nil
}

func (f *fakeTrips) checkCalls(ctx context.Context, calls []*call) {
	var all []Request
	for _, cl := range calls {
		all = append(all, cl.reqs...)
	}
	f.record(all)
	time.Sleep(f.rtt)
	off := 0
	for _, cl := range calls {
		for i := range cl.res {
			cl.res[i] = Result{Decision: window.Decision{Allowed: true}, Local: uint64(off + i)}
		}
		off += len(cl.reqs)
		cl.done <- nil
	}
}

func (f *fakeTrips) got() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.trips...)
}

// waitIdle returns once c has nothing in flight or gathered, checking
// every step of the bubble's time.
func waitIdle(c *coalescer, step time.Duration) {
	for {
		c.mu.Lock()
		idle := c.inFlight == 0 && c.pending == nil
		c.mu.Unlock()
		if idle {
			return
		}
		time.Sleep(step)
	}
}

func reqsFor(keys ...string) []Request {
	out := make([]Request, len(keys))
	for i, k := range keys {
		out[i] = Request{Key: k, Limit: window.Limit{Limit: 10, Window: time.Minute}, Hits: 1}
	}
	return out
}

// TestCoalescerTiming steps the coalescer through fake time: a lone call
// goes at once; calls that arrive while a round trip is in flight gather
// and go at maxWait; a full batch goes at once; a call that leaves at its
// deadline leaves the batch whole for the others.
func TestCoalescerTiming(t *testing.T) {
	const rtt, maxWait = time.Millisecond, 200 * time.Microsecond
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTrips{rtt: rtt}
		c := newCoalescer(Coalesce{}, 0, f)
		c.setBounds(maxWait, 4)
		start := time.Now()
		ends := make(map[string]time.Duration)
		errs := make(map[string]error)
		var mu sync.Mutex
		var wg sync.WaitGroup
		run := func(ctx context.Context, keys ...string) {
			wg.Go(func() {
				res := make([]Result, len(keys))
				err := c.check(ctx, reqsFor(keys...), res)
				mu.Lock()
				ends[keys[0]], errs[keys[0]] = time.Since(start), err
				mu.Unlock()
			})
			synctest.Wait() // each call gathers before the next starts
		}

		run(context.Background(), "lone")
		run(context.Background(), "b1")
		run(context.Background(), "b2")
		short, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
		defer cancel()
		run(short, "leaver")
		wg.Wait()

		if got, want := ends["lone"], rtt; got != want {
			t.Errorf("lone call answered after %v, want %v (sent at once)", got, want)
		}
		for _, k := range []string{"b1", "b2"} {
			if got, want := ends[k], maxWait+rtt; got != want {
				t.Errorf("%s answered after %v, want %v (maxWait, then one round trip)", k, got, want)
			}
			if errs[k] != nil {
				t.Errorf("%s: %v", k, errs[k])
			}
		}
		if got, want := ends["leaver"], 50*time.Microsecond; got != want || !errors.Is(errs["leaver"], context.DeadlineExceeded) {
			t.Errorf("leaver = %v after %v, want DeadlineExceeded after %v", errs["leaver"], got, want)
		}
		trips := f.got()
		if len(trips) != 2 || len(trips[0]) != 1 || len(trips[1]) != 3 {
			t.Fatalf("round trips = %v, want [lone] then [b1 b2 leaver]", trips)
		}

		// A batch that reaches maxBatch goes without waiting for maxWait.
		start = time.Now()
		clear(ends)
		run(context.Background(), "lone2")
		run(context.Background(), "f1", "f2")
		run(context.Background(), "f3", "f4")
		wg.Wait()
		if got, want := ends["f1"], rtt; got != want {
			t.Errorf("full batch answered after %v, want %v (sent at once)", got, want)
		}
		if got := f.got(); len(got) != 4 || len(got[3]) != 4 {
			t.Errorf("round trips = %v, want the full batch of 4 as the last", got)
		}

		// Close sends what is gathered and makes later calls go directly.
		c.close()
		run(context.Background(), "after")
		wg.Wait()
		if got := f.got(); len(got) != 5 || got[4][0] != "after" {
			t.Errorf("round trips = %v, want a direct one after close", got)
		}
	})
}

// TestCoalescerLeaderGathersReadyCalls checks that calls ready to run
// together share one round trip that goes at once: the first opens a batch
// and yields, the others join it, and no call waits for maxWait. A call
// that finds a round trip in flight would wait for it, so without the
// leader's yield the first call goes alone and the others a round trip
// later. The scheduler sometimes resumes a yielding goroutine before the
// ready ones (it takes from its global queue every 61st time), so each
// round may split; over the rounds most must not.
func TestCoalescerLeaderGathersReadyCalls(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const rtt, calls, rounds = time.Millisecond, 20, 10
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTrips{rtt: rtt}
		c := newCoalescer(Coalesce{}, 0, f)
		c.setBounds(time.Hour, 64)
		whole := 0
		for range rounds {
			before := len(f.got())
			start := time.Now()
			var late atomic.Int64
			var wg sync.WaitGroup
			for i := range calls {
				wg.Go(func() {
					res := make([]Result, 1)
					if err := c.check(context.Background(), reqsFor(fmt.Sprint("k", i)), res); err != nil {
						t.Error(err)
					}
					if time.Since(start) > rtt {
						late.Add(1)
					}
				})
			}
			wg.Wait()
			trips := f.got()[before:]
			if len(trips) > 2 {
				t.Errorf("round trips = %v, want at most two", trips)
			}
			if len(trips) == 1 && len(trips[0]) == calls && late.Load() == 0 {
				whole++
			}
		}
		if whole < rounds/2 {
			t.Errorf("%d of %d rounds sent all %d ready calls in one round trip answered after %v, want most", whole, rounds, calls, rtt)
		}

		// No call waits past its deadline, whoever sends its round trip: a
		// leader that sends its batch, or a call that fills one.
		for _, maxBatch := range []int{64, 2} {
			c := newCoalescer(Coalesce{}, 0, &fakeTrips{rtt: 10 * rtt})
			c.setBounds(time.Hour, maxBatch)
			start := time.Now()
			var wg sync.WaitGroup
			for i := range calls {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), rtt)
					defer cancel()
					err := c.check(ctx, reqsFor(fmt.Sprint("d", i)), make([]Result, 1))
					if took := time.Since(start); took != rtt || !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("maxBatch %d, call %d: %v after %v, want DeadlineExceeded after %v (its deadline, not the %v round trip)", maxBatch, i, err, took, rtt, 10*rtt)
					}
				})
			}
			wg.Wait()
			waitIdle(c, rtt) // the abandoned round trips end
		}

		// A call that finds no one ready still goes alone, at once.
		before := len(f.got())
		start := time.Now()
		res := make([]Result, 1)
		if err := c.check(context.Background(), reqsFor("alone"), res); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != rtt {
			t.Errorf("lone call answered after %v, want %v", got, rtt)
		}
		if trips := f.got()[before:]; len(trips) != 1 || len(trips[0]) != 1 {
			t.Errorf("round trips = %v, want the lone call's own", trips)
		}
	})
}

// TestCoalescerTimeout checks that a coalescer bounded at a timeout (as a
// Failover bounds Redis) returns ErrTimeout to every call at that timeout
// while the round trip goes on, however the call is sent: alone on an
// idle coalescer, as a leader with others, gathered while a round trip is
// in flight, too large to gather, or with gathering disabled. A call
// whose answer comes in time gets it.
func TestCoalescerTimeout(t *testing.T) {
	const timeout, slow = time.Millisecond, 10 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		for _, cfg := range []Coalesce{{}, {Disabled: true}} {
			f := &fakeTrips{rtt: slow}
			c := newCoalescer(cfg, timeout, f)
			c.setBounds(time.Hour, 4)
			check := func(name string, keys ...string) {
				t.Helper()
				start := time.Now()
				err := c.check(context.Background(), reqsFor(keys...), make([]Result, len(keys)))
				if took := time.Since(start); took != timeout || !errors.Is(err, ErrTimeout) {
					t.Errorf("disabled %v, %s: %v after %v, want ErrTimeout after %v (not the %v round trip)", cfg.Disabled, name, err, took, timeout, slow)
				}
			}
			check("lone call", "a")
			var wg sync.WaitGroup
			for i := range 6 { // leaders, gathered calls, full batches
				wg.Go(func() { check(fmt.Sprint("concurrent call ", i), fmt.Sprint("c", i)) })
			}
			wg.Go(func() { check("large call", "l1", "l2", "l3", "l4", "l5") })
			wg.Wait()
			waitIdle(c, slow) // the abandoned round trips end
			if n := len(f.got()); n < 3 {
				t.Errorf("disabled %v: %d round trips, want every call sent", cfg.Disabled, n)
			}

			f.rtt = timeout / 2
			res := make([]Result, 1)
			if err := c.check(context.Background(), reqsFor("fast"), res); err != nil || !res[0].Allowed {
				t.Errorf("disabled %v: a round trip within the timeout: %v, %+v, want its answer", cfg.Disabled, err, res[0])
			}
		}
	})
}

// TestOpenBoundsRedisCalls: the store Open composes bounds each Redis
// call at the failover's timeout in Redis's own coalescer (one timer per
// round trip), not with a context per call; a Redis made without a call
// timeout is bounded by the failover's contexts.
func TestOpenBoundsRedisCalls(t *testing.T) {
	srv := redistest.Start(t)
	for _, timeout := range []time.Duration{0, 20 * time.Millisecond} {
		st, err := Open(context.Background(), Config{Redis: RedisConfig{URL: srv.URL()}, Failover: FailoverConfig{Timeout: timeout}})
		if err != nil {
			t.Fatal(err)
		}
		want := cmp.Or(timeout, DefaultStoreTimeout)
		if got := st.Redis.co.timeout; got != want || !st.Failover.bounded {
			t.Errorf("Open(Timeout %v): Redis call timeout %v, failover leaves it to Redis %v; want %v, true", timeout, got, st.Failover.bounded, want)
		}
		_ = st.Close()
	}
	r := newTestRedis(t, RedisConfig{URL: srv.URL()})
	f, err := NewFailover(r, NewMemory(MemoryConfig{Region: FallbackRegion("here")}), FailoverConfig{Region: "here"})
	if err != nil {
		t.Fatal(err)
	}
	if f.bounded {
		t.Errorf("NewFailover over a Redis without a call timeout leaves the bound to it, want a context per call")
	}
}
