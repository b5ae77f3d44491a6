package gossip

import (
	"testing"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
)

// storeKeepsAll reports whether the test store keeps every bucket until
// its TTL (Redis) rather than only the newest two of a key (memory).
const storeKeepsAll = true

// newTestStore returns the store of one region for the cluster tests: a
// region.Redis on its own real redis-server.
func newTestStore(t *testing.T, regionName string) region.Store {
	t.Helper()
	srv := redistest.Start(t)
	return storetest.Open(t, region.Config{Region: regionName, Redis: region.RedisConfig{URL: srv.URL()}}).Redis
}
