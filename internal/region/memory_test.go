package region

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
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

// TestMemoryBoundConcurrent: concurrent inserts of distinct keys in every
// shard never leave more than MaxKeys keys, and every key past the bound
// is counted as an eviction.
func TestMemoryBoundConcurrent(t *testing.T) {
	const maxKeys, workers, perWorker = 100, 8, 2000
	m := NewMemory(MemoryConfig{MaxKeys: maxKeys})
	now := time.UnixMilli(1_700_000_000_000)
	l := window.Limit{Limit: 5, Window: time.Minute}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]Result, 1)
			for i := range perWorker {
				if err := m.Check(context.Background(), []Request{{Key: fmt.Sprintf("w%d/%d", w, i), Limit: l, Hits: 1, Now: now}}, res); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	held := 0
	for i := range m.shards {
		held += len(m.shards[i].m)
	}
	if held != maxKeys || m.Keys() != maxKeys {
		t.Errorf("holds %d keys (Keys() = %d), want %d", held, m.Keys(), maxKeys)
	}
	if got, want := m.Evictions(), uint64(workers*perWorker-maxKeys); got != want {
		t.Errorf("Evictions() = %d, want %d", got, want)
	}
}

// TestMemoryMergeRuns checks that merging totals in one call, where runs
// of one key and window share a lookup, leaves the same counts as merging
// them one at a time: random totals over a few keys, windows, buckets and
// regions, the local region's (ignored by Merge) among them.
func TestMemoryMergeRuns(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	keys, windows := []string{"a", "b", "c"}, []time.Duration{time.Minute, time.Hour}
	regions := []string{"here", "eu", "us", "ap"}
	b0 := window.Bucket(1_700_000_000_000, time.Minute)
	for round := range 50 {
		totals := make([]Total, 1+rng.IntN(40))
		var refs []BucketRef
		for i := range totals {
			w := windows[rng.IntN(len(windows))]
			b := window.Bucket(1_700_000_000_000, w) - int64(rng.IntN(2))
			if w == time.Minute {
				b = b0 - int64(rng.IntN(2))
			}
			totals[i] = Total{Key: keys[rng.IntN(len(keys))], Window: w, Bucket: b,
				Region: regions[rng.IntN(len(regions))], Count: uint64(1 + rng.IntN(100))}
			refs = append(refs, BucketRef{Key: totals[i].Key, Window: w, Bucket: b})
		}
		whole := NewMemory(MemoryConfig{Region: "here"})
		single := NewMemory(MemoryConfig{Region: "here"})
		if err := whole.Merge(ctx, totals); err != nil {
			t.Fatal(err)
		}
		for i := range totals {
			if err := single.Merge(ctx, totals[i:i+1]); err != nil {
				t.Fatal(err)
			}
		}
		got, err := whole.Vectors(ctx, refs)
		if err != nil {
			t.Fatal(err)
		}
		want, err := single.Vectors(ctx, refs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range refs {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("round %d, %+v: merged in one call %v, one at a time %v", round, refs[i], got[i], want[i])
			}
		}
		if whole.Keys() != single.Keys() {
			t.Fatalf("round %d: %d keys merged in one call, %d one at a time", round, whole.Keys(), single.Keys())
		}
	}
}

