package region_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

func TestCoalescingSharesRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(), "here", region.Coalesce{})
	region.SetGathering(s, 0, 32)
	const goroutines, calls = 64, 20
	l := window.Limit{Limit: 300, Window: time.Minute}
	allowed := make([]int, goroutines)
	locals := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				// One shared key, and one key per goroutine whose counts
				// must come back in order.
				reqs := []region.Request{
					{Key: "hot", Limit: l, Hits: 1, Now: t0},
					{Key: fmt.Sprintf("own%d", g), Limit: l, Hits: 1, Now: t0},
				}
				res := make([]region.Result, 2)
				if err := s.Check(context.Background(), reqs, res); err != nil {
					errs <- err
					return
				}
				if res[0].Allowed {
					allowed[g]++
				}
				locals[g] = append(locals[g], res[1].Local)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for g := range allowed {
		total += allowed[g]
		for i, n := range locals[g] {
			if n != uint64(i+1) {
				t.Fatalf("goroutine %d call %d: own key Local = %d, want %d", g, i, n, i+1)
			}
		}
	}
	if got, want := total, 300; got != want {
		t.Errorf("hot key admitted %d, want %d", got, want)
	}
	trips := s.Pipelines()
	t.Logf("%d calls of 2 requests took %d round trips (%.1f calls per trip)", goroutines*calls, trips, float64(goroutines*calls)/float64(trips))
	if trips >= goroutines*calls {
		t.Errorf("%d round trips for %d concurrent calls: nothing was shared", trips, goroutines*calls)
	}
}

func TestCoalescingDoesNotHoldALoneRequest(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(), "here", region.Coalesce{})
	region.SetGathering(s, time.Hour, 0)
	l := window.Limit{Limit: 3, Window: time.Minute}
	// With maxWait of an hour, a request that waited for company would
	// never return: sequential requests go at once, one round trip each.
	for i, want := range []bool{true, true, true, false} {
		r, err := check(t, s, region.Request{Key: "k", Limit: l, Hits: 1, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed != want {
			t.Errorf("request %d: Allowed = %v, want %v", i, r.Allowed, want)
		}
	}
	if got, want := s.Pipelines(), uint64(4); got != want {
		t.Errorf("round trips = %d, want %d", got, want)
	}
}
