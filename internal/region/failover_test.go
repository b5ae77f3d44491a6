package region_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// flaky is a primary store that works (a real Memory), fails, or hangs
// ignoring its context (as a coalesced Redis batch does) until released.
type flaky struct {
	*region.Memory
	mu      sync.Mutex
	state   string // "ok", "fail", "hang"
	release chan struct{}
	calls   int
	// mergeFails is how many Merges fail (a primary whose connections a
	// restart reset) before Merge follows state again.
	mergeFails int
	// merged is every total a Merge took: the in-memory primary keeps only
	// a key's newest two buckets, as its Vectors show.
	merged []region.Total
}

func (f *flaky) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func newFlaky(reg string) *flaky {
	return &flaky{Memory: region.NewMemory(region.MemoryConfig{Region: reg}), state: "ok", release: make(chan struct{})}
}

func (f *flaky) set(state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == "hang" && state != "hang" {
		close(f.release)
		f.release = make(chan struct{})
	}
	f.state = state
}

func (f *flaky) gate(ctx context.Context) error {
	f.mu.Lock()
	f.calls++
	st, rel := f.state, f.release
	f.mu.Unlock()
	switch st {
	case "fail":
		return fmt.Errorf("flaky: %w", region.ErrUnavailable)
	case "hang":
		select { // a hung primary that honours ctx, as a Store must
		case <-rel:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (f *flaky) Check(ctx context.Context, reqs []region.Request, res []region.Result) error {
	if err := f.gate(ctx); err != nil {
		return err
	}
	return f.Memory.Check(ctx, reqs, res)
}

func (f *flaky) Merge(ctx context.Context, totals []region.Total) error {
	f.mu.Lock()
	refuse := f.mergeFails > 0
	if refuse {
		f.mergeFails--
	}
	f.mu.Unlock()
	if refuse {
		return fmt.Errorf("flaky merge: %w", region.ErrUnavailable)
	}
	if err := f.gate(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	f.merged = append(f.merged, totals...)
	f.mu.Unlock()
	return f.Memory.Merge(ctx, totals)
}

func newFailover(t *testing.T, primary region.Store, cfg region.FailoverConfig) *region.Failover {
	t.Helper()
	if cfg.Region == "" {
		cfg.Region = "here"
	}
	fb := region.NewMemory(region.MemoryConfig{Region: region.FallbackRegion(cfg.Region)})
	f, err := region.NewFailover(primary, fb, cfg)
	if err != nil {
		t.Fatalf("NewFailover: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestNewFailoverValidates(t *testing.T) {
	p := region.NewMemory(region.MemoryConfig{Region: "here"})
	cases := []struct {
		name string
		fb   *region.Memory
		cfg  region.FailoverConfig
	}{
		{"no fallback", nil, region.FailoverConfig{Region: "here"}},
		{"no region", region.NewMemory(region.MemoryConfig{Region: "x"}), region.FailoverConfig{}},
		{"same region", region.NewMemory(region.MemoryConfig{Region: "here"}), region.FailoverConfig{Region: "here"}},
		{"bad policy", region.NewMemory(region.MemoryConfig{Region: "x"}), region.FailoverConfig{Region: "here", Policy: 9}},
		{"negative timeout", region.NewMemory(region.MemoryConfig{Region: "x"}), region.FailoverConfig{Region: "here", Timeout: -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := region.NewFailover(p, c.fb, c.cfg); err == nil {
				t.Errorf("NewFailover() error = nil, want an error")
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	for _, c := range []struct {
		in   string
		want region.Policy
		ok   bool
	}{{"", region.PolicyLocal, true}, {"local", region.PolicyLocal, true}, {"open", region.PolicyOpen, true},
		{"closed", region.PolicyClosed, true}, {"fail-open", 0, false}} {
		got, err := region.ParsePolicy(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
		if c.ok && c.in != "" && got.String() != c.in {
			t.Errorf("Policy(%q).String() = %q", c.in, got.String())
		}
	}
	if got := region.FallbackRegion(string(make([]byte, 80))); len(got) != region.MaxRegionName {
		t.Errorf("len(FallbackRegion(80 bytes)) = %d, want %d", len(got), region.MaxRegionName)
	}
}

// TestIsReplica: a replica name is exactly what FallbackRegion makes for
// a region it holds whole: not a name cut to fit, nor one whose part
// before "~" is only a prefix of the region.
func TestIsReplica(t *testing.T) {
	long := strings.Repeat("x", region.MaxReplicaOf)
	for _, c := range []struct {
		name, region string
		want         bool
	}{
		{region.FallbackRegion("eu"), "eu", true},
		{region.FallbackRegion(long), long, true},
		{region.FallbackRegion(long + "y"), long + "y", false}, // cut to fit
		{"eu~0f1e2d", "eu", true},
		{"eu~0f1e2d", "eu-west", false},
		{"eu~" + strings.Repeat("0", region.MaxRegionName-3), "eu-west", false},
		{"eu~0F1E2D", "eu", false},
		{"eu~0f1e2", "eu", false},
		{"eu~0f1e2d0", "eu", false},
		{"eu-0f1e2d", "eu", false},
		{"eu", "eu", false},
		{"~0f1e2d", "", false},
	} {
		if got := region.IsReplica(c.name, c.region); got != c.want {
			t.Errorf("IsReplica(%q, %q) = %v, want %v", c.name, c.region, got, c.want)
		}
	}
}

var lim = window.Limit{Limit: 10, Window: time.Minute}

func req(key string, now time.Time) region.Request {
	return region.Request{Key: key, Limit: lim, Hits: 1, Now: now}
}

// TestFailoverPolicies steps a Failover through fake time: a hanging
// primary costs each decision exactly the timeout; after Threshold failures
// the breaker opens and the policy decides without calling the primary;
// probes back off from ProbeMin to ProbeMax; once the primary answers, the
// next probe closes the breaker.
func TestFailoverPolicies(t *testing.T) {
	for _, c := range []struct {
		policy      region.Policy
		wantAllowed bool
		wantRetry   time.Duration
	}{
		{region.PolicyLocal, true, 0},
		{region.PolicyOpen, true, 0},
		{region.PolicyClosed, false, 2 * time.Second},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				now := time.UnixMilli(1_760_000_010_000)
				const timeout, probeMin, probeMax = 20 * time.Millisecond, 10 * time.Millisecond, 40 * time.Millisecond
				p := newFlaky("here")
				f := newFailover(t, p, region.FailoverConfig{Policy: c.policy, Timeout: timeout, Threshold: 2,
					ProbeMin: probeMin, ProbeMax: probeMax, ClosedRetryAfter: 2 * time.Second})
				if r := storetest.Check(t, f, req("k", now)); !r.Allowed || r.Remaining != 9 {
					t.Fatalf("healthy: allowed %v remaining %d, want true 9", r.Allowed, r.Remaining)
				}
				p.set("hang")
				for i := range 2 {
					start := time.Now()
					r := storetest.Check(t, f, req("k", now))
					if got := time.Since(start); got != timeout {
						t.Errorf("decision %d took %v with a hanging primary, want the timeout %v", i, got, timeout)
					}
					if r.Allowed != c.wantAllowed || r.RetryAfter != c.wantRetry {
						t.Errorf("decision %d: allowed %v retry %v, want %v %v", i, r.Allowed, r.RetryAfter, c.wantAllowed, c.wantRetry)
					}
				}
				st := f.Status()
				if st.Mode != region.ModeFallback || st.Timeouts != 2 || st.Transitions != 1 || st.ModeName() != c.policy.String() {
					t.Fatalf("Status() = %+v, want fallback after 2 timeouts, 1 transition", st)
				}
				// Only the local policy counts, apart from the region's
				// other nodes, in the fallback.
				if got, want := f.OnFallback(), c.policy == region.PolicyLocal; got != want {
					t.Errorf("OnFallback() with the breaker open = %v, want %v", got, want)
				}
				p.set("fail")
				before := p.callCount()
				for range 50 {
					storetest.Check(t, f, req("k", now))
				}
				if got := p.callCount() - before; got != 0 {
					t.Errorf("the open breaker let %d of 50 decisions reach the primary, want none", got)
				}
				if got := f.Status().FallbackDecisions; got != 52 {
					t.Errorf("FallbackDecisions = %d, want 52 (2 timeouts, 50 with the breaker open)", got)
				}
				// Probes at ProbeMin, then doubling up to ProbeMax:
				// 10ms, +20ms, +40ms, +40ms.
				for i, wait := range []time.Duration{probeMin, 2 * probeMin, probeMax, probeMax} {
					time.Sleep(wait)
					synctest.Wait()
					if got, want := p.callCount()-before, i+1; got != want {
						t.Errorf("after probe %d: %d calls to the primary, want %d", i+1, got, want)
					}
				}
				p.set("ok")
				time.Sleep(probeMax)
				synctest.Wait()
				if st := f.Status(); st.Mode != region.ModePrimary || st.Transitions != 2 || st.LastError != "" {
					t.Errorf("Status() one probe after recovery = %+v, want primary, 2 transitions and no error", st)
				}
				if f.OnFallback() {
					t.Errorf("OnFallback() after recovery = true, want false")
				}
				r := storetest.Check(t, f, req("k2", now))
				if !r.Allowed || r.LocalRegion != "" {
					t.Errorf("after recovery: allowed %v local region %q, want true and the primary's", r.Allowed, r.LocalRegion)
				}
				// Under local, the write-back made the primary count the
				// fallback's 9 admissions: with the 1 before, "k" is full.
				if r := storetest.Check(t, f, req("k", now)); r.Allowed != (c.policy != region.PolicyLocal) {
					t.Errorf("after recovery: %q allowed %v with %v, want %v", "k", r.Allowed, r.Regions, c.policy != region.PolicyLocal)
				}
			})
		})
	}
}

// TestFailoverLocalCounts checks what PolicyLocal counts and replicates:
// the fallback starts from the counts last seen in the primary, counts its
// own admissions under its own region (reported in LocalRegion, so
// replication never sends a fallback count as the primary region's), and
// writes them back to the primary on recovery.
func TestFailoverLocalCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.UnixMilli(1_760_000_010_000)
		p := newFlaky("here")
		f := newFailover(t, p, region.FailoverConfig{Threshold: 1, ProbeMin: probeMin, Now: func() time.Time { return now }})
		for range 4 {
			storetest.Check(t, f, req("k", now))
		}
		// A remote region's total reaches both stores.
		b := window.Bucket(window.Ms(now), lim.Window)
		if err := f.Merge(context.Background(), []region.Total{{Key: "k", Window: lim.Window, Bucket: b, Region: "far", Count: 3}}); err != nil {
			t.Fatal(err)
		}
		p.set("fail")
		var last uint64
		allowed := 0
		for i := range 5 {
			r := storetest.Check(t, f, req("k", now))
			if r.LocalRegion != f.FallbackRegion() {
				t.Fatalf("fallback decision %d: LocalRegion = %q, want %q", i, r.LocalRegion, f.FallbackRegion())
			}
			if r.Allowed {
				allowed++
				// Local is the fallback region's count: exactly its admissions.
				if got, want := r.Local, uint64(allowed); got != want {
					t.Errorf("fallback decision %d: Local = %d, want %d", i, got, want)
				}
			}
			if r.Local < last {
				t.Errorf("fallback decision %d: Local decreased from %d to %d", i, last, r.Local)
			}
			last = r.Local
		}
		// 4 seen in the primary + 3 from "far": 3 more fit in 10.
		if allowed != 3 {
			t.Errorf("fallback admitted %d, want 3 (the fallback must start from the primary's last counts)", allowed)
		}
		want := map[string]uint64{"here": 4, "far": 3, f.FallbackRegion(): 3}
		if got := vectorOf(t, f, "k", b); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("fallback vector = %v, want %v", got, want)
		}
		// A remote total that arrives during the outage reaches only the
		// fallback; the write-back carries it to the primary too.
		if err := f.Merge(context.Background(), []region.Total{{Key: "k", Window: lim.Window, Bucket: b, Region: "near", Count: 2}}); err != nil {
			t.Fatal(err)
		}
		want["near"] = 2
		p.set("ok")
		time.Sleep(probeMin)
		synctest.Wait()
		// Written back: the fallback region's 3, near's 2 and far's 3 again
		// (idempotent); never "here".
		if got := f.Status().WriteBacks; got != 3 {
			t.Errorf("WriteBacks one probe after recovery = %d, want 3", got)
		}
		// The primary now counts the fallback's admissions too: the key is full.
		if r := storetest.Check(t, f, req("k", now)); r.Allowed {
			t.Errorf("after recovery: allowed with %v, want denied (4 + 3 + 3 + 2 > 10)", r.Regions)
		}
		if got := vectorOf(t, p, "k", b); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("primary vector after write-back = %v, want %v", got, want)
		}
	})
}

// TestFallbackCountsOnFromItsWriteBack: the primary holds what an earlier
// outage's fallback admitted and wrote back (3, under the fallback's
// region), and the fallback no longer holds the key (evicted meanwhile).
// A decision on the primary mirrors that count into the fallback, so that
// in the next outage the fallback counts on from it: its first admission
// is its 4th, not its 1st, whose total 1 would stay below the 3 every
// other store holds and hide the hit.
func TestFallbackCountsOnFromItsWriteBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.UnixMilli(1_760_000_010_000)
		p := newFlaky("here")
		f := newFailover(t, p, region.FailoverConfig{Threshold: 1, ProbeMin: probeMin, Now: func() time.Time { return now }})
		b := window.Bucket(window.Ms(now), lim.Window)
		if err := p.Merge(context.Background(), []region.Total{{Key: "k", Window: lim.Window, Bucket: b, Region: f.FallbackRegion(), Count: 3}}); err != nil {
			t.Fatal(err)
		}
		storetest.Check(t, f, req("k", now)) // on the primary: mirrored
		p.set("fail")
		r := storetest.Check(t, f, req("k", now))
		if !r.Allowed || r.LocalRegion != f.FallbackRegion() || r.Local != 4 {
			t.Errorf("first fallback decision: allowed %v, %s's count %d; want allowed, 4 (3 written back before, and this one)", r.Allowed, r.LocalRegion, r.Local)
		}
	})
}

