package gossip

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metrics are a Node's Prometheus metrics; the Node registers nothing
// itself: see Collectors.
type metrics struct {
	node        *Node
	msgsSent    *prometheus.CounterVec
	bytesSent   *prometheus.CounterVec
	bytesWhy    *prometheus.CounterVec
	msgsRecv    *prometheus.CounterVec
	bytesRecv   *prometheus.CounterVec
	merges      prometheus.Counter
	dropped     *prometheus.CounterVec
	lagDesc     *prometheus.Desc
	membersDesc *prometheus.Desc
	offsetDesc  *prometheus.Desc
	dirtyDesc   *prometheus.Desc
	touchedDesc *prometheus.Desc
	pendingDesc *prometheus.Desc
	repairs     *prometheus.CounterVec
	repairTs    prometheus.Counter
	resends     prometheus.Counter
	skew        prometheus.Counter
	staleness   *prometheus.HistogramVec
	// logSuppressed counts log lines that network input caused beyond
	// their kind's share (see logLimiter), by kind.
	logSuppressed *prometheus.CounterVec
}

func newMetrics() *metrics {
	const ns, sub = "rlcluster", "gossip"
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, labels)
	}
	m := &metrics{
		msgsSent:  cv("messages_sent_total", "Replication frames sent, by kind.", "kind"),
		bytesSent: cv("bytes_sent_total", "Replication frame bytes sent (payload), by kind.", "kind"),
		bytesWhy:  cv("sent_bytes_total", "Replication frame bytes sent (payload), by reason (urgent, periodic, flush, echo, heartbeat, reconcile, state, touch, repair, rejoin).", "reason"),
		msgsRecv:  cv("messages_received_total", "Replication frames received and decoded, by kind.", "kind"),
		bytesRecv: cv("bytes_received_total", "Replication frame bytes received (payload), by kind.", "kind"),
		merges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "merges_total",
			Help: "Remote totals max-merged into the local store."}),
		dropped: cv("dropped_total", "Totals or frames dropped, by reason (malformed, version, kind, oversized, not_member, misdirected, replay, stale, not_alive, foreign_region, queue_full, dirty_full, closed_full, touched_full, send_error, send_busy, store_error, retry_expired, ...).", "reason"),
		lagDesc: prometheus.NewDesc("rlcluster_gossip_replication_lag_seconds",
			"Age of the newest totals merged from each remote region (sender's clock); absent before the first.", []string{"region"}, nil),
		membersDesc: prometheus.NewDesc("rlcluster_gossip_members",
			"Members of the gossip pool by region and state.", []string{"region", "state"}, nil),
		offsetDesc: prometheus.NewDesc("rlcluster_gossip_clock_offset_seconds",
			"Estimated clock offset of each peer (peer minus local) from ping-ack timestamps.", []string{"peer"}, nil),
		dirtyDesc: prometheus.NewDesc("rlcluster_gossip_dirty_totals",
			"Totals waiting for the next flush.", nil, nil),
		touchedDesc: prometheus.NewDesc("rlcluster_gossip_touched_buckets",
			"Buckets waiting for reconciliation.", nil, nil),
		pendingDesc: prometheus.NewDesc("rlcluster_gossip_reconcile_retries",
			"Reconciliation batches waiting for a retry.", nil, nil),
	}
	m.repairs = cv("repairs_total", "Repair requests: requested (this node's store lost its counts or started empty and it asked its peers), answered (a peer's request this node answered), and suspected (a decision returned a count of this region lower than one the node held, so it read the store's epoch at once).", "direction")
	m.repairTs = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "repair_totals_received_total",
		Help: "Totals of this node's own region max-merged back from peers' repair answers."})
	m.resends = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rejoin_totals_sent_total",
		Help: "Open-bucket totals re-sent to regions whose members came (back) alive."})
	m.skew = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "clock_skew_exceeded_total",
		Help: "Times a peer's clock offset went past the bound (250 ms): run NTP."})
	m.staleness = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "staleness_seconds",
		Help:    "How long the oldest hit of a total waited before the total went to the other regions, by key class (near: at or above half its limit, or no limit given; far: below half).",
		Buckets: []float64{.005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30, 60}}, []string{"class"})
	m.staleness.WithLabelValues(classNear)
	m.staleness.WithLabelValues(classFar)
	m.logSuppressed = cv("log_lines_suppressed_total", "Log lines that network input caused beyond the first 5 of their kind in a minute, not written, by kind (level and leading words; at most 64 kinds and \"other\").", "kind")
	m.repairs.WithLabelValues("requested")
	m.repairs.WithLabelValues("answered")
	// Make the common label values appear at zero.
	for _, k := range []Kind{KindFlush, KindReconcile, KindState, KindTouch} {
		m.msgsSent.WithLabelValues(k.String())
		m.bytesSent.WithLabelValues(k.String())
		m.msgsRecv.WithLabelValues(k.String())
		m.bytesRecv.WithLabelValues(k.String())
	}
	for _, r := range reasons {
		m.bytesWhy.WithLabelValues(r)
	}
	for _, r := range []string{"malformed", "version", "oversized", "queue_full", "dirty_full", "closed_full", "send_error", "store_error"} {
		m.dropped.WithLabelValues(r)
	}
	return m
}

