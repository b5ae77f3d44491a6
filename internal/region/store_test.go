package region_test

import (
	"context"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
)

// newRedisStore returns a store on url, closed when t ends, and checks at
// the end that the scripts never disagreed with the Go decisions.
func newRedisStore(t *testing.T, url, reg string, co region.Coalesce) *region.Redis {
	t.Helper()
	s, err := region.NewRedis(context.Background(), region.RedisConfig{URL: url, Region: reg, Coalesce: co})
	if err != nil {
		t.Fatalf("NewRedis(%s): %v", url, err)
	}
	t.Cleanup(func() {
		if n := s.Mismatches(); n != 0 {
			t.Errorf("%d decisions of the Lua script disagreed with window.DecideCounter", n)
		}
		s.Close()
	})
	return s
}

// TestStoreContract runs the store contract over every implementation
// and every stack rlnode composes. Each row's setup starts what the row
// needs (a redis-server, a Redis Cluster) and returns the constructor that
// the contract calls once per case.
func TestStoreContract(t *testing.T) {
	redis := func(co region.Coalesce) func(t *testing.T) storetest.NewStore {
		return func(t *testing.T) storetest.NewStore {
			srv := redistest.Start(t)
			return func(t *testing.T, reg string) region.Store { return newRedisStore(t, srv.URL(), reg, co) }
		}
	}
	for _, row := range []struct {
		name  string
		setup func(t *testing.T) storetest.NewStore
	}{
		{"memory", func(*testing.T) storetest.NewStore {
			return func(t *testing.T, reg string) region.Store { return region.NewMemory(region.MemoryConfig{Region: reg}) }
		}},
		{"redis/coalesced", redis(region.Coalesce{})},
		{"redis/direct", redis(region.Coalesce{Disabled: true})},
		{"redis-cluster", func(t *testing.T) storetest.NewStore {
			c := redistest.StartCluster(t)
			return func(t *testing.T, reg string) region.Store { return newRedisStore(t, c.URL(), reg, region.Coalesce{}) }
		}},
		{"failover/memory", func(*testing.T) storetest.NewStore {
			return func(t *testing.T, reg string) region.Store {
				return newFailover(t, region.NewMemory(region.MemoryConfig{Region: reg}), region.FailoverConfig{Region: reg})
			}
		}},
		{"denycache/memory", func(*testing.T) storetest.NewStore {
			return func(t *testing.T, reg string) region.Store {
				return region.NewDenyCache(region.NewMemory(region.MemoryConfig{Region: reg}), region.DenyCacheConfig{})
			}
		}},
		{"denycache/redis", func(t *testing.T) storetest.NewStore {
			srv := redistest.Start(t)
			return func(t *testing.T, reg string) region.Store {
				return region.NewDenyCache(newRedisStore(t, srv.URL(), reg, region.Coalesce{}), region.DenyCacheConfig{})
			}
		}},
		// The stacks region.Open composes for rlnode.
		{"open/memory", func(*testing.T) storetest.NewStore {
			return func(t *testing.T, reg string) region.Store {
				s := storetest.Open(t, region.Config{Region: reg})
				if s.Memory == nil || s.Redis != nil || s.Failover != nil || s.DenyCache != nil || s.Store != s.Memory {
					t.Fatalf("memory stack = %+v, want the in-memory store alone", s)
				}
				return s
			}
		}},
		{"open/redis", func(t *testing.T) storetest.NewStore {
			srv := redistest.Start(t)
			return func(t *testing.T, reg string) region.Store {
				s := storetest.Open(t, region.Config{Region: reg, Redis: region.RedisConfig{URL: srv.URL()},
					Failover: region.FailoverConfig{Timeout: 10 * time.Second}, DenyCache: &region.DenyCacheConfig{}})
				if s.Redis == nil || s.Failover == nil || s.DenyCache == nil || s.Store != s.DenyCache || s.Memory.Region() == reg {
					t.Fatalf("redis stack = %+v, want deny cache, failover, Redis and a fallback", s)
				}
				return s
			}
		}},
	} {
		t.Run(row.name, func(t *testing.T) {
			storetest.RunStoreTests(t, row.setup(t))
		})
	}
}
