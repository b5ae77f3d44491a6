package region_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestMemoryAndRedisDecideAlike plays the same random history through the
// in-memory store and the Redis script: local decisions at exact and
// coarse limits, remote regions' totals merged (duplicated, late, with
// and without trails), the store's own totals echoed back (Restore), and
// divergent histories, where a region's trail holds more hits than its
// count (two histories merged after a restart) or fewer. Every answer must
// be the same, field by field, and Redis's script must agree with the Go
// decision on every verdict (newRedisStore checks Mismatches).
func TestMemoryAndRedisDecideAlike(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			mem := region.NewMemory(region.MemoryConfig{Region: "here"})
			red := newRedisStore(t, srv.URL(), "here", region.Coalesce{})
			lim := window.Limit{Limit: 30, Window: 10 * time.Second}
			if seed%2 == 1 {
				lim.Limit = window.ExactMax + 50
			}
			key := fmt.Sprintf("diff/%d/%d", seed, time.Now().UnixNano())
			wMs := lim.WindowMs()
			nowMs := window.Bucket(1_760_000_000_000, lim.Window)*wMs + 17
			trails := map[string]window.Trail{} // remote region -> its trail of the current bucket
			bucket := window.Bucket(nowMs, lim.Window)
			for step := range 400 {
				nowMs += rng.Int64N(wMs / 30)
				if b := window.Bucket(nowMs, lim.Window); b != bucket {
					bucket = b
					clear(trails)
				}
				e := nowMs - bucket*wMs
				var totals []region.Total
				switch op := rng.IntN(10); {
				case op < 5:
					hits := 1 + rng.Uint64N(3)
					if lim.Limit > window.ExactMax && rng.IntN(4) == 0 {
						hits = 1 + rng.Uint64N(lim.Limit/20)
					}
					q := []region.Request{{Key: key, Limit: lim, Hits: hits, Now: time.UnixMilli(nowMs), Peek: op == 0}}
					a, b := make([]region.Result, 1), make([]region.Result, 1)
					if err := mem.Check(ctx, q, a); err != nil {
						t.Fatal(err)
					}
					if err := red.Check(ctx, q, b); err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(a[0], b[0]) {
						t.Fatalf("step %d at %d, %d hits: memory and Redis differ:\n memory %+v\n redis  %+v", step, e, hits, a[0], b[0])
					}
					continue
				case op < 8: // a remote region's growing trail, reported
					reg := []string{"r1", "r2"}[rng.IntN(2)]
					h := trails[reg]
					if rng.IntN(12) == 0 {
						// The region restarted and lost its count: a second
						// history of the bucket, whose trail merges with the
						// first granule by granule into more hits than
						// either count.
						h = nil
					}
					h.Add(e, wMs, 1+rng.Uint64N(4), false)
					trails[reg] = h
					n := h.Count()
					if rng.IntN(6) == 0 {
						n += rng.Uint64N(5) // hits counted without marks
					}
					totals = append(totals, region.Total{Key: key, Window: lim.Window, Bucket: bucket, Region: reg, Count: n, Trail: h})
					if rng.IntN(3) == 0 { // an older report, late
						totals = append(totals, region.Total{Key: key, Window: lim.Window, Bucket: bucket, Region: reg, Count: max(1, n/2)})
					}
					for _, s := range []region.Store{mem, red} {
						if err := s.Merge(ctx, totals); err != nil {
							t.Fatal(err)
						}
					}
				default: // the store's own totals, echoed back by a peer
					v, err := mem.Vectors(ctx, []region.BucketRef{{Key: key, Window: lim.Window, Bucket: bucket}})
					if err != nil {
						t.Fatal(err)
					}
					for _, tt := range v[0] {
						if tt.Region == "here" {
							totals = append(totals, tt)
						}
					}
					if err := mem.Restore(ctx, totals); err != nil {
						t.Fatal(err)
					}
					if err := red.Restore(ctx, totals); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}
