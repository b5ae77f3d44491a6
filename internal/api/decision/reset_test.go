package decision_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// countingMemory is an in-memory store that counts the requests it is
// asked to decide.
type countingMemory struct {
	*region.Memory
	n atomic.Int64
}

func (s *countingMemory) Check(ctx context.Context, reqs []region.Request, res []region.Result) error {
	s.n.Add(int64(len(reqs)))
	return s.Memory.Check(ctx, reqs, res)
}

// TestResetReadsSkipped: on a store that holds no reset instant, a
// decision reads none, and counts as a read that found none: until the
// TTL has passed it does not look again, even once another node's reset
// is in the store; after it, it reads the reset and decides on the
// counts after it.
func TestResetReadsSkipped(t *testing.T) {
	store := &countingMemory{Memory: region.NewMemory(region.MemoryConfig{Region: "eu"})}
	newDecider := func() *decision.Decider {
		d, err := decision.New(decision.Config{
			Store: store, Region: "eu",
			MaxKeyBytes: 1024, MaxHits: 1 << 20, MaxWindow: window.MaxWindow, MaxLogLimit: 1000,
			ResetTTL: time.Second,
			Logger:   slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d, other := newDecider(), newDecider()
	t0 := time.Unix(1_700_000_000, 0)
	input := func(at time.Duration) decision.Input {
		return decision.Input{NS: decision.Inline, Key: "alice", Limit: &ratelimitv1.Limit{Limit: 1, Window: durationpb.New(time.Minute)}, Now: t0.Add(at)}
	}
	decide := func(at time.Duration) (allowed bool, requests int64) {
		t.Helper()
		req, err := d.Validate(input(at))
		if err != nil {
			t.Fatal(err)
		}
		var out [1]decision.Outcome
		n := store.n.Load()
		if err := d.Decide(context.Background(), []decision.Request{req}, out[:]); err != nil {
			t.Fatal(err)
		}
		return out[0].Allowed, store.n.Load() - n
	}
	if allowed, n := decide(0); !allowed || n != 1 {
		t.Fatalf("first hit: allowed %v in %d store requests, want true in 1 (no reset read)", allowed, n)
	}
	if _, _, err := other.Reset(context.Background(), input(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if allowed, n := decide(500 * time.Millisecond); allowed || n != 1 {
		t.Errorf("within the TTL: allowed %v in %d store requests, want false in 1 (the reset not read yet)", allowed, n)
	}
	if allowed, n := decide(1500 * time.Millisecond); !allowed || n < 3 {
		t.Errorf("after the TTL: allowed %v in %d store requests, want true after reading the reset (3 or more)", allowed, n)
	}
}
