package decision_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// peekCounter is a store that counts the requests it is asked to decide:
// all of them, the reads of the reset marker and those of each key's
// reset instant. It restores (for Reset) into the store it wraps, and
// hides the in-memory store's NoResets, so that a decision on it reads
// resets as on Redis.
type peekCounter struct {
	region.Store
	mu      sync.Mutex
	all     int
	marks   int
	instant map[string]int // by reset key
}

func newPeekCounter(s region.Store) *peekCounter {
	return &peekCounter{Store: s, instant: map[string]int{}}
}

func (s *peekCounter) Check(ctx context.Context, reqs []region.Request, res []region.Result) error {
	s.mu.Lock()
	for _, q := range reqs {
		s.all++
		switch {
		case q.Key == region.ResetMarkKey:
			s.marks++
		case strings.HasPrefix(q.Key, region.ResetKeyPrefix):
			s.instant[q.Key]++
		}
	}
	s.mu.Unlock()
	return s.Store.Check(ctx, reqs, res)
}

func (s *peekCounter) Restore(ctx context.Context, totals []region.Total) error {
	return s.Store.(interface {
		Restore(context.Context, []region.Total) error
	}).Restore(ctx, totals)
}

// counts returns the requests, marker reads and instant reads so far.
func (s *peekCounter) counts() (all, marks, instants int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.instant {
		instants += n
	}
	return s.all, s.marks, instants
}

func (s *peekCounter) instantReads(resetKey string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.instant[resetKey]
}

