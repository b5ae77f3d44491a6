package gossip

import (
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
)

// storeKeepsAll reports whether the test store keeps every bucket until
// its TTL (Redis) rather than only the newest two of a key (memory).
const storeKeepsAll = true

// testStoreTimeout bounds the test stores' Redis calls. A call abandoned at
// the timeout is a Check error and may still count in Redis, above the
// harness's truth; the default 50 ms is within reach of -race on two busy
// cores, so the cluster tests, which are about replication, wait longer.
const testStoreTimeout = 3 * time.Second

// newTestStore returns the store of one region for the cluster tests: a
// region.Redis on its own real redis-server.
func newTestStore(t *testing.T, regionName string) region.Store {
	t.Helper()
	srv := redistest.Start(t)
	return storetest.Open(t, region.Config{Region: regionName, Redis: region.RedisConfig{URL: srv.URL()},
		Failover: region.FailoverConfig{Timeout: testStoreTimeout}}).Redis
}