// TestWriteBackRetriesWithoutTraffic: a write-back the primary refuses
// on recovery (a restarted Redis resets the pool's connections) is tried
// again with the probes' backoff, not left for a next call that a node
// whose traffic stopped never makes.
func TestWriteBackRetriesWithoutTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, f, now := fallbackDecision(t, 1)
		p.mu.Lock()
		p.mergeFails = 1
		p.mu.Unlock()
		p.set("ok")
		time.Sleep(probeMin) // the probe succeeds; its write-back is refused
		synctest.Wait()
		if got := f.Status().WriteBacks; got != 0 {
			t.Fatalf("WriteBacks after a refused write-back = %d, want 0", got)
		}
		time.Sleep(probeMin) // no call comes; the retry does
		synctest.Wait()
		if got := f.Status().WriteBacks; got != 1 {
			t.Errorf("WriteBacks one backoff after the refused write-back, with no traffic = %d, want 1", got)
		}
		b := window.Bucket(window.Ms(now), time.Minute)
		want := map[string]uint64{f.FallbackRegion(): 1}
		if got := vectorOf(t, p, "k", b); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("primary vector after the retried write-back = %v, want %v", got, want)
		}
	})
}

// TestWriteBackAfterTheFallbackMovedOn: an outage that spans three buckets
// moves the fallback's key on, and the in-memory fallback keeps only a
// key's newest two buckets. The admission it made in the oldest still
// reaches the primary on recovery, which comes before that bucket may have
// expired there (one window plus 10 s after it closed): the region's store
// then agrees with the other regions, which got it by replication.
func TestWriteBackAfterTheFallbackMovedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := lim.Window.Milliseconds()
		b0 := int64(1_760_000_010_000) / w
		var nowMs atomic.Int64
		clock := func() time.Time { return time.UnixMilli(nowMs.Load()) }
		p := newFlaky("here")
		f := newFailover(t, p, region.FailoverConfig{Threshold: 1, ProbeMin: probeMin, Now: clock})
		p.set("fail")
		// One admission late in b0, one in b0+1, one early in b0+2.
		for _, at := range []int64{b0*w + w - 10_000, (b0+1)*w + w/2, (b0+2)*w + 5_000} {
			nowMs.Store(at)
			if r := storetest.Check(t, f, req("k", clock())); !r.Allowed || r.LocalRegion != f.FallbackRegion() {
				t.Fatalf("decision at %d during the outage = %+v, want allowed by the fallback", at, r)
			}
		}
		p.set("ok")
		time.Sleep(probeMin)
		synctest.Wait()
		got := map[int64]uint64{}
		p.mu.Lock()
		for _, m := range p.merged {
			if m.Key == "k" && m.Region == f.FallbackRegion() {
				got[m.Bucket-b0] = max(got[m.Bucket-b0], m.Count)
			}
		}
		p.mu.Unlock()
		if want := map[int64]uint64{0: 1, 1: 1, 2: 1}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("the fallback's admissions written back, by bucket from b0 = %v, want %v", got, want)
		}
	})
}

