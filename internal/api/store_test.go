package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
)

// stores are the stores the acceptance tests run against: the in-memory
// store and a real redis-server that the test starts, the latter also
// in the stack rlnode opens on it (deny cache, failover).
var stores = []struct {
	name string
	new  func(t *testing.T) region.Store
}{
	{"memory", func(t *testing.T) region.Store { return region.NewMemory(region.MemoryConfig{}) }},
	{"redis", func(t *testing.T) region.Store { return newRedis(t) }},
	{"redis+denycache", func(t *testing.T) region.Store {
		// As rlnode opens it: the deny cache and the failover in front of
		// Redis, in a Stack that restores (for Reset) into Redis. The
		// timeout is generous, so that a busy machine leaves every
		// decision to Redis.
		return storetest.Open(t, region.Config{Redis: region.RedisConfig{URL: redistest.Start(t).URL()},
			Failover: region.FailoverConfig{Timeout: 2 * time.Second}, DenyCache: &region.DenyCacheConfig{}})
	}},
}

// newRedis starts a redis-server for t and returns a store on it.
func newRedis(t *testing.T) region.Store {
	t.Helper()
	srv := redistest.Start(t)
	r, err := region.NewRedis(context.Background(), region.RedisConfig{URL: srv.URL()})
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
