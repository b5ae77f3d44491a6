package gossip

import (
	"context"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

// storeKeepsAll reports whether the test store keeps every bucket until
// its TTL (Redis) rather than only the newest two of a key (memory).
const storeKeepsAll = true

// newTestStore returns the store of one region for the cluster tests: a
// region.Redis on its own real redis-server.
func newTestStore(t *testing.T, regionName string) region.Store {
	t.Helper()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := region.NewRedis(ctx, region.RedisConfig{URL: srv.URL(), Region: regionName})
	if err != nil {
		t.Fatalf("NewRedis(%s): %v", srv.URL(), err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