// TestFailoverShortFailureWritesBack: a failure too short to open the
// breaker still decides from the fallback; its admission reaches the
// primary once the primary answers again: on the next call, or a probe
// interval later when no call follows.
func TestFailoverShortFailureWritesBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		call bool // a call follows the recovery
	}{{"a call follows", true}, {"no call follows", false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, f, now := fallbackDecision(t, 3)
				if st := f.Status(); st.Mode != region.ModePrimary {
					t.Fatalf("one failure opened the breaker: %+v", st)
				}
				p.set("ok")
				if tc.call {
					storetest.Check(t, f, req("k", now)) // the primary answers: the write-back follows
				} else {
					time.Sleep(probeMin)
				}
				synctest.Wait()
				if got := f.Status().WriteBacks; got != 1 {
					t.Errorf("WriteBacks = %d, want 1", got)
				}
				b := window.Bucket(window.Ms(now), lim.Window)
				if got := vectorOf(t, p, "k", b)[f.FallbackRegion()]; got != 1 {
					t.Errorf("the fallback's admission in the primary = %d, want 1", got)
				}
			})
		})
	}
}

// probeMin is the ProbeMin of fallbackDecision's Failover.
const probeMin = 10 * time.Millisecond

// fallbackDecision returns a Failover over a flaky primary (with the
// given breaker threshold, ProbeMin probeMin and a clock stopped at now)
// after one call that the primary failed and the fallback allowed.
func fallbackDecision(t *testing.T, threshold int) (*flaky, *region.Failover, time.Time) {
	t.Helper()
	now := time.UnixMilli(1_760_000_010_000)
	p := newFlaky("here")
	f := newFailover(t, p, region.FailoverConfig{Threshold: threshold, ProbeMin: probeMin, Now: func() time.Time { return now }})
	p.set("fail")
	if r := storetest.Check(t, f, req("k", now)); r.LocalRegion != f.FallbackRegion() || !r.Allowed {
		t.Fatalf("decision on a failure = %+v, want allowed by the fallback", r)
	}
	return p, f, now
}