func (m *metrics) sent(k Kind, bytes int) { m.sentFor(k, costOf(k), bytes) }

// sentFor counts a frame of kind sent for c.
func (m *metrics) sentFor(k Kind, c cost, bytes int) {
	m.msgsSent.WithLabelValues(k.String()).Inc()
	m.bytesSent.WithLabelValues(k.String()).Add(float64(bytes))
	rest := float64(bytes)
	for r, f := range c.share {
		if b := float64(bytes) * f; b > 0 {
			m.bytesWhy.WithLabelValues(r).Add(b)
			rest -= b
		}
	}
	if rest > 1e-6*float64(bytes) || len(c.share) == 0 { // not a rounding error
		m.bytesWhy.WithLabelValues(c.reason).Add(max(rest, 0))
	}
}

// observeStaleness records the staleness of the totals a flush sent, by
// key class.
func (m *metrics) observeStaleness(by map[string][]time.Duration) {
	for class, ds := range by {
		o := m.staleness.WithLabelValues(class)
		for _, d := range ds {
			o.Observe(d.Seconds())
		}
	}
}

func (m *metrics) received(k Kind, bytes int) {
	m.msgsRecv.WithLabelValues(k.String()).Inc()
	m.bytesRecv.WithLabelValues(k.String()).Add(float64(bytes))
}

func (m *metrics) merged(n int)       { m.merges.Add(float64(n)) }
func (m *metrics) repairRequested()   { m.repairs.WithLabelValues("requested").Inc() }
func (m *metrics) repairAnswered()    { m.repairs.WithLabelValues("answered").Inc() }
func (m *metrics) repairSuspected()   { m.repairs.WithLabelValues("suspected").Inc() }
func (m *metrics) repairTotals(n int) { m.repairTs.Add(float64(n)) }
func (m *metrics) resent(n int)       { m.resends.Add(float64(n)) }
func (m *metrics) skewExceeded()      { m.skew.Inc() }
func (m *metrics) drop(reason string) { m.dropped.WithLabelValues(reason).Inc() }
func (m *metrics) dropCount(r string) float64 {
	c, err := m.dropped.GetMetricWithLabelValues(r)
	if err != nil {
		return 0
	}
	return counterValue(c)
}

// Collectors returns the node's Prometheus collectors, for the caller to
// register (the node registers nothing globally).
func (n *Node) Collectors() []prometheus.Collector {
	m := n.met
	return []prometheus.Collector{m.msgsSent, m.bytesSent, m.bytesWhy, m.msgsRecv, m.bytesRecv, m.merges, m.dropped,
		m.repairs, m.repairTs, m.resends, m.skew, m.staleness, m.logSuppressed, (*stateCollector)(m)}
}

// stateCollector reports the gauges computed from the node's state at
// scrape time.
type stateCollector metrics

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lagDesc, c.membersDesc, c.offsetDesc, c.dirtyDesc, c.touchedDesc, c.pendingDesc} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.node
	for _, a := range n.Ages() {
		if !a.Newest.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.lagDesc, prometheus.GaugeValue, a.Age.Seconds(), a.Region)
		}
	}
	counts := map[[2]string]int{}
	for _, m := range n.Members() {
		counts[[2]string{m.Region, m.State}]++
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.membersDesc, prometheus.GaugeValue, float64(v), k[0], k[1])
	}
	for peer, off := range n.ClockOffsets() {
		ch <- prometheus.MustNewConstMetric(c.offsetDesc, prometheus.GaugeValue, off.Seconds(), peer)
	}
	n.mu.Lock()
	dirty, touched := len(n.dirty), n.nTouched
	n.mu.Unlock()
	n.pendMu.Lock()
	pend := len(n.pending)
	n.pendMu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.dirtyDesc, prometheus.GaugeValue, float64(dirty))
	ch <- prometheus.MustNewConstMetric(c.touchedDesc, prometheus.GaugeValue, float64(touched))
	ch <- prometheus.MustNewConstMetric(c.pendingDesc, prometheus.GaugeValue, float64(pend))
}

func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return 0
	}
	return d.GetCounter().GetValue()
}

// stalenessCount is how many stalenesses were observed for class.
func (m *metrics) stalenessCount(class string) uint64 {
	o, err := m.staleness.GetMetricWithLabelValues(class)
	if err != nil {
		return 0
	}
	var d dto.Metric
	if err := o.(prometheus.Histogram).Write(&d); err != nil {
		return 0
	}
	return d.GetHistogram().GetSampleCount()
}

// bytesSent returns the payload bytes sent so far, all kinds together.
func (m *metrics) bytesSentTotal() float64 {
	var sum float64
	for k := KindFlush; k <= KindDemand; k++ {
		sum += counterValue(m.bytesSent.WithLabelValues(k.String()))
	}
	return sum
}

// bytesByReason returns the payload bytes sent so far by reason.
func (m *metrics) bytesByReason() map[string]float64 {
	out := map[string]float64{}
	for _, r := range reasons {
		out[r] = counterValue(m.bytesWhy.WithLabelValues(r))
	}
	return out
}
