package decision

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
	"google.golang.org/protobuf/types/known/durationpb"
)

// fakeGuard admits the keys in allow, with a store limit of storeLimit,
// and records what Done was told.
type fakeGuard struct {
	allow      map[string]bool
	storeLimit uint64
	done       []region.Result
	retry      time.Duration   // what Done returns
	read       map[string]bool // the keys NeedsRead asks to read
	learned    map[string]region.Result
}

func (f *fakeGuard) NeedsRead(now time.Time, key string, l window.Limit) bool { return f.read[key] }

func (f *fakeGuard) Share(time.Time, string, window.Limit) float64 { return 0.5 }

func (f *fakeGuard) Refused(time.Time, string, window.Limit, uint64) {}

func (f *fakeGuard) Learn(now time.Time, key string, l window.Limit, res *region.Result) {
	if f.learned == nil {
		f.learned = map[string]region.Result{}
	}
	f.learned[key] = *res
}

func (f *fakeGuard) Admit(now time.Time, key string, l window.Limit, hits uint64) (guard.Ticket, bool, time.Duration) {
	return guard.Ticket{StoreLimit: f.storeLimit}, f.allow[key], 70 * time.Millisecond
}

func (f *fakeGuard) Done(t *guard.Ticket, res *region.Result) time.Duration {
	f.done = append(f.done, *res)
	if res.Allowed {
		return 0
	}
	return f.retry
}

