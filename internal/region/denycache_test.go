package region_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestDenyCacheNeverDeniesWhatTheStoreAllows drives random traffic through
// a DenyCache and, after every request it answered from memory, asks the
// store behind it (a Peek at the same instant) whether it would have
// allowed that request. It never may. In the "through" runs every write
// goes through the cache and the cached answer must equal the store's
// exactly; in the "behind" runs other nodes of the region (Checks on the
// store itself) and gossip (Merges into the store itself) add counts that
// the cache never sees, so its answers are only required to be safe.
func TestDenyCacheNeverDeniesWhatTheStoreAllows(t *testing.T) {
	stores := []struct {
		name  string
		open  func(t *testing.T) region.Store
		steps int
	}{
		{"memory", func(t *testing.T) region.Store { return region.NewMemory(region.MemoryConfig{Region: "here"}) }, 20000},
		{"redis", func(t *testing.T) region.Store {
			srv := redistest.Start(t)
			return newRedisStore(t, srv.URL(), "here", region.Coalesce{})
		}, 4000},
	}
	for _, st := range stores {
		for _, behind := range []bool{false, true} {
			name := st.name + "/through"
			if behind {
				name = st.name + "/behind"
			}
			t.Run(name, func(t *testing.T) {
				u := st.open(t)
				c := region.NewDenyCache(u, region.DenyCacheConfig{MaxKeys: 128})
				runDenyProperty(t, c, u, st.steps, behind, rand.New(rand.NewPCG(7, uint64(len(name)))))
			})
		}
	}
}

func runDenyProperty(t *testing.T, c *region.DenyCache, u region.Store, steps int, behind bool, rng *rand.Rand) {
	ctx := context.Background()
	limits := []window.Limit{
		{Limit: 10, Window: time.Second},
		{Limit: 7, Window: 2 * time.Second},
		{Limit: 12, Window: time.Second}, // the same state as the first, another limit
		{Limit: 5, Window: time.Second, Algorithm: window.FixedWindow},
		{Limit: 6, Window: time.Second, Algorithm: window.TokenBucket},
		{Limit: 4, Window: time.Second, Algorithm: window.SlidingLog},
	}
	keys := make([]string, 3)
	for i := range keys {
		keys[i] = fmt.Sprintf("deny/%s/%d/%d", t.Name(), i, rand.Uint64())
	}
	// remote[key][window][bucket] is the far region's total, which only grows.
	remote := map[string]uint64{}
	now := t0
	var cached, cachedRemote, cachedShifted, cachedGCRA int
	for step := 0; step < steps; step++ {
		now = now.Add(time.Duration(rng.IntN(12)) * time.Millisecond)
		key := keys[rng.IntN(len(keys))]
		l := limits[rng.IntN(len(limits))]
		switch op := rng.IntN(100); {
		case op < 70:
			q := region.Request{Key: key, Limit: l, Hits: 1 + uint64(rng.IntN(int(min(l.Limit, 3)))), Now: now, Peek: rng.IntN(10) == 0}
			before := c.DenyCacheStats().Hits
			r, err := check(t, c, q)
			if err != nil {
				t.Fatalf("step %d: Check: %v", step, err)
			}
			if c.DenyCacheStats().Hits == before {
				continue
			}
			cached++
			if r.Allowed {
				t.Fatalf("step %d: an answer from memory allowed %+v", step, q)
			}
			p := q
			p.Peek = true
			want, err := check(t, u, p)
			if err != nil {
				t.Fatalf("step %d: Peek: %v", step, err)
			}
			if want.Allowed {
				t.Fatalf("step %d: cached denial of %+v at %d, but the store allows it: cached %+v, store %+v",
					step, q, window.Ms(now), r.Decision, want.Decision)
			}
			if !behind {
				if r.Decision != want.Decision || !reflect.DeepEqual(r.Regions, want.Regions) || r.Local != want.Local {
					t.Fatalf("step %d: cached answer for %+v\n got  %+v %+v local %d\n want %+v %+v local %d",
						step, q, r.Decision, r.Regions, r.Local, want.Decision, want.Regions, want.Local)
				}
			}
			if l.Algorithm == window.TokenBucket {
				cachedGCRA++
			}
			for _, rc := range r.Regions {
				if rc.Region == "far" && (rc.Current > 0 || rc.Previous > 0) {
					cachedRemote++
				}
			}
			if len(r.Regions) > 0 && r.Local == 0 && r.Regions[len(r.Regions)-1].Current == 0 {
				cachedShifted++
			}
		case op < 85:
			// Another region's total for this bucket or the previous one.
			w := l.Window
			if !l.Algorithm.Counted() {
				w = time.Second
			}
			b := window.Bucket(window.Ms(now), w) - int64(rng.IntN(2))
			rk := key + "/" + strconv.FormatInt(w.Milliseconds(), 10) + "/" + strconv.FormatInt(b, 10)
			remote[rk] += 1 + uint64(rng.IntN(4))
			var s region.Store = c
			if behind && rng.IntN(2) == 0 {
				s = u
			}
			if err := s.Merge(ctx, []region.Total{{Key: key, Window: w, Bucket: b, Region: "far", Count: remote[rk]}}); err != nil {
				t.Fatalf("step %d: Merge: %v", step, err)
			}
		default:
			// Another node of this region admits traffic.
			if !behind {
				continue
			}
			if _, err := check(t, u, region.Request{Key: key, Limit: l, Hits: 1, Now: now}); err != nil {
				t.Fatalf("step %d: Check on the store: %v", step, err)
			}
		}
	}
	st := c.DenyCacheStats()
	t.Logf("%d steps: %d answers from memory (%d with remote counts, %d in a later bucket, %d token bucket), %+v",
		steps, cached, cachedRemote, cachedShifted, cachedGCRA, st)
	if cached == 0 || cachedRemote == 0 || cachedShifted == 0 || cachedGCRA == 0 {
		t.Errorf("the run did not exercise every kind of cached denial: %d, %d remote, %d shifted, %d token bucket",
			cached, cachedRemote, cachedShifted, cachedGCRA)
	}
}

