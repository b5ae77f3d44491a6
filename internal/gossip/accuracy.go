package gossip

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// AccuracyConfig configures an [Accuracy]. Zero fields mean the documented
// default.
type AccuracyConfig struct {
	// Delay is how long after a bucket closes it is read and observed:
	// long enough for every region's reconciliation to have landed (the
	// node's Grace, the one-way delay and a TCP connection's set-up), at
	// most half the bucket's window, so that the store still holds it.
	// Default 2 s.
	Delay time.Duration
	// MaxBuckets bounds the decided buckets waiting to be observed; a
	// bucket beyond it is not observed (counted as reason "full").
	// Default 100000.
	MaxBuckets int
	// MaxLabels bounds the distinct rule labels of the histogram; keys of
	// further rules are observed under "other". Default 1000.
	MaxLabels int
	// MaxWatched bounds the keys watched at once (see [Accuracy.Watch]); a
	// new one replaces the one viewed least recently. Default 16.
	MaxWatched int
	// History is how many closed windows are kept per watched key.
	// Default 60.
	History int
	// WatchTTL is how long a watched key is followed after it was last
	// viewed. Default 10 min.
	WatchTTL time.Duration
	// Tick is how often due buckets are read and staleness is sampled.
	// Default 100 ms.
	Tick time.Duration
}

func (c AccuracyConfig) withDefaults() AccuracyConfig {
	if c.Delay <= 0 {
		c.Delay = 2 * time.Second
	}
	if c.MaxBuckets <= 0 {
		c.MaxBuckets = 100000
	}
	if c.MaxLabels <= 0 {
		c.MaxLabels = 1000
	}
	if c.MaxWatched <= 0 {
		c.MaxWatched = 16
	}
	if c.History <= 0 {
		c.History = 60
	}
	if c.WatchTTL <= 0 {
		c.WatchTTL = 10 * time.Minute
	}
	if c.Tick <= 0 {
		c.Tick = 100 * time.Millisecond
	}
	return c
}

// AccuracyBuckets are the histogram's upper bounds for admitted / limit.
var AccuracyBuckets = []float64{0.5, 0.8, 0.9, 0.95, 1, 1.02, 1.05, 1.1, 1.25, 1.5, 2}

// Labels of the accuracy histogram besides rule names and Envoy domains.
const (
	AccuracyInline  = "inline"  // an inline limit ("i:" keys)
	AccuracyOther   = "other"   // a rule beyond MaxLabels
	AccuracyUnknown = "unknown" // a key in no known namespace
)

// stalenessSamples is how many per-second staleness samples are kept (5
// minutes).
const stalenessSamples = 300

// Accuracy measures how close the global count of each closed bucket came
// to its limit, for the keys this node decided.
//
// Its node ([Node.Decided]) notes, for every decision the store made of
// a counter algorithm (sliding or fixed window; not a Peek), the key's
// bucket and limit. Once the bucket has closed and Delay has passed
// (every region's reconciliation has landed), Accuracy reads the bucket's
// vector from the store and observes
//
//	ratio = (sum over regions and replicas of the bucket's totals) / limit
//
// in the histogram rlcluster_accuracy_admitted_ratio{rule}, where rule is
// the rule named in the counter key ("r:<rule>:..." and "f:<rule>:..."),
// "inline" for inline limits ("i:...") and the Envoy domain for Envoy
// descriptors ("e:<domain>/..."). Every node that decided a key in a
// bucket observes that bucket once, so a key decided in R regions is
// observed R times, with the same ratio once the regions agree.
//
// Memory is bounded by MaxBuckets pending buckets, MaxLabels label values
// and MaxWatched watched keys of History windows each. It is safe for
// concurrent use.
type Accuracy struct {
	n   *Node
	cfg AccuracyConfig

	ratio      *prometheus.HistogramVec
	unobserved *prometheus.CounterVec

	mu       sync.Mutex
	pending  map[ref]accEntry
	byDue    map[int64][]ref // Unix ms when due -> buckets
	labels   map[string]bool
	watched  map[string]*watch
	samples  ring[StalenessSample]
	lastSamp time.Time
}

// accEntry is what a pending bucket is observed against.
type accEntry struct {
	limit uint64
	label string
}

// watch is one watched key's state.
type watch struct {
	window   time.Duration
	limit    uint64
	label    string
	viewed   time.Time
	last     int64          // newest bucket read into history; 0: none
	history  []WindowCounts // oldest first, at most History
	inflight map[int64]bool // buckets being read
}