// decideInline decides one hit of each key under the inline limit lim
// at now, in one call, and returns the outcomes.
func decideInline(t *testing.T, d *Decider, lim *ratelimitv1.Limit, now time.Time, keys ...string) []Outcome {
	t.Helper()
	reqs := make([]Request, len(keys))
	for i, k := range keys {
		r, err := d.Validate(Input{NS: Inline, Key: k, Limit: lim, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = r
	}
	out := make([]Outcome, len(reqs))
	if err := d.Decide(context.Background(), reqs, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// guardedDecider returns a Decider in region eu on the in-memory store,
// with g as its guard.
func guardedDecider(t *testing.T, g burstGuard) *Decider {
	t.Helper()
	d, err := New(Config{Store: region.NewMemory(region.MemoryConfig{Region: "eu"}), Region: "eu", MaxKeyBytes: 100, MaxHits: 100, MaxWindow: time.Hour,
		MaxLogLimit: 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.guard = g
	return d
}

func TestGuardBeforeTheStore(t *testing.T) {
	g := &fakeGuard{allow: map[string]bool{"i:ok": true}, storeLimit: 2}
	d := guardedDecider(t, g)
	lim := &ratelimitv1.Limit{Limit: 10, Window: durationpb.New(time.Minute)}
	now := time.Unix(1_700_000_000, 0)
	out := decideInline(t, d, lim, now, "ok", "no", "ok", "ok")
	// "ok" is decided against the guard's store limit of 2: two admitted,
	// the third denied by the store; "no" is denied by the guard.
	want := []struct {
		allowed, guardDenied bool
		retry                time.Duration
	}{{true, false, 0}, {false, true, 70 * time.Millisecond}, {true, false, 0}, {false, false, -1}}
	for i, w := range want {
		o := out[i]
		if o.Allowed != w.allowed || o.GuardDenied != w.guardDenied || (w.retry >= 0 && o.RetryAfter != w.retry) {
			t.Errorf("out[%d] = allowed %v, guard denied %v, retry %v; want %v, %v, %v", i, o.Allowed, o.GuardDenied, o.RetryAfter, w.allowed, w.guardDenied, w.retry)
		}
		if got, want := o.Limit, uint64(10); got != want {
			t.Errorf("out[%d].Limit = %d, want %d (the caller's limit, not the store's)", i, got, want)
		}
	}
	if got, want := len(g.done), 3; got != want {
		t.Errorf("Done called %d times, want %d (once per request the store decided)", got, want)
	}
	for o, want := range map[outcome]float64{outcomeAllowed: 2, outcomeDenied: 1, outcomeGuardDenied: 1} {
		if got := testutil.ToFloat64(d.decisions.WithLabelValues(LabelInline, o.String())); got != want {
			t.Errorf("rlcluster_decisions_total{outcome=%q} = %v, want %v", o, got, want)
		}
	}
	// A Peek is never guarded.
	r, _ := d.Validate(Input{NS: Inline, Key: "no", Limit: lim, Now: now, Peek: true})
	if err := d.Decide(context.Background(), []Request{r}, out[:1]); err != nil || out[0].GuardDenied {
		t.Errorf("Peek: err %v, guard denied %v; want nil, false", err, out[0].GuardDenied)
	}
}

// A store's denial that the guard claims as its own (a probe decided
// against a limit lowered to this region's share) is answered as a guard
// denial, with the guard's retry-after, not the store's against the
// lowered limit.
func TestGuardClaimsStoreDenial(t *testing.T) {
	g := &fakeGuard{allow: map[string]bool{"i:ok": true}, storeLimit: 1, retry: 40 * time.Millisecond}
	d := guardedDecider(t, g)
	lim := &ratelimitv1.Limit{Limit: 10, Window: durationpb.New(time.Hour)}
	now := time.Unix(1_700_000_000, 0)
	out := make([]Outcome, 1)
	for i, want := range []struct {
		allowed, guardDenied bool
		retry                time.Duration
	}{{true, false, 0}, {false, true, 40 * time.Millisecond}} {
		r, err := d.Validate(Input{NS: Inline, Key: "ok", Limit: lim, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Decide(context.Background(), []Request{r}, out); err != nil {
			t.Fatal(err)
		}
		if o := out[0]; o.Allowed != want.allowed || o.GuardDenied != want.guardDenied || o.RetryAfter != want.retry || o.Limit != 10 {
			t.Errorf("request %d = allowed %v, guard denied %v, retry %v, limit %d; want %v, %v, %v, 10", i, o.Allowed, o.GuardDenied, o.RetryAfter, o.Limit, want.allowed, want.guardDenied, want.retry)
		}
	}
	for o, want := range map[outcome]float64{outcomeAllowed: 1, outcomeDenied: 0, outcomeGuardDenied: 1} {
		if got := testutil.ToFloat64(d.decisions.WithLabelValues(LabelInline, o.String())); got != want {
			t.Errorf("rlcluster_decisions_total{outcome=%q} = %v, want %v", o, got, want)
		}
	}
}

// A key the guard has no store result for at this node is read first (a
// Peek, which consumes nothing), and the guard told the counts before it
// admits the request.
func TestGuardReadsFirst(t *testing.T) {
	g := &fakeGuard{allow: map[string]bool{"i:new": true, "i:old": true}, storeLimit: 10, read: map[string]bool{"i:new": true}}
	d := guardedDecider(t, g)
	lim := &ratelimitv1.Limit{Limit: 10, Window: durationpb.New(time.Minute)}
	now := time.Unix(1_700_000_000, 0)
	out := decideInline(t, d, lim, now, "new", "new", "old")
	if _, ok := g.learned["i:old"]; ok || len(g.learned) != 1 {
		t.Fatalf("learned %v, want only i:new", g.learned)
	}
	if got := g.learned["i:new"]; got.Estimate != 0 || got.Limit != 10 {
		t.Errorf("the read of i:new: estimate %d against %d, want 0 against 10 (read before the request)", got.Estimate, got.Limit)
	}
	// The read consumed nothing: the two requests of "new" are its only
	// hits (a Peek answers what would remain after its own hit).
	peek, _ := d.Validate(Input{NS: Inline, Key: "new", Limit: lim, Now: now, Peek: true})
	if err := d.Decide(context.Background(), []Request{peek}, out[:1]); err != nil {
		t.Fatal(err)
	}
	if got := out[0].Remaining; got != 7 {
		t.Errorf("remaining of new after two hits and a read: %d, want 7", got)
	}
}
