package region

import (
	"context"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

// TestResetMarkRaised: merging or restoring a reset instant's total
// raises the reset marker of its bucket under the store's own region,
// after the instant; a merge of any other key, or of the marker itself
// (which takes the other region's count as any total's), does not. The in-memory store raises it when the instant grew, Redis
// for every reset instant's total it takes.
func TestResetMarkRaised(t *testing.T) {
	ctx := context.Background()
	const year = -365 * 24 * time.Hour // a calendar bucket's name: minus its length
	bucket := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	instant := Total{Key: ResetKeyPrefix + "i:alice", Window: year, Bucket: bucket, Region: "us", Count: 1_900_000_000_000}
	for _, tc := range []struct {
		name    string
		store   func(t *testing.T) Store
		again   uint64 // the marker after the same total is merged again
		restore func(Store, context.Context, []Total) error
	}{
		{"memory", func(t *testing.T) Store { return NewMemory(MemoryConfig{Region: "eu"}) }, 1,
			func(s Store, ctx context.Context, ts []Total) error { return s.(*Memory).Restore(ctx, ts) }},
		{"redis", func(t *testing.T) Store {
			return newTestRedis(t, RedisConfig{URL: redistest.Start(t).URL(), Region: "eu"})
		}, 2, func(s Store, ctx context.Context, ts []Total) error { return s.(*Redis).Restore(ctx, ts) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.store(t)
			mark := func() uint64 {
				t.Helper()
				v, err := s.Vectors(ctx, []BucketRef{{Key: ResetMarkKey, Window: year, Bucket: bucket}})
				if err != nil {
					t.Fatal(err)
				}
				var n uint64
				for _, c := range v[0] {
					if c.Region == "eu" {
						n = c.Count
					}
				}
				return n
			}
			other := instant
			other.Key = "i:alice"
			marker := instant
			marker.Key = ResetMarkKey
			if err := s.Merge(ctx, []Total{other, marker}); err != nil {
				t.Fatal(err)
			}
			if got := mark(); got != 0 {
				t.Fatalf("the store's own marker count %d after merging a counter and the marker, want 0", got)
			}
			// A marker total from the network is not merged at all: each
			// store keeps its own, and one sent by a member would make
			// every node look at its keys' resets again.
			if v, err := s.Vectors(ctx, []BucketRef{{Key: ResetMarkKey, Window: year, Bucket: bucket}}); err != nil || len(v[0]) != 0 {
				t.Fatalf("marker after merging another region's marker total = %v, %v; want no count", v, err)
			}
			if err := s.Merge(ctx, []Total{instant}); err != nil {
				t.Fatal(err)
			}
			if got := mark(); got != 1 {
				t.Fatalf("marker %d after merging a reset instant, want 1", got)
			}
			if err := s.Merge(ctx, []Total{instant}); err != nil {
				t.Fatal(err)
			}
			if got := mark(); got != tc.again {
				t.Fatalf("marker %d after merging the same instant again, want %d", got, tc.again)
			}
			own := instant
			own.Region, own.Count = "eu", instant.Count+1
			if err := tc.restore(s, ctx, []Total{own}); err != nil {
				t.Fatal(err)
			}
			if got := mark(); got != tc.again+1 {
				t.Fatalf("marker %d after restoring the store's own reset, want %d", got, tc.again+1)
			}
		})
	}
}
