package guard

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// lim90 is the limit of the Node tests' requests.
var lim90 = window.Limit{Limit: 90, Window: time.Minute}

func TestNode(t *testing.T) {
	calls := 0
	v := View{Region: "a", Alive: []string{"a", "b"}, Silent: []string{"c"}, Nodes: 1, Horizon: 80 * time.Millisecond,
		Ages: map[string]time.Duration{"b": 30 * time.Millisecond, "c": 5 * time.Second}, Unheard: map[string][]string{"b": {"c"}}}
	reg := prometheus.NewRegistry()
	n, err := NewNode(New(Config{}), func(time.Time) View { calls++; return v }, reg)
	if err != nil {
		t.Fatal(err)
	}
	// The view is read once per 10 ms, not per decision.
	for i := range 5 {
		tk, ok, _ := n.Admit(t0.Add(time.Duration(i)*time.Millisecond), "k", lim90, 1)
		if !ok {
			t.Fatalf("Admit %d denied", i)
		}
		// b and a alive of three: c, silent, is charged its share,
		// ceil(90/3) = 30. The first request, with no answer for the key
		// yet, is a probe: 1 lower, so that the store admits it only when
		// a's share of the headroom (half) holds it.
		want := uint64(60)
		if i == 0 {
			want = 59
		}
		if tk.StoreLimit != want {
			t.Errorf("request %d: StoreLimit = %d, want %d", i, tk.StoreLimit, want)
		}
		res := region.Result{Decision: window.Decision{Allowed: true, Remaining: uint64(89 - i)}}
		n.Done(&tk, &res)
	}
	if calls != 1 {
		t.Errorf("view read %d times in 5 ms, want 1", calls)
	}
	// A key new here: the node asks to read it first, and counts the read.
	if !n.NeedsRead(t0, "k2", lim90) {
		t.Error("NeedsRead = false for a new key")
	}
	n.Learn(t0, "k2", lim90, &region.Result{Decision: window.Decision{Limit: 90}})
	if n.NeedsRead(t0, "k2", lim90) {
		t.Error("NeedsRead = true after Learn")
	}
	if got := testutil.ToFloat64(n.reads); got != 1 {
		t.Errorf("rlcluster_guard_reads_total = %v, want 1", got)
	}
	n.Admit(t0.Add(10*time.Millisecond), "k", lim90, 1)
	if calls != 2 {
		t.Errorf("view read %d times after 10 ms, want 2", calls)
	}
	if got := testutil.ToFloat64(n.silent); got != 1 {
		t.Errorf("rlcluster_guard_silent_regions = %v, want 1", got)
	}
	if got := testutil.ToFloat64(n.crossed); got != 0 {
		t.Errorf("rlcluster_guard_crossed = %v, want 0 (b does not hear c either)", got)
	}
	if got := testutil.ToFloat64(n.horizon); got != 0.08 {
		t.Errorf("rlcluster_guard_horizon_seconds = %v, want 0.08", got)
	}
	if got := testutil.CollectAndCount(n.staleness); got != 2 {
		t.Errorf("staleness series = %d, want 2 (b and c)", got)
	}
	// Nothing reused: the answers carry no trails.
	if got, err := testutil.GatherAndCount(reg, "rlcluster_guard_reused_total"); err != nil || got != 1 {
		t.Errorf("rlcluster_guard_reused_total series = %d (%v), want 1", got, err)
	}
	if _, err := NewNode(New(Config{}), func(time.Time) View { return v }, reg); err == nil {
		t.Error("a second NewNode on the same registry: nil error, want the duplicate registration")
	}
}