// WindowCounts is one bucket of a watched key: its per-region totals.
type WindowCounts struct {
	Bucket int64
	Start  time.Time
	// Closed is true for a bucket read after it closed plus Delay (its
	// counts are the reconciled ones); false for the open bucket and one
	// closed too recently.
	Closed bool
	// Regions are the bucket's totals by region (replicas under their own
	// names, region~id), sorted by region.
	Regions []region.Total
	// Total is their sum.
	Total uint64
}

// KeyWindows is a watched key's recent windows, as [Accuracy.Watch]
// returns them.
type KeyWindows struct {
	Key    string
	Label  string
	Window time.Duration
	Limit  uint64
	// Windows are oldest first; the last one is the open bucket.
	Windows []WindowCounts
}

// StalenessSample is the age of the newest totals merged from each
// remote region at one instant.
type StalenessSample struct {
	Time time.Time
	Ages map[string]time.Duration
}

// NewAccuracy returns the accuracy observer of n, reading n's store, which
// n tells of every decision ([Node.Decided]) from now on, and starts its
// loop, which stops when n closes. Call it right after [New], before the
// node is closed; a node has at most one.
func NewAccuracy(n *Node, cfg AccuracyConfig) (*Accuracy, error) {
	if n == nil {
		return nil, errors.New("gossip: NewAccuracy: nil node")
	}
	cfg = cfg.withDefaults()
	a := &Accuracy{
		n:       n,
		cfg:     cfg,
		pending: map[ref]accEntry{},
		byDue:   map[int64][]ref{},
		labels:  map[string]bool{},
		watched: map[string]*watch{},
		samples: newRing[StalenessSample](stalenessSamples),
	}
	a.ratio, a.unobserved = newAccuracyMetrics()
	if !n.acc.CompareAndSwap(nil, a) {
		return nil, errors.New("gossip: NewAccuracy: the node has an accuracy observer already")
	}
	n.goLoop(func() { n.every(cfg.Tick, a.tick) })
	return a, nil
}

// newAccuracyMetrics returns the accuracy histogram and the counter of
// buckets it skipped.
func newAccuracyMetrics() (*prometheus.HistogramVec, *prometheus.CounterVec) {
	ratio := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rlcluster_accuracy_admitted_ratio",
		Help:    "Hits admitted in a closed bucket, summed over every region once reconciled, over the limit, by rule (a rule name, \"inline\", an Envoy domain or \"other\"); one observation per bucket of each key this node decided.",
		Buckets: AccuracyBuckets,
	}, []string{"rule"})
	unobserved := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlcluster_accuracy_unobserved_total",
		Help: "Decided buckets not observed in rlcluster_accuracy_admitted_ratio, by reason (full: too many buckets pending; store_error; gone: the store no longer held the bucket).",
	}, []string{"reason"})
	for _, r := range []string{"full", "store_error", "gone"} {
		unobserved.WithLabelValues(r)
	}
	return ratio, unobserved
}

// Collectors returns the observer's Prometheus collectors, for the caller
// to register.
func (a *Accuracy) Collectors() []prometheus.Collector {
	return []prometheus.Collector{a.ratio, a.unobserved}
}

// Decided notes that the store decided a request for key under limit l,
// in bucket, for the node's accuracy observer (see [NewAccuracy]; without
// one it does nothing). The decision path calls it for every consuming
// request of a counter algorithm that the store decided. It takes a short
// lock and never blocks on I/O.
func (n *Node) Decided(key string, l window.Limit, bucket int64) {
	if a := n.acc.Load(); a != nil {
		a.note(key, l, bucket)
	}
}

// delay is when, after a bucket of window w closes, it is read.
func (a *Accuracy) delay(w time.Duration) time.Duration { return min(a.cfg.Delay, w/2) }