// vectorOf returns s's per-region counts of key's bucket b of lim.
func vectorOf(t *testing.T, s region.Store, key string, b int64) map[string]uint64 {
	t.Helper()
	return storetest.RegionCounts(t, s, key, lim.Window, b)
}

// TestFailoverCanceled: a caller's own deadline is its error, not the
// store's failure.
func TestFailoverCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFlaky("here")
		f := newFailover(t, p, region.FailoverConfig{Timeout: time.Second, Threshold: 1})
		p.set("hang")
		defer p.set("ok")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		err := f.Check(ctx, []region.Request{req("k", time.Now())}, make([]region.Result, 1))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Check() error = %v, want context.DeadlineExceeded", err)
		}
		if st := f.Status(); st.Failures != 0 || st.Mode != region.ModePrimary {
			t.Errorf("Status() = %+v, want no failure counted", st)
		}
	})
}

// TestFailoverPing: /readyz's check passes under local and open in
// fallback, fails under closed, and notices an outage without traffic.
func TestFailoverPing(t *testing.T) {
	for _, c := range []struct {
		policy region.Policy
		ready  bool
	}{{region.PolicyLocal, true}, {region.PolicyOpen, true}, {region.PolicyClosed, false}} {
		t.Run(c.policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newFlaky("here")
				f := newFailover(t, p, region.FailoverConfig{Policy: c.policy, Threshold: 2, ProbeMin: time.Hour})
				if err := f.Ping(context.Background()); err != nil {
					t.Fatalf("healthy Ping() = %v", err)
				}
				p.set("fail")
				for range 3 {
					err := f.Ping(context.Background())
					if (err == nil) != c.ready {
						t.Errorf("Ping() = %v, want ready %v", err, c.ready)
					}
				}
				if st := f.Status(); st.Mode != region.ModeFallback {
					t.Errorf("Status().Mode = %v after failed pings, want fallback", st.Mode)
				}
			})
		})
	}
}

