package decision

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// twoRegions is a Pool of two alive regions, eu (this one) and us, as the
// burst guard sees them.
type twoRegions struct{}

func (twoRegions) Regions() int                         { return 2 }
func (twoRegions) Dirty(region.Total)                   {}
func (twoRegions) Decided(string, window.Limit, int64)  {}
func (twoRegions) RemoteAges() map[string]time.Duration { return nil }
func (twoRegions) GuardView(time.Time) guard.View {
	return guard.View{Region: "eu", Alive: []string{"eu", "us"}, Nodes: 1, Horizon: 40 * time.Millisecond}
}

// stalling is a primary store that, once stalled, answers nothing until
// its caller's context ends, as a paused Redis.
type stalling struct {
	*region.Memory
	stalled atomic.Bool
}

func (s *stalling) Check(ctx context.Context, reqs []region.Request, res []region.Result) error {
	if s.stalled.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Memory.Check(ctx, reqs, res)
}

// A primary that stalls while other regions are alive: the decisions that
// wait out the store timeout (on the reset read, the guard's read of a key
// it forgot, the decision itself) until the breaker opens are made by the
// fallback, at the request's time, and the burst guard denies none of them
// far below the limit.
func TestStalledStoreUnderGuard(t *testing.T) {
	for _, forget := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			primary := &stalling{Memory: region.NewMemory(region.MemoryConfig{Region: "eu"})}
			fo, err := region.NewFailover(primary, region.NewMemory(region.MemoryConfig{Region: region.FallbackRegion("eu")}),
				region.FailoverConfig{Region: "eu", Timeout: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer fo.Close()
			g := guard.New(guard.Config{})
			d, err := New(Config{Store: fo, Region: "eu", Pool: twoRegions{}, Guard: g, MaxKeyBytes: 100, MaxHits: 100, MaxWindow: time.Hour,
				MaxLogLimit: 10, Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			lim := &ratelimitv1.Limit{Limit: 100, Window: durationpb.New(time.Hour)}
			check := func(i int) region.Result {
				o := decideInline(t, d, lim, time.Now(), "erin")[0]
				if !o.Allowed || o.GuardDenied {
					t.Errorf("forget %v: check %d = allowed %v, guard denied %v, retry %v; want allowed (%d hits of 100)",
						forget, i+1, o.Allowed, o.GuardDenied, o.RetryAfter, i+1)
				}
				return o.Result
			}
			for i := range 5 {
				check(i)
				time.Sleep(time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // past the horizon and the reset read's TTL
			if forget {
				g.Sweep(time.Now()) // the guard reads the key first
			}
			primary.stalled.Store(true)
			start := time.Now()
			for i := 5; i < 12; i++ {
				if res := check(i); res.LocalRegion != fo.FallbackRegion() {
					t.Errorf("forget %v: check %d decided in region %q, want the fallback's", forget, i+1, res.LocalRegion)
				}
			}
			if waited := time.Since(start); waited < time.Second {
				t.Errorf("forget %v: the checks waited %v for the stalled primary, want at least two store timeouts", forget, waited)
			}
		})
	}
}