// TestMemoryResultTrailsNeverChange: the trails a result holds are the
// store's own marks, lent rather than copied, so later decisions on the
// key, in the same millisecond (which changes a trail's last mark in
// place) or later ones, and merges, must leave every trail handed out as
// it was, exact and coarse.
func TestMemoryResultTrailsNeverChange(t *testing.T) {
	type held struct {
		got, want window.Trail
		what      string
	}
	for _, limit := range []uint64{1000, 1_000_000} { // exact, coarse
		m := NewMemory(MemoryConfig{Region: "here"})
		ctx := context.Background()
		l := window.Limit{Limit: limit, Window: time.Minute}
		rng := rand.New(rand.NewPCG(limit, 3))
		start := time.UnixMilli(1_700_000_040_000)
		var hs []held
		keep := func(what string, tr window.Trail) {
			if len(tr) > 0 {
				hs = append(hs, held{got: tr, want: slices.Clone(tr), what: what})
			}
		}
		ms := int64(0)
		for i := range 3000 {
			if rng.IntN(3) > 0 {
				ms += rng.Int64N(200)
			}
			now := start.Add(time.Duration(ms) * time.Millisecond)
			res := make([]Result, 1)
			if err := m.Check(ctx, []Request{{Key: "k", Limit: l, Hits: 1, Now: now}}, res); err != nil {
				t.Fatal(err)
			}
			for _, rc := range res[0].Regions {
				keep(fmt.Sprintf("decision %d current of %s", i, rc.Region), rc.CurrentTrail)
				keep(fmt.Sprintf("decision %d previous of %s", i, rc.Region), rc.PreviousTrail)
			}
			keep(fmt.Sprintf("decision %d local", i), res[0].LocalTrail)
			if i%50 == 0 {
				// A merge of the local region's own trail, as a peer
				// echoes it back, and of another region's.
				tr := slices.Clone(res[0].LocalTrail)
				_ = m.Restore(ctx, []Total{{Key: "k", Window: time.Minute, Bucket: res[0].Bucket, Region: "here", Count: res[0].Local, Trail: tr}})
				_ = m.Merge(ctx, []Total{{Key: "k", Window: time.Minute, Bucket: res[0].Bucket, Region: "there", Count: uint64(i), Trail: window.Trail{{At: 5, Cum: uint64(i) + 1}}}})
			}
		}
		if len(hs) < 1000 {
			t.Fatalf("limit %d: %d trails held, want many", limit, len(hs))
		}
		for _, h := range hs {
			if !slices.Equal(h.got, h.want) {
				t.Fatalf("limit %d: %s changed after it was handed out: %v, was %v", limit, h.what, h.got, h.want)
			}
		}
	}
}

