package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/region"
)

// keyCounter is implemented by stores that know how many keys they hold
// (the in-memory store).
type keyCounter interface {
	Keys() int
}

// evictionCounter is implemented by stores that evict keys to stay within
// a bound (the in-memory store).
type evictionCounter interface {
	Evictions() uint64
}

// denyCacher is implemented by stores that answer denials from memory
// ([region.DenyCache]).
type denyCacher interface {
	DenyCacheStats() region.DenyCacheStats
}

// storeAs finds a T in s or in the stores it wraps (through their
// Unwrap() region.Store methods, as [region.DenyCache] has), so that a
// wrapper hides none of what it wraps.
func storeAs[T any](s region.Store) (T, bool) {
	for s != nil {
		if t, ok := s.(T); ok {
			return t, true
		}
		u, ok := s.(interface{ Unwrap() region.Store })
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero T
	return zero, false
}

// registerStoreMetrics registers what the store (or a store it wraps)
// can tell: keys held and evicted, its failover mode, its deny cache.
func registerStoreMetrics(reg prometheus.Registerer, store region.Store, status StoreStatuser) error {
	var cs []prometheus.Collector
	if kc, ok := storeAs[keyCounter](store); ok {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rlcluster_keys_held",
			Help: "Keys held by the in-memory store.",
		}, func() float64 { return float64(kc.Keys()) }))
	}
	if ec, ok := storeAs[evictionCounter](store); ok {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "rlcluster_keys_evicted_total",
			Help: "Keys the in-memory store evicted to stay within its key bound.",
		}, func() float64 { return float64(ec.Evictions()) }))
	}
	if status != nil {
		cs = append(cs, storeStatusCollectors(status)...)
	}
	if dc, ok := storeAs[denyCacher](store); ok {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "rlcluster_deny_cache_hits_total",
				Help: "Decisions answered from the deny cache, without a store round trip.",
			}, func() float64 { return float64(dc.DenyCacheStats().Hits) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "rlcluster_deny_cache_misses_total",
				Help: "Decisions the deny cache sent to the store.",
			}, func() float64 { return float64(dc.DenyCacheStats().Misses) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "rlcluster_deny_cache_evictions_total",
				Help: "Live deny cache entries dropped to stay within its key bound.",
			}, func() float64 { return float64(dc.DenyCacheStats().Evictions) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "rlcluster_deny_cache_entries",
				Help: "Entries the deny cache holds, live or expired.",
			}, func() float64 { return float64(dc.DenyCacheStats().Entries) }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// storeStatusCollectors export a failover store's mode and counters.
func storeStatusCollectors(st StoreStatuser) []prometheus.Collector {
	var cs []prometheus.Collector
	for _, mode := range []string{"primary", "local", "open", "closed"} {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "rlcluster_store_mode",
			Help:        "1 for the mode the store decides in: primary, or the failure policy (local, open, closed) while the primary is unavailable.",
			ConstLabels: prometheus.Labels{"mode": mode},
		}, func() float64 {
			if st.Status().ModeName() == mode {
				return 1
			}
			return 0
		}))
	}
	counter := func(name, help string, f func(region.FailoverStatus) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(st.Status())) })
	}
	return append(cs,
		counter("rlcluster_store_transitions_total", "Changes of store mode, to the failure policy and back.",
			func(s region.FailoverStatus) uint64 { return s.Transitions }),
		counter("rlcluster_store_failures_total", "Calls to the primary store that failed or timed out (probes included).",
			func(s region.FailoverStatus) uint64 { return s.Failures }),
		counter("rlcluster_store_timeouts_total", "Calls to the primary store abandoned at the store timeout.",
			func(s region.FailoverStatus) uint64 { return s.Timeouts }),
		counter("rlcluster_store_fallback_decisions_total", "Requests decided under the failure policy.",
			func(s region.FailoverStatus) uint64 { return s.FallbackDecisions }),
		counter("rlcluster_store_writeback_totals_total", "Fallback totals written back to the primary on recovery.",
			func(s region.FailoverStatus) uint64 { return s.WriteBacks }),
		counter("rlcluster_store_writeback_dropped_total", "Fallback totals not written back (bound reached or write failed).",
			func(s region.FailoverStatus) uint64 { return s.WriteBackDropped }),
	)
}
