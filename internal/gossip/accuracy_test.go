package gossip

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

func TestRuleLabel(t *testing.T) {
	for _, tt := range []struct{ key, want string }{
		{"i:user-42", AccuracyInline},
		{"r:login:user-42", "login"},
		{"r:login:a:b", "login"},
		{"f:api:10.0.0.1", "api"},
		{"e:edge%2Fproxy/remote_address=1.2.3.4", "edge/proxy"},
		{"e:web/path=%2Fa", "web"},
		{"r:nokey", AccuracyUnknown},
		{"r::k", AccuracyUnknown},
		{"e:nodescriptor", AccuracyUnknown},
		{"x:y", AccuracyUnknown},
		{"plain", AccuracyUnknown},
	} {
		if got := RuleLabel(tt.key); got != tt.want {
			t.Errorf("RuleLabel(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

// accNode is one node of a two-region cluster with its accuracy observer.
type accNode struct {
	tn  *tnode
	acc *Accuracy
}

func newAccuracyCluster(t *testing.T, cfg AccuracyConfig) (eu, us accNode) {
	t.Helper()
	fn := NewFaultNetwork(1)
	wan(fn, []string{"eu", "us"}, 20*time.Millisecond)
	h := newHarnessStores(t, fn, []string{"eu", "us"}, 1, func(_ *testing.T, r string) region.Store {
		return region.NewMemory(region.MemoryConfig{Region: r})
	})
	mk := func(tn *tnode) accNode {
		acc, err := NewAccuracy(tn.node, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return accNode{tn: tn, acc: acc}
	}
	return mk(h.nodes[0]), mk(h.nodes[1])
}

// decide decides hits on key through n as the decision path does (Check
// on the store, then Decided unless a Peek, and Dirty for a counter
// algorithm) and fails unless every hit is admitted. Decided is told of
// every algorithm, so that the node's own filter is tested.
func (n accNode) decide(t *testing.T, key string, lim window.Limit, hits int, peek bool) {
	t.Helper()
	for range hits {
		reqs := []region.Request{{Key: key, Limit: lim, Hits: 1, Now: n.tn.now(), Peek: peek}}
		res := make([]region.Result, 1)
		if err := n.tn.store.Check(context.Background(), reqs, res); err != nil {
			t.Fatal(err)
		}
		if !res[0].Allowed {
			t.Fatalf("%s: hit on %s denied", n.tn.name, key)
		}
		if !peek {
			n.tn.node.Decided(key, lim, res[0].Bucket)
		}
		if !peek && lim.Algorithm.Counted() {
			n.tn.node.Dirty(region.Total{Key: key, Window: lim.Window, Bucket: res[0].Bucket, Count: res[0].Local})
		}
	}
}

// ratioSeries is the exposition of rule's series of the admitted ratio
// histogram after one observation, v.
func ratioSeries(rule string, v float64) string {
	var b strings.Builder
	for _, le := range []float64{0.5, 0.8, 0.9, 0.95, 1, 1.02, 1.05, 1.1, 1.25, 1.5, 2, math.Inf(1)} {
		n := 0
		if v <= le {
			n = 1
		}
		fmt.Fprintf(&b, "rlcluster_accuracy_admitted_ratio_bucket{rule=%q,le=%q} %d\n", rule, strconv.FormatFloat(le, 'g', -1, 64), n)
	}
	fmt.Fprintf(&b, "rlcluster_accuracy_admitted_ratio_sum{rule=%q} %g\n", rule, v)
	fmt.Fprintf(&b, "rlcluster_accuracy_admitted_ratio_count{rule=%q} 1\n", rule)
	return b.String()
}

// TestAccuracyObservesReconciledBucket: over a real two-region cluster,
// each node observes a closed bucket's admitted/limit with the other
// region's count included, under the rule named in the key; peeks and
// region-local algorithms are not observed.
func TestAccuracyObservesReconciledBucket(t *testing.T) {
	eu, us := newAccuracyCluster(t, AccuracyConfig{Delay: 500 * time.Millisecond, Tick: 20 * time.Millisecond})
	w := 2 * time.Second
	login := window.Limit{Limit: 10, Window: w, Algorithm: window.SlidingWindow}
	inline := window.Limit{Limit: 8, Window: w, Algorithm: window.FixedWindow}
	gcra := window.Limit{Limit: 8, Window: w, Algorithm: window.TokenBucket}

	b := waitBucketStart(t, w)
	eu.decide(t, "r:login:alice", login, 6, false)
	us.decide(t, "r:login:alice", login, 3, false)
	eu.decide(t, "i:bob", inline, 3, false)
	us.decide(t, "i:bob", inline, 3, false)
	eu.decide(t, "r:peeked:carol", login, 2, true)
	us.decide(t, "r:gcra:dave", gcra, 2, false)
	if got := window.Bucket(time.Now().UnixMilli(), w); got != b {
		t.Fatalf("the hits spilled into bucket %d, want all in %d", got, b)
	}

	// Each region observes the bucket once, with both regions' counts:
	// login 9/10, inline 6/8.
	want := `
# HELP rlcluster_accuracy_admitted_ratio Hits admitted in a closed bucket, summed over every region once reconciled, over the limit, by rule (a rule name, "inline", an Envoy domain or "other"); one observation per bucket of each key this node decided.
# TYPE rlcluster_accuracy_admitted_ratio histogram
` + ratioSeries("inline", 0.75) + ratioSeries("login", 0.9)
	for _, n := range []accNode{eu, us} {
		waitFor(t, 3*w, n.tn.name+" observed two buckets", func() bool {
			return testutil.CollectAndCount(n.acc.ratio) == 2 && histCount(t, n.acc.ratio, "login")+histCount(t, n.acc.ratio, "inline") == 2
		})
		if err := testutil.CollectAndCompare(n.acc.ratio, strings.NewReader(want)); err != nil {
			t.Errorf("%s: %v", n.tn.name, err)
		}
		if got := testutil.ToFloat64(n.acc.unobserved.WithLabelValues("gone")); got != 0 {
			t.Errorf("%s: %v buckets gone before they were observed, want 0", n.tn.name, got)
		}
	}
	// Observed once: nothing more once the next bucket (without hits) has
	// closed and been read too.
	next := b + 1
	waitFor(t, 3*w, "the next bucket is due", func() bool {
		return eu.tn.now().After(bucketEndOf(w, next).Add(time.Second))
	})
	for _, n := range []accNode{eu, us} {
		if err := testutil.CollectAndCompare(n.acc.ratio, strings.NewReader(want)); err != nil {
			t.Errorf("%s, a bucket later: %v", n.tn.name, err)
		}
		n.acc.mu.Lock()
		pending := len(n.acc.pending)
		n.acc.mu.Unlock()
		if pending != 0 {
			t.Errorf("%s holds %d pending buckets after observing, want 0", n.tn.name, pending)
		}
	}
}

// histCount returns the observation count of the histogram's rule series.
func histCount(t *testing.T, h *prometheus.HistogramVec, rule string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(rule).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestAccuracyWatch: a watched key's closed windows are kept with each
// region's reconciled total, followed by the open bucket; an unknown key
// is refused until it is decided here.
func TestAccuracyWatch(t *testing.T) {
	eu, us := newAccuracyCluster(t, AccuracyConfig{Delay: 300 * time.Millisecond, Tick: 20 * time.Millisecond})
	w := time.Second
	lim := window.Limit{Limit: 10, Window: w, Algorithm: window.SlidingWindow}
	key := "r:login:alice"
	if _, err := eu.acc.Watch(context.Background(), key); !errors.Is(err, ErrNotDecided) {
		t.Fatalf("Watch of an undecided key: err %v, want ErrNotDecided", err)
	}
	b := waitBucketStart(t, w)
	eu.decide(t, key, lim, 4, false)
	us.decide(t, key, lim, 2, false)
	// The window closes, is reconciled and read Delay later; the next
	// bucket holds nothing.
	var kw KeyWindows
	waitFor(t, 4*w, "bucket b in eu's history", func() bool {
		var err error
		if kw, err = eu.acc.Watch(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		for _, wc := range kw.Windows {
			if wc.Bucket == b && wc.Closed {
				return true
			}
		}
		return false
	})
	if kw.Limit != 10 || kw.Window != w || kw.Label != "login" {
		t.Errorf("Watch = limit %d window %v label %q, want 10, %v, login", kw.Limit, kw.Window, kw.Label, w)
	}
	for i, wc := range kw.Windows {
		if i > 0 && wc.Bucket != kw.Windows[i-1].Bucket+1 {
			t.Errorf("windows %d and %d are not consecutive: %+v", kw.Windows[i-1].Bucket, wc.Bucket, kw.Windows)
		}
		if wc.Bucket != b {
			continue
		}
		got := map[string]uint64{}
		for _, tt := range wc.Regions {
			got[tt.Region] = tt.Count
		}
		if got["eu"] != 4 || got["us"] != 2 || len(got) != 2 || wc.Total != 6 {
			t.Errorf("window %d: regions %v total %d, want eu=4 us=2 total 6", b, got, wc.Total)
		}
	}
	last := kw.Windows[len(kw.Windows)-1]
	if cur := window.Bucket(eu.tn.now().UnixMilli(), w); last.Closed || last.Bucket < cur-1 {
		t.Errorf("last window %d closed=%v, want the open bucket (%d)", last.Bucket, last.Closed, cur)
	}
}