// TestMemoryNoResets: NoResets holds while no reset instant's key is
// held: a peek at one creates none, a decision on one, a restore or a
// merge into one does, and the key's eviction or expiry ends it. The
// reset marker that a restore or merge raises is no reset instant.
func TestMemoryNoResets(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	l := window.Limit{Limit: 5, Window: time.Second}
	key := ResetKeyPrefix + "alice"
	bucket := window.Bucket(window.Ms(now), time.Second)
	for _, tc := range []struct {
		name string
		add  func(m *Memory) error
	}{
		{"check", func(m *Memory) error {
			return m.Check(ctx, []Request{{Key: key, Limit: l, Hits: 1, Now: now}}, make([]Result, 1))
		}},
		{"restore", func(m *Memory) error {
			return m.Restore(ctx, []Total{{Key: key, Window: time.Second, Bucket: bucket, Region: "local", Count: 1}})
		}},
		{"merge", func(m *Memory) error {
			return m.Merge(ctx, []Total{{Key: key, Window: time.Second, Bucket: bucket, Region: "us", Count: 1}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMemory(MemoryConfig{MaxKeys: 2}) // a reset key and the marker
			check := func(m *Memory, k string, at time.Time, peek bool) {
				t.Helper()
				if err := m.Check(ctx, []Request{{Key: k, Limit: l, Hits: 1, Now: at, Peek: peek}}, make([]Result, 1)); err != nil {
					t.Fatal(err)
				}
			}
			check(m, key, now, true)
			if !m.NoResets() {
				t.Fatal("NoResets() = false after a peek at a reset key, want true")
			}
			if err := tc.add(m); err != nil {
				t.Fatal(err)
			}
			if m.NoResets() {
				t.Fatal("NoResets() = true holding a reset key, want false")
			}
			// Other keys evict it: each evicts from its own shard, or the
			// first other shard with a key, so the reset key goes only when
			// a new key lands in its shard or no earlier shard holds one.
			// With it in the last shard, a hundred keys often left it in
			// place; ten thousand leave it no real chance.
			for i := 0; !m.NoResets(); i++ {
				if i == 10000 {
					t.Fatal("NoResets() = false after 10,000 other keys, want true")
				}
				check(m, fmt.Sprintf("k%d", i), now, false)
			}
			if got, want := m.Keys(), 2; got != want {
				t.Fatalf("Keys() = %d, want %d", got, want)
			}

			m = NewMemory(MemoryConfig{})
			if err := tc.add(m); err != nil {
				t.Fatal(err)
			}
			if m.NoResets() {
				t.Fatal("NoResets() = true holding a reset key, want false")
			}
			check(m, key, now.Add(time.Hour), true) // sweeps the key's shard
			check(m, ResetMarkKey, now.Add(time.Hour), true)
			if got, want := m.Keys(), 0; got != want {
				t.Fatalf("Keys() = %d after the sweep, want %d", got, want)
			}
			if !m.NoResets() {
				t.Errorf("NoResets() = false after the reset key's expiry, want true")
			}
		})
	}
}

// TestMemoryGrowIsMerge: a trail grown in place (regionN.grow) is what
// window.Trail.Merge makes of the two, for random trails, each against a
// later state of itself (more hits, as the failover's mirror passes
// them) and against a trail of other hits; and a lent trail's marks are
// never changed in place.
func TestMemoryGrowIsMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	const wMs = 60_000
	grown := 0
	for i := range 20_000 {
		exact := rng.IntN(2) == 0
		add := func(h window.Trail, from int64, n int) (window.Trail, int64) {
			at := from
			for range n {
				at += rng.Int64N(wMs/50 + 1)
				if at >= wMs {
					break
				}
				h.Add(at, wMs, 1+rng.Uint64N(3), exact)
			}
			return h, at
		}
		base, at := add(nil, 0, 1+rng.IntN(40))
		later, _ := add(slices.Clone(base), at, rng.IntN(4))
		other, _ := add(nil, 0, 1+rng.IntN(40))
		for _, o := range []window.Trail{later, other, base} {
			lent := rng.IntN(4) == 0
			c := regionN{h: slices.Clone(base), lent: lent}
			held := slices.Clone(c.h)
			reader := c.h[:len(c.h):len(c.h)]
			want := slices.Clone(base)
			want.Merge(o, wMs)
			if !c.grow(o, wMs) {
				if !slices.Equal(c.h, base) {
					t.Fatalf("case %d: grow refused but changed the trail %v to %v", i, base, c.h)
				}
				continue
			}
			grown++
			if !slices.Equal(c.h, want) {
				t.Fatalf("case %d: grow(%v) of %v = %v, Merge makes %v", i, o, base, c.h, want)
			}
			if lent && !slices.Equal(reader, held) {
				t.Fatalf("case %d: grow changed lent marks %v to %v", i, held, reader)
			}
		}
		if c := (regionN{h: slices.Clone(base)}); !c.grow(later, wMs) {
			t.Fatalf("case %d: grow refused %v, a later state of %v", i, later, base)
		}
	}
	if grown < 20_000 {
		t.Errorf("grew %d trails, want most of the 20,000 later states at least", grown)
	}
}

// TestRegionCountsOneRegion: with no region's counts but the local
// region's, regionCounts lists its one entry as the general sort and
// merge of every region's entries does.
func TestRegionCountsOneRegion(t *testing.T) {
	const wMs = 60_000
	bucket := func(region string, hits int) *memBucket {
		if hits < 0 {
			return nil
		}
		b := &memBucket{private: true}
		for i := range hits {
			b.add(region, 1, int64(i)*997%wMs, wMs, true, true)
		}
		return b
	}
	for _, cur := range []int{-1, 0, 1, 5} {
		for _, prev := range []int{-1, 0, 3} {
			for _, marked := range []bool{false, true} {
				c, p := bucket("eu", cur), bucket("eu", prev)
				got := regionCounts("eu", c, p, wMs, marked, true)
				want := mergedRegionCounts("eu", c, p, wMs, marked, true)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("cur %d prev %d marked %v: %+v, want %+v", cur, prev, marked, got, want)
				}
			}
		}
	}
}