// A crossed view (b hears c, which a does not) is isolated once per view:
// every other region is charged its share, and the gauge says so.
func TestNodeCrossed(t *testing.T) {
	v := View{Region: "a", Alive: []string{"a", "b"}, Silent: []string{"c"}, Nodes: 1, Horizon: 80 * time.Millisecond}
	n, err := NewNode(New(Config{}), func(time.Time) View { return v }, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tk, ok, _ := n.Admit(t0, "k", lim90, 1)
	if !ok {
		t.Fatal("denied")
	}
	// b and c are each charged ceil(90/3) = 30: a keeps 30.
	if tk.StoreLimit != 30 {
		t.Errorf("StoreLimit = %d, want 30 (a's own share)", tk.StoreLimit)
	}
	if got := testutil.ToFloat64(n.crossed); got != 1 {
		t.Errorf("rlcluster_guard_crossed = %v, want 1", got)
	}
}

// Each refusal is counted under its reason, and Admit and AdmitReason
// agree on it.
func TestNodeDenialReasons(t *testing.T) {
	v := View{Region: "a", Alive: []string{"a", "b"}, Silent: []string{"c"}, Nodes: 1, Horizon: 80 * time.Millisecond,
		Ages: map[string]time.Duration{"b": 30 * time.Millisecond, "c": 5 * time.Second}, Unheard: map[string][]string{"b": {"c"}}}
	n, err := NewNode(New(Config{}), func(time.Time) View { return v }, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	step := func() { now = now.Add(20 * time.Millisecond) } // past the view's 10 ms reuse
	want := map[Reason]float64{}
	denied := func(key string, l window.Limit, hits uint64, r Reason) {
		t.Helper()
		if got, _, _ := n.g.AdmitReason(now, key, l, hits, n.current(now)); got != r {
			t.Errorf("%s: AdmitReason = %v, want %v", key, got, r)
		}
		if _, ok, _ := n.Admit(now, key, l, hits); ok {
			t.Errorf("%s: Admit let the request through, want %v", key, r)
		}
		want[r]++
	}

	// c, silent, is charged ceil(90/3) = 30: 61 hits cannot fit.
	denied("charged", lim90, 61, Charged)

	// A probe decided against a limit 1 below the full one, which the
	// store denies while the full limit would have admitted it.
	tk, ok, _ := n.Admit(now, "cut", lim90, 1)
	if !ok || tk.StoreLimit != 59 {
		t.Fatalf("probe: ok %v, StoreLimit %d, want a probe against 59", ok, tk.StoreLimit)
	}
	if n.Done(&tk, &region.Result{Decision: window.Decision{Limit: 59, Estimate: 59}}) == 0 {
		t.Error("a probe's denial by its cut: Done returned no guard retry")
	}
	want[Cut]++

	// The probe takes the last hit of the headroom: a's quota for the
	// horizon is spent.
	step()
	tk, ok, _ = n.Admit(now, "share", lim90, 1)
	if !ok {
		t.Fatal("share: the probe was refused")
	}
	n.Done(&tk, &region.Result{Decision: window.Decision{Allowed: true, Limit: tk.StoreLimit, Remaining: 0, Estimate: 60}})
	denied("share", lim90, 1, Share)

	// A limit of 1 for two regions of one node each, both alive:
	// staggered, one ask per node and slot.
	one := window.Limit{Limit: 1, Window: time.Minute}
	v.Silent, v.Unheard = nil, nil
	step()
	for i := 0; ; i++ {
		if r, _, _ := n.g.AdmitReason(now, "stagger", one, 1, n.current(now)); r == Admitted {
			break
		}
		if i == 10 {
			t.Fatal("stagger: no slot in 10 s let this node ask")
		}
		now = now.Add(time.Second)
	}
	denied("stagger", one, 1, Stagger)

	// A store that lost its counts holds every decision.
	v.Restoring = time.Second
	step()
	denied("restoring", lim90, 1, Restoring)

	for _, r := range Reasons {
		if got := testutil.ToFloat64(n.denials[r]); got != want[r] {
			t.Errorf("rlcluster_guard_denials_total{reason=%q} = %v, want %v", r, got, want[r])
		}
	}
}
