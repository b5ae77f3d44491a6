package region_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// keyCostKeys is how many distinct keys TestKeyCost sends each store.
const keyCostKeys = 20000

// floodKeys decides one hit on each of n distinct 16-byte keys
// (sliding window, 100 per hour), in batches of 500.
func floodKeys(t *testing.T, s region.Store, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	reqs := make([]region.Request, 0, 500)
	res := make([]region.Result, 500)
	for i := 0; i < n; i += len(reqs) {
		reqs = reqs[:0]
		for j := i; j < min(i+500, n); j++ {
			reqs = append(reqs, region.Request{Key: fmt.Sprintf("i:flood-%09d", j), Limit: window.Limit{Limit: 100, Window: time.Hour}, Hits: 1, Now: now})
		}
		if err := s.Check(ctx, reqs, res[:len(reqs)]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKeyCost measures what one key costs each store (see MemoryKeyBytes
// and RedisKeyBytes) and fails when it is more than they state.
//
// Reproduce: go test ./internal/region -run TestKeyCost -v
func TestKeyCost(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := region.NewMemory(region.MemoryConfig{MaxKeys: 2 * keyCostKeys})
		floodKeys(t, m, keyCostKeys)
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / keyCostKeys
		runtime.KeepAlive(m)
		t.Logf("in-memory store: %d bytes a key (%d keys), stated %d", per, keyCostKeys, region.MemoryKeyBytes)
		if per > region.MemoryKeyBytes || per <= 0 {
			t.Errorf("a key costs %d bytes of heap, want at most region.MemoryKeyBytes (%d): update it and the docs", per, region.MemoryKeyBytes)
		}
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		ctx := context.Background()
		r, err := region.NewRedis(ctx, region.RedisConfig{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		before, err := r.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		floodKeys(t, r, keyCostKeys)
		after, err := r.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		per := int64(after.UsedMemory-before.UsedMemory) / keyCostKeys
		t.Logf("Redis: %d bytes a key, %d Redis keys for %d keys, stated %d", per, after.Keys-before.Keys, keyCostKeys, region.RedisKeyBytes)
		if after.Keys-before.Keys < keyCostKeys {
			t.Errorf("INFO keyspace counts %d new keys, want at least %d", after.Keys-before.Keys, keyCostKeys)
		}
		if per > region.RedisKeyBytes || per <= 0 {
			t.Errorf("a key costs %d bytes of Redis memory, want at most region.RedisKeyBytes (%d): update it and the docs", per, region.RedisKeyBytes)
		}
	})
}
