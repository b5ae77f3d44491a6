package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/client"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/region"
)

// startClockNode serves a node on the real clock, on a real loopback
// server.
func startClockNode(t *testing.T) *node {
	t.Helper()
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{}
	n.URL = apitest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.hits.Add(1)
		h.ServeHTTP(w, r)
	})).URL
	return n
}

// TestWaitRealServer: against a real node, Wait returns once the bucket
// has a token again (a token bucket of 10 per second: about 100 ms after
// it was emptied, no later than retryAfter plus its jitter), and returns
// at once, after one check, when the context's deadline is sooner than
// the retry (a minute's token against a second's deadline).
func TestWaitRealServer(t *testing.T) {
	n := startClockNode(t)
	c := newClient(t, n.URL)
	p := client.Limit{Limit: 10, Window: time.Second, Algorithm: client.TokenBucket}
	ctx := context.Background()
	if d, err := c.CheckN(ctx, "w", 10, p); err != nil || !d.Allowed {
		t.Fatalf("CheckN(10) = %+v, %v", d, err)
	}
	start := time.Now()
	d, err := c.Wait(ctx, "w", p)
	took := time.Since(start)
	if err != nil || !d.Allowed {
		t.Fatalf("Wait = %+v, %v; want allowed", d, err)
	}
	if took < 90*time.Millisecond || took > 2*time.Second {
		t.Errorf("Wait took %v, want about 100 ms (at least 90 ms)", took)
	}

	// A bucket of one per minute, emptied: the next token is a minute
	// away, the deadline a second (longer than a check's round trip even
	// under -race on a busy machine, much shorter than the retry).
	pm := client.Limit{Limit: 1, Window: time.Minute, Algorithm: client.TokenBucket}
	if _, err := c.Check(ctx, "m", pm); err != nil {
		t.Fatal(err)
	}
	before := n.hits.Load()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start = time.Now()
	d, err = c.Wait(short, "m", pm)
	if !errors.Is(err, client.ErrWaitDeadline) || d.Allowed || d.RetryAfter <= time.Second {
		t.Errorf("Wait with a 1 s deadline = %+v, %v; want ErrWaitDeadline and the denial", d, err)
	}
	if took := time.Since(start); took >= time.Second {
		t.Errorf("Wait with a 1 s deadline took %v, want it to return at once, not wait for the %v retry or the deadline", took, d.RetryAfter)
	}
	if got := n.hits.Load() - before; got != 1 {
		t.Errorf("Wait with a 1 s deadline made %d checks, want 1", got)
	}
}

// handlerTransport serves requests with h in the caller's goroutine, so
// that inside a synctest bubble the node's clock is the bubble's.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// TestWaitJitter: 50 waiters denied together by a limit of 1 per second
// come back spread over [retryAfter, 1.2 x retryAfter], not all at once;
// each is admitted in turn. On synctest's clock, with the node's handler
// in process.
func TestWaitJitter(t *testing.T) {
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var arrivals []time.Duration
		start := time.Now()
		rec := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			arrivals = append(arrivals, time.Since(start))
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
		c, err := client.New("http://node.invalid", client.WithHTTPClient(&http.Client{Transport: handlerTransport{rec}}), client.WithTimeout(0))
		if err != nil {
			t.Fatal(err)
		}
		p := client.Limit{Limit: 50, Window: 50 * time.Second, Algorithm: client.TokenBucket}
		if d, err := c.CheckN(context.Background(), "j", 50, p); err != nil || !d.Allowed {
			t.Fatalf("CheckN(50) = %+v, %v", d, err)
		}
		mu.Lock()
		arrivals = arrivals[:0]
		mu.Unlock()
		const waiters = 50
		var wg sync.WaitGroup
		done := make([]time.Duration, waiters)
		for i := range waiters {
			wg.Go(func() {
				if d, err := c.Wait(context.Background(), "j", p); err != nil || !d.Allowed {
					t.Errorf("waiter %d: Wait = %+v, %v", i, d, err)
				}
				done[i] = time.Since(start)
			})
		}
		wg.Wait()
		// The first retries: every waiter's second check, after its
		// first denial of retryAfter 1 s.
		mu.Lock()
		defer mu.Unlock()
		sort.Slice(arrivals, func(i, j int) bool { return arrivals[i] < arrivals[j] })
		var firstRetries []time.Duration
		for _, a := range arrivals {
			if a > 0 && a <= 1200*time.Millisecond {
				firstRetries = append(firstRetries, a)
			}
		}
		distinct := map[time.Duration]bool{}
		for _, a := range firstRetries {
			distinct[a] = true
			if a < time.Second {
				t.Errorf("a retry at %v, before the retryAfter of 1s", a)
			}
		}
		if len(firstRetries) != waiters || len(distinct) < waiters*8/10 {
			t.Errorf("%d first retries at %d distinct instants in [1s, 1.2s], want %d at at least %d", len(firstRetries), len(distinct), waiters, waiters*8/10)
		}
		sort.Slice(done, func(i, j int) bool { return done[i] < done[j] })
		if done[0] < time.Second || done[waiters-1] > 70*time.Second {
			t.Errorf("waiters admitted from %v to %v, want from 1s, within the 50 s the tokens take", done[0], done[waiters-1])
		}
	})
}

// TestWaitDeadlineSynctest: a deadline sooner than the retry returns at
// once, without sleeping; one later waits and is admitted.
func TestWaitDeadlineSynctest(t *testing.T) {
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		c, err := client.New("http://node.invalid", client.WithHTTPClient(&http.Client{Transport: handlerTransport{h}}), client.WithTimeout(0))
		if err != nil {
			t.Fatal(err)
		}
		p := client.Limit{Limit: 1, Window: 10 * time.Second, Algorithm: client.TokenBucket}
		if _, err := c.Check(context.Background(), "d", p); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := c.Wait(ctx, "d", p); !errors.Is(err, client.ErrWaitDeadline) || time.Since(start) != 0 {
			t.Errorf("Wait with 9 s left for a 10 s retry: %v after %v, want ErrWaitDeadline at once", err, time.Since(start))
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 11*time.Second)
		defer cancel2()
		d, err := c.Wait(ctx2, "d", p)
		if took := time.Since(start); err != nil || !d.Allowed || took < 10*time.Second || took > 11*time.Second {
			t.Errorf("Wait with 11 s left: %+v, %v after %v; want admitted after 10 s to 11 s", d, err, took)
		}
	})
}
