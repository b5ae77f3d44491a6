package region_test

import (
	"context"
	"testing"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
)

func TestMemoryStore(t *testing.T) {
	storetest.RunStoreTests(t, func(t *testing.T, reg string) region.Store {
		return region.NewMemory(region.MemoryConfig{Region: reg})
	})
}

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

func TestRedisStore(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		co   region.Coalesce
	}{{"coalesced", region.Coalesce{}}, {"direct", region.Coalesce{Disabled: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.RunStoreTests(t, func(t *testing.T, reg string) region.Store {
				return newRedisStore(t, srv.URL(), reg, tc.co)
			})
		})
	}
}

func TestRedisClusterStore(t *testing.T) {
	c := redistest.StartCluster(t)
	storetest.RunStoreTests(t, func(t *testing.T, reg string) region.Store {
		return newRedisStore(t, c.URL(), reg, region.Coalesce{})
	})
}