func TestDenyCacheBoundedAndExpires(t *testing.T) {
	m := region.NewMemory(region.MemoryConfig{})
	c := region.NewDenyCache(m, region.DenyCacheConfig{MaxKeys: 64})
	l := window.Limit{Limit: 1, Window: time.Minute}
	for i := 0; i < 1000; i++ {
		k := "k" + strconv.Itoa(i)
		for j, want := range []bool{true, false} {
			if r, err := check(t, c, region.Request{Key: k, Limit: l, Hits: 1, Now: t0}); err != nil || r.Allowed != want {
				t.Fatalf("%s request %d: Allowed = %v (%v), want %v", k, j, r.Allowed, err, want)
			}
		}
	}
	st := c.DenyCacheStats()
	if st.Entries > 64 {
		t.Errorf("Entries = %d, want at most MaxKeys 64", st.Entries)
	}
	if got, want := st.Evictions, uint64(1000-st.Entries); got != want {
		t.Errorf("Evictions = %d, want %d (1000 denials, %d held)", got, want, st.Entries)
	}

	// A denial is answered from memory until its RetryAfter, not after.
	c = region.NewDenyCache(m, region.DenyCacheConfig{})
	k := "expiring"
	now := t0.Add(10 * time.Second)
	check(t, c, region.Request{Key: k, Limit: l, Hits: 1, Now: now})
	r, _ := check(t, c, region.Request{Key: k, Limit: l, Hits: 1, Now: now})
	if r.Allowed {
		t.Fatal("second request allowed, want denied")
	}
	retry := now.Add(r.RetryAfter)
	for _, tc := range []struct {
		name      string
		at        time.Time
		wantHits  uint64
		wantAllow bool
	}{
		{"just before", retry.Add(-time.Millisecond), 1, false},
		{"at RetryAfter", retry, 0, true},
	} {
		before := c.DenyCacheStats().Hits
		r, err := check(t, c, region.Request{Key: k, Limit: l, Hits: 1, Now: tc.at, Peek: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.DenyCacheStats().Hits - before; got != tc.wantHits || r.Allowed != tc.wantAllow {
			t.Errorf("%s: answers from memory %d, Allowed %v; want %d, %v", tc.name, got, r.Allowed, tc.wantHits, tc.wantAllow)
		}
	}
	if got := c.DenyCacheStats().Entries; got != 0 {
		t.Errorf("Entries after expiry = %d, want 0", got)
	}
}

// commandCalls returns the calls per command from INFO commandstats,
// leaving out INFO and CONFIG themselves.
func commandCalls(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("INFO commandstats line %q: %v", line, err)
		}
		out[name] = n
	}
	return out
}

// TestDenyCacheRedisCalls counts the commands Redis runs (INFO
// commandstats): none for a denial inside a remembered one, one script
// call for an admitted request.
func TestDenyCacheRedisCalls(t *testing.T) {
	srv := redistest.Start(t)
	c := region.NewDenyCache(newRedisStore(t, srv.URL(), "here", region.Coalesce{}), region.DenyCacheConfig{})
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	reset := func() {
		t.Helper()
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l := window.Limit{Limit: 5, Window: time.Minute}
	for i := 0; i < 6; i++ {
		check(t, c, region.Request{Key: "hot", Limit: l, Hits: 1, Now: t0})
	}

	reset()
	const denied = 1000
	for i := 0; i < denied; i++ {
		r, err := check(t, c, region.Request{Key: "hot", Limit: l, Hits: 1, Now: t0.Add(time.Duration(i) * time.Millisecond)})
		if err != nil || r.Allowed {
			t.Fatalf("request %d: Allowed %v, %v; want denied", i, r.Allowed, err)
		}
	}
	// A batch of denials, as CheckBatch sends them.
	batch := make([]region.Request, 10)
	for i := range batch {
		batch[i] = region.Request{Key: "hot", Limit: l, Hits: 1 + uint64(i%5), Now: t0.Add(2 * time.Second)}
	}
	if err := c.Check(ctx, batch, make([]region.Result, len(batch))); err != nil {
		t.Fatal(err)
	}
	if got := commandCalls(t, admin); len(got) != 0 {
		t.Errorf("%d denials inside a cached denial ran Redis commands %v, want none", denied+len(batch), got)
	}

	reset()
	const admitted = 50
	for i := 0; i < admitted; i++ {
		r, err := check(t, c, region.Request{Key: "cold" + strconv.Itoa(i), Limit: l, Hits: 1, Now: t0})
		if err != nil || !r.Allowed {
			t.Fatalf("cold request %d: Allowed %v, %v; want allowed", i, r.Allowed, err)
		}
	}
	// INFO commandstats also counts the commands a script runs.
	inScript := map[string]bool{"hgetall": true, "hincrby": true, "hset": true, "pexpire": true}
	got := commandCalls(t, admin)
	if got["evalsha"] != admitted {
		t.Errorf("%d admitted requests made %d script calls, want %d", admitted, got["evalsha"], admitted)
	}
	for name, n := range got {
		if name != "evalsha" && !inScript[name] {
			t.Errorf("%d admitted requests ran %s %d times, want only script calls", admitted, name, n)
		}
	}
}