// note records a decided bucket of key under l.
func (a *Accuracy) note(key string, l window.Limit, bucket int64) {
	if !l.Algorithm.Counted() || l.Limit == 0 || l.Window < time.Millisecond {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := ref{key, l.Window, bucket}
	if w := a.watched[key]; w != nil {
		w.window, w.limit = l.Window, l.Limit
	}
	if e, ok := a.pending[k]; ok {
		if e.limit != l.Limit {
			e.limit = l.Limit // a reloaded rule: the newest limit
			a.pending[k] = e
		}
		return
	}
	if len(a.pending) >= a.cfg.MaxBuckets {
		a.unobserved.WithLabelValues("full").Inc()
		return
	}
	a.pending[k] = accEntry{limit: l.Limit, label: a.labelLocked(key)}
	due := bucketEnd(k.window, k.bucket).Add(a.delay(k.window)).UnixMilli()
	a.byDue[due] = append(a.byDue[due], k)
}

// labelLocked returns the histogram label of a counter key, bounded by
// MaxLabels.
func (a *Accuracy) labelLocked(key string) string {
	l := RuleLabel(key)
	if l == AccuracyInline || l == AccuracyUnknown || a.labels[l] {
		return l
	}
	if len(a.labels) >= a.cfg.MaxLabels {
		return AccuracyOther
	}
	a.labels[l] = true
	return l
}

// isGeneration reports whether tag is a reset generation's, "g" and the
// reset instant in decimal ms.
func isGeneration(tag string) bool {
	if len(tag) < 2 || tag[0] != 'g' {
		return false
	}
	for _, c := range tag[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// RuleLabel returns the rule a counter key was made under (a reset
// generation's key, "g<ms>:<key>", as its key's), as the API's
// namespaces spell keys: "r:<rule>:<key>" and "f:<rule>:<key>" give the
// rule, "i:<key>" gives "inline", "e:<domain>/<entries>" gives the domain
// (unescaped), anything else "unknown".
func RuleLabel(key string) string {
	tag, rest, ok := strings.Cut(key, ":")
	if !ok {
		return AccuracyUnknown
	}
	if isGeneration(tag) {
		return RuleLabel(rest) // "g<reset ms>:" + the key, after a reset
	}
	switch tag {
	case "i":
		return AccuracyInline
	case "r", "f":
		if rule, _, ok := strings.Cut(rest, ":"); ok && rule != "" {
			return rule
		}
	case "e":
		if dom, _, ok := strings.Cut(rest, "/"); ok && dom != "" {
			return envoyUnescaper.Replace(dom)
		}
	}
	return AccuracyUnknown
}

// envoyUnescaper undoes the escaping of an Envoy descriptor's parts.
var envoyUnescaper = strings.NewReplacer("%2F", "/", "%3D", "=", "%25", "%")

// tick observes the due buckets, reads the watched keys' closed windows
// and samples staleness once a second.
func (a *Accuracy) tick() {
	now := a.n.cfg.Now()
	a.sample(now)
	cut := now.UnixMilli()
	type item struct {
		ref
		accEntry
		observe bool
	}
	var items []item
	have := map[ref]bool{}
	a.mu.Lock()
	for due, ks := range a.byDue {
		if due > cut {
			continue
		}
		for _, k := range ks {
			e := a.pending[k]
			delete(a.pending, k)
			items = append(items, item{k, e, true})
			have[k] = true
		}
		delete(a.byDue, due)
	}
	// Each watched key's newest closed window, when it was not decided here.
	for key, w := range a.watched {
		if now.Sub(w.viewed) > a.cfg.WatchTTL {
			delete(a.watched, key)
			continue
		}
		if w.window == 0 {
			continue
		}
		b := bucketIndex(now.Add(-a.delay(w.window)), w.window) - 1
		k := ref{key, w.window, b}
		if _, ok := a.pending[k]; b > w.last && !w.inflight[b] && !ok && !have[k] {
			items = append(items, item{ref: k, accEntry: accEntry{limit: w.limit, label: w.label}})
		}
	}
	// Oldest first, so that each watched key's history grows in order.
	slices.SortFunc(items, func(x, y item) int { return cmp.Compare(x.bucket, y.bucket) })
	for _, it := range items {
		if w := a.watched[it.key]; w != nil && w.window == it.window {
			if w.inflight == nil {
				w.inflight = map[int64]bool{}
			}
			w.inflight[it.bucket] = true
		}
	}
	a.mu.Unlock()
	inChunks(items, func(chunk []item) {
		refs := make([]region.BucketRef, len(chunk))
		for i, it := range chunk {
			refs[i] = region.BucketRef{Key: it.key, Window: it.window, Bucket: it.bucket}
		}
		vecs, err := a.n.vectors(refs)
		if err != nil {
			a.n.log.Warn("read vectors for accuracy", "n", len(refs), "err", err)
			a.unobserved.WithLabelValues("store_error").Add(float64(len(chunk)))
			a.mu.Lock()
			for _, it := range chunk {
				if w := a.watched[it.key]; w != nil {
					delete(w.inflight, it.bucket)
				}
			}
			a.mu.Unlock()
			return
		}
		for i, it := range chunk {
			var v []region.Total
			if i < len(vecs) {
				v = vecs[i]
			}
			sum := sumTotals(v)
			if it.observe {
				if len(v) == 0 {
					a.unobserved.WithLabelValues("gone").Inc()
				} else {
					a.ratio.WithLabelValues(it.label).Observe(float64(sum) / float64(it.limit))
				}
			}
			a.keep(it.ref, v, sum)
		}
	})
}

// keep adds a closed window to its key's history, if the key is watched.
func (a *Accuracy) keep(k ref, v []region.Total, sum uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.watched[k.key]
	if w == nil || w.window != k.window {
		return
	}
	delete(w.inflight, k.bucket)
	if k.bucket <= w.last {
		return
	}
	w.last = k.bucket
	w.history = append(w.history, WindowCounts{Bucket: k.bucket, Start: bucketEnd(k.window, k.bucket-1),
		Closed: true, Regions: sortedTotals(v), Total: sum})
	if len(w.history) > a.cfg.History {
		w.history = slices.Delete(w.history, 0, len(w.history)-a.cfg.History)
	}
}

// sample records the remote regions' ages, once a second.
func (a *Accuracy) sample(now time.Time) {
	a.mu.Lock()
	due := now.Sub(a.lastSamp) >= time.Second
	if due {
		a.lastSamp = now
	}
	a.mu.Unlock()
	if !due {
		return
	}
	s := StalenessSample{Time: now, Ages: a.n.RemoteAges()}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.samples.push(s)
}

// Staleness returns the per-second staleness samples of the last five
// minutes, oldest first.
func (a *Accuracy) Staleness() []StalenessSample {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.samples.oldestFirst()
}

// ErrNotDecided is returned by [Accuracy.Watch] for a key this node has no
// decision for yet: its window and limit are unknown.
var ErrNotDecided = errors.New("gossip: no decision seen on this node for the key yet")

// Watch starts (or keeps) following key and returns its recent windows:
// the closed ones kept since it was first watched, each read Delay after
// it closed, then the previous and the open bucket as the store holds them
// now. Only a key this node decided has a known window and limit; for
// another, Watch returns ErrNotDecided (and follows the key from its next
// decision here). The caller must have checked that its caller may read
// key's counts.
func (a *Accuracy) Watch(ctx context.Context, key string) (KeyWindows, error) {
	if key == "" || len(key) > region.MaxKeyBytes {
		return KeyWindows{}, fmt.Errorf("gossip: watch: key must be 1 to %d bytes", region.MaxKeyBytes)
	}
	now := a.n.cfg.Now()
	a.mu.Lock()
	w := a.watched[key]
	if w == nil {
		if len(a.watched) >= a.cfg.MaxWatched {
			var oldest string
			for k, x := range a.watched {
				if oldest == "" || x.viewed.Before(a.watched[oldest].viewed) {
					oldest = k
				}
			}
			delete(a.watched, oldest)
		}
		w = &watch{label: RuleLabel(key)}
		// Take the window and limit of a pending bucket of the key.
		for k, e := range a.pending {
			if k.key == key {
				w.window, w.limit = k.window, e.limit
				break
			}
		}
		a.watched[key] = w
	}
	w.viewed = now
	kw := KeyWindows{Key: key, Label: w.label, Window: w.window, Limit: w.limit, Windows: slices.Clone(w.history)}
	a.mu.Unlock()
	if kw.Window == 0 {
		return kw, ErrNotDecided
	}
	// The buckets not in the history yet, up to the open one.
	cur := bucketIndex(now, kw.Window)
	first := cur - 1
	if n := len(kw.Windows); n > 0 {
		first = max(first, kw.Windows[n-1].Bucket+1)
	}
	var refs []region.BucketRef
	for b := first; b <= cur; b++ {
		refs = append(refs, region.BucketRef{Key: key, Window: kw.Window, Bucket: b})
	}
	vecs, err := a.n.store.Vectors(ctx, refs)
	if err != nil {
		return kw, fmt.Errorf("gossip: watch: read vectors: %w", err)
	}
	for i, r := range refs {
		var v []region.Total
		if i < len(vecs) {
			v = vecs[i]
		}
		kw.Windows = append(kw.Windows, WindowCounts{Bucket: r.Bucket, Start: bucketEnd(kw.Window, r.Bucket-1),
			Regions: sortedTotals(v), Total: sumTotals(v)})
	}
	return kw, nil
}

func bucketIndex(t time.Time, w time.Duration) int64 {
	ms, wm := t.UnixMilli(), w.Milliseconds()
	b := ms / wm
	if ms%wm < 0 {
		b--
	}
	return b
}

// sumTotals adds counts, saturating.
func sumTotals(v []region.Total) uint64 {
	var s uint64
	for _, t := range v {
		if s+t.Count < s {
			return ^uint64(0)
		}
		s += t.Count
	}
	return s
}

// sortedTotals returns v's non-zero totals sorted by region.
func sortedTotals(v []region.Total) []region.Total {
	out := make([]region.Total, 0, len(v))
	for _, t := range v {
		if t.Count > 0 {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(x, y region.Total) int { return strings.Compare(x.Region, y.Region) })
	return out
}
