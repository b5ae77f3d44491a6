package gctune_test

import (
	"context"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/gctune"
)

const mib = 1 << 20

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		live, headroom uint64
		base, want     int
	}{
		{live: 8 * mib, headroom: 64 * mib, base: 100, want: 800},  // 8 MiB + 64 MiB
		{live: 10 * mib, headroom: 64 * mib, base: 100, want: 640}, // rounds down
		{live: 64 * mib, headroom: 64 * mib, base: 100, want: 100},
		{live: 1 << 30, headroom: 64 * mib, base: 100, want: 100}, // GOGC's pacing
		{live: 1 << 30, headroom: 64 * mib, base: 300, want: 300},
		{live: 1 * mib, headroom: 64 * mib, base: 100, want: 1600}, // minimum heap 4 MiB x 16 = the headroom
		{live: 0, headroom: 64 * mib, base: 100, want: 1600},       // before the first collection
		{live: 8 * mib, headroom: 2 * mib, base: 100, want: 100},   // headroom below the minimum heap
		{live: 8 * mib, headroom: 0, base: 100, want: 100},
		{live: 1, headroom: 1 << 62, base: 100, want: 1 << 20},
	} {
		if got := gctune.Percent(tc.live, tc.headroom, tc.base); got != tc.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", tc.live, tc.headroom, tc.base, got, tc.want)
		}
	}
}

// TestRun steps Run through collections: it sets the percent for the
// live heap at start and after each collection when it changes, and
// restores the original percent when its context ends.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu   sync.Mutex
			live uint64 = 8 * mib
			cur         = 100
			sets []int
		)
		cycles := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			gctune.Run(ctx, gctune.Config{Headroom: 64 * mib, Cycles: cycles,
				Live: func() uint64 { mu.Lock(); defer mu.Unlock(); return live },
				Set: func(p int) int {
					mu.Lock()
					defer mu.Unlock()
					old := cur
					cur = p
					sets = append(sets, p)
					return old
				}})
		}()
		collect := func(n uint64) {
			mu.Lock()
			live = n
			mu.Unlock()
			cycles <- struct{}{}
			synctest.Wait()
		}
		check := func(when string, want ...int) {
			t.Helper()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(sets, want) {
				t.Fatalf("%s: percents set %v, want %v", when, sets, want)
			}
		}
		check("at start", 800)
		collect(8 * mib)
		check("live heap unchanged", 800)
		collect(128 * mib)
		check("live heap past the headroom", 800, 100)
		collect(16 * mib)
		check("live heap small again", 800, 100, 400)
		cancel()
		<-done
		check("after the context ended", 800, 100, 400, 100)
	})
}

// TestRunFollowsCollections runs Run on the runtime's own collections
// and live heap, with a fake Set: after a collection it sets the percent
// for the live heap that collection found. The test reads the live heap
// after its own collection, and the runtime (the race detector's more so)
// may allocate between that and what Run reads, so the percent need only
// be within 1% of the test's.
func TestRunFollowsCollections(t *testing.T) {
	const headroom = 1 << 30
	sets := make(chan int, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		gctune.Run(ctx, gctune.Config{Headroom: headroom, Set: func(p int) int { sets <- p; return 100 }})
	}()
	defer func() { cancel(); <-done }()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	deadline := time.After(time.Minute)
	select { // Run has started: a collection from now on reaches it
	case <-sets:
	case <-deadline:
		t.Fatal("Run set no percent at start")
	}
	for n := 1; n <= 2; n++ { // two collections, with 8 MiB more live heap each
		keep := make([]*[1 << 20]byte, 8*n)
		for i := range keep {
			keep[i] = new([1 << 20]byte)
		}
		runtime.GC()
		metrics.Read(live)
		want := gctune.Percent(live[0].Value.Uint64(), headroom, 100)
		var got []int
		near := func(p int) bool { return abs(p-want) <= want/100 }
		for len(got) == 0 || !near(got[len(got)-1]) {
			select {
			case p := <-sets:
				got = append(got, p)
			case <-deadline:
				t.Fatalf("collection %d found %d live bytes: percents set %v, want %d", n, live[0].Value.Uint64(), got, want)
			}
		}
		if want <= 100 {
			t.Errorf("collection %d: percent %d, want above 100 for a live heap far below the headroom", n, want)
		}
		runtime.KeepAlive(keep)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
