package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/region"
)

// storeCollectors is implemented by stores that export their own layers'
// metrics ([region.Stack]: keys held and evicted, failover mode and
// counters, deny cache), read once per scrape.
type storeCollectors interface {
	Collectors() []prometheus.Collector
}

// storeAs finds a T in s or in the stores it wraps (through their
// Unwrap() region.Store methods, as [region.Stack] and [region.DenyCache]
// have), so that a wrapper hides none of what it wraps.
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

// registerStoreMetrics registers the store's own collectors, when it has
// them. A bare store (a [region.Memory] in a test) exports none.
func registerStoreMetrics(reg prometheus.Registerer, store region.Store) error {
	sc, ok := storeAs[storeCollectors](store)
	if !ok {
		return nil
	}
	for _, c := range sc.Collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
