package api_test

import (
	"context"
	"testing"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

// stores are the stores the acceptance tests run against: the in-memory
// store and a real redis-server that the test starts, the latter also
// behind a deny cache, as rlnode runs it.
var stores = []struct {
	name string
	new  func(t *testing.T) region.Store
}{
	{"memory", func(t *testing.T) region.Store { return region.NewMemory(region.MemoryConfig{}) }},
	{"redis", func(t *testing.T) region.Store { return newRedis(t) }},
	{"redis+denycache", func(t *testing.T) region.Store {
		return region.NewDenyCache(newRedis(t), region.DenyCacheConfig{})
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
