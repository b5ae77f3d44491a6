package gossip

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// A Node is the other regions of the decision path. The check sits in a
// test, so that the package does not import the API's.
var _ decision.Pool = (*Node)(nil)

// resetTTL is how long the test's deciders trust a reset instant they read.
const resetTTL = 50 * time.Millisecond

// deciders returns one decision.Decider per region of s, on the region's
// store, replicating through the region's node, as rlnode wires them.
func (s *sim) deciders(t *testing.T) map[string]*decision.Decider {
	t.Helper()
	out := map[string]*decision.Decider{}
	for name, n := range s.nodes {
		r := n.Region()
		d, err := decision.New(decision.Config{
			Store: s.stores[r], Region: r, Pool: n,
			MaxKeyBytes: 1024, MaxHits: 1 << 20, MaxWindow: window.MaxWindow, MaxLogLimit: 100,
			ResetTTL: resetTTL,
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(),
		}, nil)
		if err != nil {
			t.Fatalf("decider of %s: %v", name, err)
		}
		out[r] = d
	}
	return out
}

// resetLimit is 5 per minute, a fixed window, global: every region's hits
// count.
var resetLimit = &ratelimitv1.Limit{Limit: 5, Window: durationpb.New(time.Minute), Algorithm: ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW}

func resetInput(key string, peek bool) decision.Input {
	return decision.Input{NS: decision.Inline, Key: key, Limit: resetLimit, Now: time.Now(), Peek: peek}
}

// decide checks (or peeks at) key through d and returns the outcome.
func decide(t *testing.T, d *decision.Decider, key string, peek bool) decision.Outcome {
	t.Helper()
	req, err := d.Validate(resetInput(key, peek))
	if err != nil {
		t.Fatal(err)
	}
	var out [1]decision.Outcome
	if err := d.Decide(context.Background(), []decision.Request{req}, out[:]); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// TestSimResetRacesACount: three regions over the in-memory network. eu
// and us spend 4 of a global limit of 5; then eu resets the key at the
// same instant as us admits one more hit, before us can know of the
// reset. After the replication delay every region agrees that nothing
// counts (us's racing hit was before the reset instant everywhere), a
// late copy of us's old total undoes nothing, a later reset from ap
// wins by max, and hits after the reset count everywhere.
func TestSimResetRacesACount(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const oneWay = 30 * time.Millisecond
		s := newSim(t, threeRegions, 1, oneWay)
		defer s.close()
		ds := s.deciders(t)
		const key = "carol"
		for _, r := range []string{"eu", "eu", "us", "us"} {
			if o := decide(t, ds[r], key, false); !o.Allowed {
				t.Fatalf("hit in %s denied: %+v", r, o.Result.Decision)
			}
		}
		time.Sleep(time.Second) // replication: every region sees 4
		for _, r := range threeRegions {
			if o := decide(t, ds[r], key, true); o.Estimate != 4 {
				t.Fatalf("%s before the reset: estimate %d, want 4 (spent in eu and us)", r, o.Estimate)
			}
		}

		// The race: eu resets while us, not yet knowing, admits a hit.
		_, at, err := ds["eu"].Reset(context.Background(), resetInput(key, false))
		if err != nil {
			t.Fatal(err)
		}
		if o := decide(t, ds["us"], key, false); !o.Allowed || o.Remaining != 0 {
			t.Fatalf("us's racing hit: allowed %v remaining %d, want the 5th hit admitted on the old counts", o.Allowed, o.Remaining)
		}
		oldUS := s.count("us", "us", "i:"+key, time.Minute, window.Bucket(window.Ms(time.Now()), time.Minute))

		// After the replication delay and the deciders' TTL, every
		// region decides on the counts after the reset: none.
		time.Sleep(time.Second)
		for _, r := range threeRegions {
			if o := decide(t, ds[r], key, true); o.Estimate != 0 {
				t.Errorf("%s after the reset: estimate %d, want 0 (no hit since the reset at %v)", r, o.Estimate, at)
			}
			rw, rb := decision.ResetBucket(at.UnixMilli())
			v, err := s.stores[r].Vectors(context.Background(), []region.BucketRef{{Key: decision.ResetKey("i:" + key), Window: rw, Bucket: rb}})
			if err != nil {
				t.Fatal(err)
			}
			if len(v[0]) != 1 || v[0][0].Region != "eu" || int64(v[0][0].Count) != at.UnixMilli() {
				t.Errorf("%s holds the reset instants %+v, want eu's %d", r, v[0], at.UnixMilli())
			}
		}

		// A late copy of us's old-generation total (a delayed or replayed
		// message, even one larger than the truth) undoes nothing.
		late := region.Total{Key: "i:" + key, Window: time.Minute, Bucket: window.Bucket(window.Ms(time.Now()), time.Minute), Region: "us", Count: oldUS + 3}
		for _, r := range []string{"eu", "ap"} {
			if err := s.stores[r].Merge(context.Background(), []region.Total{late}); err != nil {
				t.Fatal(err)
			}
			if o := decide(t, ds[r], key, true); o.Estimate != 0 {
				t.Errorf("%s after a late old total: estimate %d, want 0", r, o.Estimate)
			}
		}

		// Hits after the reset count everywhere.
		for _, r := range []string{"us", "ap"} {
			if o := decide(t, ds[r], key, false); !o.Allowed {
				t.Fatalf("hit in %s after the reset denied", r)
			}
		}
		time.Sleep(time.Second)
		for _, r := range threeRegions {
			if o := decide(t, ds[r], key, true); o.Estimate != 2 {
				t.Errorf("%s: estimate %d, want 2 (two hits since the reset)", r, o.Estimate)
			}
		}

		// A later reset from ap clears those too; eu's older instant does
		// not win back.
		time.Sleep(10 * time.Millisecond)
		if _, _, err := ds["ap"].Reset(context.Background(), resetInput(key, false)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		for _, r := range threeRegions {
			if o := decide(t, ds[r], key, true); o.Estimate != 0 {
				t.Errorf("%s after ap's reset: estimate %d, want 0", r, o.Estimate)
			}
		}
	})
}