// TestFailoverFallbackKeepsHalves: the fallback learns where the primary's
// hits fell in the bucket, not only how many there were, so that after an
// early burst it frees the capacity the primary would: a burst at 100 ms of
// a 10 s bucket has left the trailing window 200 ms into the next bucket,
// and the fallback admits the whole limit again (counted without its
// halves, the burst would count whole until the middle of that bucket).
func TestFailoverFallbackKeepsHalves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := window.Limit{Limit: 10, Window: 10 * time.Second}
		wMs := l.WindowMs()
		b := window.Bucket(1_760_000_010_000, l.Window)
		now := time.UnixMilli(b*wMs + 100)
		p := newFlaky("here")
		f := newFailover(t, p, region.FailoverConfig{Threshold: 1, Now: func() time.Time { return now }})
		for i := range 8 {
			if r := storetest.Check(t, f, region.Request{Key: "k", Limit: l, Hits: 1, Now: now}); !r.Allowed {
				t.Fatalf("primary decision %d: denied, want allowed", i)
			}
		}
		p.set("fail")
		now = time.UnixMilli((b+1)*wMs + 200)
		allowed := 0
		for i := range 12 {
			r := storetest.Check(t, f, region.Request{Key: "k", Limit: l, Hits: 1, Now: now})
			if r.LocalRegion != f.FallbackRegion() {
				t.Fatalf("decision %d: LocalRegion = %q, want the fallback's %q", i, r.LocalRegion, f.FallbackRegion())
			}
			if r.Allowed {
				allowed++
			}
		}
		if got, want := allowed, 10; got != want {
			t.Errorf("fallback admitted %d of 12 after the burst left the window, want %d", got, want)
		}
	})
}
