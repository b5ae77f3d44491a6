package region

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the Prometheus collectors of the stack's layers: one
// collector that reads [Stack.Stats] once per scrape and exports what the
// stack has:
//
//	rlcluster_keys_held, rlcluster_keys_evicted_total      (in-memory store)
//	rlcluster_store_mode{mode}, rlcluster_store_*_total    (failover)
//	rlcluster_deny_cache_*                                  (deny cache)
//	rlcluster_store_regions_dropped_total                  (every store)
func (s *Stack) Collectors() []prometheus.Collector {
	c := &stackCollector{s: s}
	gauge := func(name, help string, labels ...string) *prometheus.Desc {
		d := prometheus.NewDesc(name, help, labels, nil)
		c.descs = append(c.descs, d)
		return d
	}
	c.keys = gauge("rlcluster_keys_held", "Keys held by the in-memory store.")
	c.evicted = gauge("rlcluster_keys_evicted_total", "Keys the in-memory store evicted to stay within its key bound.")
	c.dropped = gauge("rlcluster_store_regions_dropped_total", "Merged totals dropped because their bucket already held the most regions a bucket holds.")
	if s.Failover != nil {
		c.mode = gauge("rlcluster_store_mode", "1 for the mode the store decides in: primary, or the failure policy (local, open, closed) while the primary is unavailable.", "mode")
		c.transitions = gauge("rlcluster_store_transitions_total", "Changes of store mode, to the failure policy and back.")
		c.failures = gauge("rlcluster_store_failures_total", "Calls to the primary store that failed or timed out (probes included).")
		c.timeouts = gauge("rlcluster_store_timeouts_total", "Calls to the primary store abandoned at the store timeout.")
		c.fallback = gauge("rlcluster_store_fallback_decisions_total", "Requests decided under the failure policy.")
		c.writeBacks = gauge("rlcluster_store_writeback_totals_total", "Fallback totals written back to the primary on recovery.")
		c.wbDropped = gauge("rlcluster_store_writeback_dropped_total", "Fallback totals not written back (bound reached or write failed).")
	}
	if s.DenyCache != nil {
		c.dcHits = gauge("rlcluster_deny_cache_hits_total", "Decisions answered from the deny cache, without a store round trip.")
		c.dcMisses = gauge("rlcluster_deny_cache_misses_total", "Decisions the deny cache sent to the store.")
		c.dcEvictions = gauge("rlcluster_deny_cache_evictions_total", "Live deny cache entries dropped to stay within its key bound.")
		c.dcEntries = gauge("rlcluster_deny_cache_entries", "Entries the deny cache holds, live or expired.")
	}
	return []prometheus.Collector{c}
}

// stackCollector exports a Stack's stats, read once per Collect.
type stackCollector struct {
	s     *Stack
	descs []*prometheus.Desc

	keys, evicted, dropped                                                 *prometheus.Desc
	mode, transitions, failures, timeouts, fallback, writeBacks, wbDropped *prometheus.Desc
	dcHits, dcMisses, dcEvictions, dcEntries                               *prometheus.Desc
}

func (c *stackCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *stackCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(c.keys, float64(st.Memory.Keys))
	counter(c.evicted, st.Memory.Evictions)
	dropped := st.Memory.RegionsDropped
	if st.Redis != nil {
		dropped += st.Redis.RegionsDropped
	}
	counter(c.dropped, dropped)
	if f := st.Failover; f != nil && c.mode != nil {
		for _, m := range []string{"primary", "local", "open", "closed"} {
			v := 0.0
			if f.ModeName() == m {
				v = 1
			}
			gauge(c.mode, v, m)
		}
		counter(c.transitions, f.Transitions)
		counter(c.failures, f.Failures)
		counter(c.timeouts, f.Timeouts)
		counter(c.fallback, f.FallbackDecisions)
		counter(c.writeBacks, f.WriteBacks)
		counter(c.wbDropped, f.WriteBackDropped)
	}
	if d := st.DenyCache; d != nil && c.dcHits != nil {
		counter(c.dcHits, d.Hits)
		counter(c.dcMisses, d.Misses)
		counter(c.dcEvictions, d.Evictions)
		gauge(c.dcEntries, float64(d.Entries))
	}
}
