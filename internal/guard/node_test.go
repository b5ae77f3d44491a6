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
