package region

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

func TestMemoryEvictsAtMaxKeys(t *testing.T) {
	m := NewMemory(MemoryConfig{MaxKeys: 10})
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	l := window.Limit{Limit: 5, Window: time.Minute}
	for i := 0; i < 25; i++ {
		res := make([]Result, 1)
		if err := m.Check(ctx, []Request{{Key: fmt.Sprintf("k%d", i), Limit: l, Hits: 1, Now: now}}, res); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := m.Keys(), 10; got != want {
		t.Errorf("Keys() = %d, want %d", got, want)
	}
	if got, want := m.Evictions(), uint64(15); got != want {
		t.Errorf("Evictions() = %d, want %d", got, want)
	}
}

func TestMemorySweepsExpiredKeys(t *testing.T) {
	m := NewMemory(MemoryConfig{})
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	l := window.Limit{Limit: 5, Window: time.Second}
	res := make([]Result, 1)
	for i := 0; i < 20; i++ {
		if err := m.Check(ctx, []Request{{Key: fmt.Sprintf("k%d", i), Limit: l, Hits: 1, Now: now}}, res); err != nil {
			t.Fatal(err)
		}
	}
	// Three windows later everything has expired; one request per shard
	// triggers that shard's sweep.
	later := now.Add(3 * time.Second)
	for i := 0; i < 2000 && m.Keys() > 0; i++ {
		if err := m.Check(ctx, []Request{{Key: fmt.Sprintf("other%d", i), Limit: l, Hits: 1, Now: later, Peek: true}}, res); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Keys(); got != 0 {
		t.Errorf("Keys() after expiry = %d, want 0", got)
	}
	if got := m.Evictions(); got != 0 {
		t.Errorf("Evictions() = %d, want 0 (expiry is not eviction)", got)
	}
}
