package gossip

import (
	"testing"

	"github.com/rlcluster/rlcluster/internal/region"
)

// storeKeepsAll reports whether the test store keeps every bucket until
// its TTL (Redis) rather than only the newest two of a key (memory).
const storeKeepsAll = false

// newTestStore returns the store of one region for the cluster tests.
func newTestStore(t *testing.T, regionName string) region.Store {
	t.Helper()
	s := region.NewMemory(region.MemoryConfig{Region: regionName})
	t.Cleanup(func() { _ = s.Close() })
	return s
}