func markDecider(t *testing.T, store region.Store, reg string, ttl time.Duration) *decision.Decider {
	t.Helper()
	d, err := decision.New(decision.Config{
		Store: store, Region: reg,
		MaxKeyBytes: 1024, MaxHits: 1 << 20, MaxWindow: window.MaxWindow, MaxLogLimit: 1000,
		ResetTTL: ttl,
		Logger:   slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// markInput is a hit on key, 1 a minute, at now.
func markInput(key string, now time.Time) decision.Input {
	return decision.Input{NS: decision.Inline, Key: key, Now: now,
		Limit: &ratelimitv1.Limit{Limit: 1, Window: durationpb.New(time.Minute), Algorithm: ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW}}
}

func markDecide(t *testing.T, d *decision.Decider, key string, now time.Time) decision.Outcome {
	t.Helper()
	req, err := d.Validate(markInput(key, now))
	if err != nil {
		t.Fatal(err)
	}
	var out [1]decision.Outcome
	if err := d.Decide(context.Background(), []decision.Request{req}, out[:]); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// TestResetMarkSkipsLooks: decisions over many keys, each seen less often
// than every ResetTTL, read no key's reset instant while the store's
// reset marker stays as the node last read it (it reads the marker about
// every half TTL, not per key): one store request per decision. A reset
// changes the marker, after which each key reads its instant once, and
// then none again; the reset applies to its key.
func TestResetMarkSkipsLooks(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func(t *testing.T) region.Store
	}{
		{"memory", func(t *testing.T) region.Store { return region.NewMemory(region.MemoryConfig{Region: "eu"}) }},
		{"redis", func(t *testing.T) region.Store {
			return storetest.Open(t, region.Config{Region: "eu", Redis: region.RedisConfig{URL: redistest.Start(t).URL()},
				Failover: region.FailoverConfig{Timeout: 5 * time.Second}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				ttl  = 500 * time.Millisecond
				keys = 1000
				step = time.Millisecond // a key comes back every second
			)
			store := newPeekCounter(tc.new(t))
			d := markDecider(t, store, "eu", ttl)
			now := time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)
			// run makes n decisions, one per step, over the keys in turn
			// from key i, and returns what they asked of the store.
			i := 0
			run := func(n int) (all, marks, instants int) {
				a0, m0, i0 := store.counts()
				for range n {
					markDecide(t, d, fmt.Sprintf("k%d", i%keys), now)
					i++
					now = now.Add(step)
				}
				a, m, in := store.counts()
				return a - a0, m - m0, in - i0
			}
			if _, _, in := run(keys); in != 2 {
				t.Fatalf("first round: %d reads of reset instants, want 2 (the first decision's, before the marker was known)", in)
			}
			all, marks, instants := run(3 * keys)
			if instants != 0 || marks > 2*(3*keys*int(step)/int(ttl/2)+1) || all != 3*keys+marks {
				t.Fatalf("three more rounds: %d requests, %d reads of the marker, %d of reset instants; want %d decisions and 0 instants, the marker at most every half TTL",
					all, marks, instants, 3*keys)
			}
			t.Logf("%.4f store requests per decision with the marker known", float64(all)/(3*keys))

			// A reset of k7: the marker changes, every key reads its
			// instant once, then none again; k7 counts afresh.
			if o := markDecide(t, d, "k7", now); o.Allowed {
				t.Fatal("k7 allowed before the reset, want denied (1 a minute, spent)")
			}
			if _, _, err := d.Reset(context.Background(), markInput("k7", now)); err != nil {
				t.Fatal(err)
			}
			now = now.Add(step)
			if o := markDecide(t, d, "k7", now); !o.Allowed {
				t.Fatal("k7 denied after its reset, want allowed")
			}
			if _, _, in := run(2 * keys); in < keys-1 || in > 2*keys {
				t.Errorf("two rounds after the reset: %d reads of reset instants, want every key's once", in)
			}
			if all, _, in := run(keys); in != 0 || all > keys+10 {
				t.Errorf("the round after: %d requests, %d reads of reset instants, want %d and none", all, in, keys)
			}
		})
	}
}

// TestResetMarkReachesOtherRegion: a reset made in one region reaches a
// decision in another within the TTL after its total is merged there (as
// replication merges it), for a key that the other region's node read
// the instant of before and trusts by the marker since; even when the
// merged reset is older than one the other region made itself since
// (replication need not bring resets in the order they were made).
func TestResetMarkReachesOtherRegion(t *testing.T) {
	const (
		ttl  = 50 * time.Millisecond
		keys = 100
		step = time.Millisecond // a key comes back every 100 ms, past the TTL
	)
	eu, us := region.NewMemory(region.MemoryConfig{Region: "eu"}), region.NewMemory(region.MemoryConfig{Region: "us"})
	usStore := newPeekCounter(us)
	dEU, dUS := markDecider(t, eu, "eu", ttl), markDecider(t, usStore, "us", ttl)
	now := time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)
	const carol = "k3"
	carolReset := decision.ResetKey(decision.InlineKey(carol))

	// run makes n decisions in us, one per step, over the keys in turn;
	// carol is the key k3. It returns carol's outcomes.
	i := 0
	run := func(n int) (carols []decision.Outcome, at []time.Time) {
		for range n {
			k := fmt.Sprintf("k%d", i%keys)
			o := markDecide(t, dUS, k, now)
			if k == carol {
				carols, at = append(carols, o), append(at, now)
			}
			i++
			now = now.Add(step)
		}
		return carols, at
	}
	// us holds a reset already (of k50), so that its marker is not 0.
	if _, _, err := dUS.Reset(context.Background(), markInput("k50", now)); err != nil {
		t.Fatal(err)
	}
	run(10 * keys)
	reads := usStore.instantReads(carolReset)
	carols, _ := run(5 * keys)
	if n := usStore.instantReads(carolReset) - reads; n != 0 {
		t.Fatalf("us read carol's reset instant %d times while no reset came, want 0 (trusted by the marker)", n)
	}
	for _, o := range carols {
		if o.Allowed {
			t.Fatal("carol allowed in us before any reset of hers, want denied (1 a minute, spent)")
		}
	}

	// eu resets carol; then us resets another key, later. us reads its
	// new marker and carol's instant again, without eu's reset yet.
	if _, _, err := dEU.Reset(context.Background(), markInput(carol, now)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Millisecond)
	if _, _, err := dUS.Reset(context.Background(), markInput("k60", now)); err != nil {
		t.Fatal(err)
	}
	reads = usStore.instantReads(carolReset)
	carols, _ = run(5 * keys)
	if n := usStore.instantReads(carolReset) - reads; n == 0 {
		t.Fatal("us did not read carol's reset instant again after its own reset changed the marker")
	}
	for _, o := range carols {
		if o.Allowed {
			t.Fatal("carol allowed in us before eu's reset reached it, want denied (the old generation)")
		}
	}
	reads = usStore.instantReads(carolReset)
	run(5 * keys)
	if n := usStore.instantReads(carolReset) - reads; n != 0 {
		t.Fatalf("us read carol's reset instant %d times after the marker settled, want 0", n)
	}

	// eu's reset reaches us's store, as replication merges it.
	rw, rb := decision.ResetBucket(window.Ms(now))
	v, err := eu.Vectors(context.Background(), []region.BucketRef{{Key: carolReset, Window: rw, Bucket: rb}})
	if err != nil {
		t.Fatal(err)
	}
	if len(v[0]) != 1 {
		t.Fatalf("eu holds %+v for carol's reset, want its own instant", v[0])
	}
	if err := us.Merge(context.Background(), v[0]); err != nil {
		t.Fatal(err)
	}
	merged := now
	carols, at := run(5 * keys)
	// The first of carol's decisions at least the TTL after the merge
	// (or one before it) is the first on the counts after the reset.
	for j, o := range carols {
		if o.Allowed {
			break
		}
		if at[j].Sub(merged) >= ttl {
			t.Fatalf("carol denied in us %v after eu's reset was merged there, want allowed (the reset, within the TTL %v)", at[j].Sub(merged), ttl)
		}
	}
}
