package guard

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// viewTTL is how long a Node reuses a pool view: reading the membership
// on every decision would cost more than the decision.
const viewTTL = 10 * time.Millisecond

// Node is a [Guard] bound to one node's view of the pool, with its
// metrics: what the decision path calls. It is safe for concurrent use.
type Node struct {
	g    *Guard
	view func(now time.Time) View

	cur  atomic.Pointer[viewAt] // the view in use, read without a lock
	mu   sync.Mutex             // one refresher at a time
	next time.Time              // next sweep, under mu

	staleness *prometheus.HistogramVec // region
	silent    prometheus.Gauge
	crossed   prometheus.Gauge
	horizon   prometheus.Gauge
	reads     prometheus.Counter
	denials   [Joining + 1]prometheus.Counter // by Reason
}

// Ticket carries one request from [Node.Admit] to [Node.Done].
type Ticket struct {
	// StoreLimit is the limit the store must decide against.
	StoreLimit uint64
	// Room is, for a request refused for the node's share, how many hits
	// its quota holds still (see [Guard.AdmitRoom]).
	Room  uint64
	v     *View
	now   time.Time
	key   string
	limit window.Limit
	hits  uint64
}

// stalenessBuckets go from 10 ms to about 100 s.
var stalenessBuckets = prometheus.ExponentialBucketsRange(0.01, 100, 16)

// NewNode returns a Node over g that asks view for the pool (at most every
// 10 ms) and registers its metrics on reg.
func NewNode(g *Guard, view func(now time.Time) View, reg prometheus.Registerer) (*Node, error) {
	if g == nil || view == nil || reg == nil {
		return nil, errors.New("guard: NewNode needs a Guard, a view and a Registerer")
	}
	n := &Node{g: g, view: view,
		staleness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rlcluster_remote_staleness_seconds",
			Help:    "Time since a valid frame (totals or heartbeat) last came from each remote region, sampled at decision time at most every 10 ms, by region.",
			Buckets: stalenessBuckets,
		}, []string{"region"}),
		silent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rlcluster_guard_silent_regions",
			Help: "Member regions not heard from within the suspicion timeout, as of the last decision the burst guard saw.",
		}),
		crossed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rlcluster_guard_crossed",
			Help: "1 when, as of the last decision the burst guard saw, an alive region did not hear a region this node hears or heard one it does not (a cut link): every other region is then charged its share of the limit.",
		}),
		horizon: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rlcluster_guard_horizon_seconds",
			Help: "The burst guard's horizon: the flush interval plus the largest measured one-way delay to an alive region plus the margin.",
		}),
		reads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rlcluster_guard_reads_total",
			Help: "Keys whose counts the burst guard read from the store before deciding a request, because this node had no store result for them: each a store round trip more.",
		}),
	}
	denials := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlcluster_guard_denials_total",
		Help: "Requests the burst guard refused, by reason: share (this node's quota of the key's headroom for the horizon is spent), stagger (a share that holds no whole hit, and not this node's turn), charged (the silent regions' charge leaves no room), restoring (the store lost its counts and waits for the other regions), joining (this node started or joined the pool too recently for the other nodes to count it) or cut (the store denied a probe decided against this node's share, which the full limit would have admitted).",
	}, []string{"reason"})
	for _, r := range Reasons {
		n.denials[r] = denials.WithLabelValues(r.String())
	}
	reused := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "rlcluster_guard_reused_total",
		Help: "Hits admitted in the place of this region's own hits as they left the window (the burst guard's reuse, before any share of the headroom): under saturation, most of what a region admits.",
	}, func() float64 { return float64(g.Reused()) })
	for _, c := range []prometheus.Collector{n.staleness, n.silent, n.crossed, n.horizon, n.reads, denials, reused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("guard: register metrics: %w", err)
		}
	}
	return n, nil
}

// viewAt is a view and the instant it was read.
type viewAt struct {
	v  *View
	at time.Time
}

// current returns the pool view at now, refreshed every viewTTL: the
// decisions in between read it without a lock.
func (n *Node) current(now time.Time) *View {
	if c := n.cur.Load(); c != nil && now.Sub(c.at) < viewTTL && !now.Before(c.at) {
		return c.v
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.cur.Load(); c != nil && now.Sub(c.at) < viewTTL && !now.Before(c.at) {
		return c.v // another decision refreshed it meanwhile
	}
	v := n.view(now)
	crossed := v.Crossed()
	if crossed {
		v = *v.Isolated() // once per view, not per decision
	}
	n.cur.Store(&viewAt{v: &v, at: now})
	for r, age := range v.Ages {
		n.staleness.WithLabelValues(r).Observe(age.Seconds())
	}
	n.silent.Set(float64(len(v.Silent)))
	if crossed {
		n.crossed.Set(1)
	} else {
		n.crossed.Set(0)
	}
	n.horizon.Set(v.Horizon.Seconds())
	if !now.Before(n.next) {
		n.next = now.Add(time.Second)
		go n.g.Sweep(now)
	}
	return &v
}

// Admit is [Guard.Admit] of the request's limit l under the node's
// current view. When ok, the caller decides with t.StoreLimit (in place of
// l.Limit) and calls Done with the result.
func (n *Node) Admit(now time.Time, key string, l window.Limit, hits uint64) (t Ticket, ok bool, retryAfter time.Duration) {
	v := n.current(now)
	r, sl, retry, room := n.g.AdmitRoom(now, key, l, hits, v)
	if r != Admitted {
		n.denials[r].Inc()
	}
	return Ticket{StoreLimit: sl, Room: room, v: v, now: now, key: key, limit: l, hits: hits}, r == Admitted, retry
}

// NeedsRead is [Guard.NeedsRead] under the node's current view.
func (n *Node) NeedsRead(now time.Time, key string, l window.Limit) bool {
	return n.g.NeedsRead(now, key, l, n.current(now))
}

// Learn is [Guard.Learn] under the node's current view.
func (n *Node) Learn(now time.Time, key string, l window.Limit, res *region.Result) {
	n.reads.Inc()
	n.g.Learn(now, key, l, n.current(now), res)
}

// Done is [Guard.Done] for a ticket that Admit let through: it returns
// the retry-after of a guard denial when the store's denial is the
// guard's (a probe decided against a limit lowered to this node's share),
// else 0.
func (n *Node) Done(t *Ticket, res *region.Result) (guardRetry time.Duration) {
	if t.v == nil {
		return 0
	}
	guardRetry = n.g.Done(t.now, t.key, t.limit, t.hits, t.v, res)
	if guardRetry > 0 {
		n.denials[Cut].Inc()
	}
	return guardRetry
}

// Share is [Guard.Share] under the node's current view.
func (n *Node) Share(now time.Time, key string, l window.Limit) float64 {
	return n.g.Share(now, key, l, n.current(now))
}

// Refused is [Guard.Refused] under the node's current view.
func (n *Node) Refused(now time.Time, key string, l window.Limit, hits uint64) {
	n.g.Refused(now, key, l, hits, n.current(now))
}
