package gossip

import (
	"context"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
)

// FuzzHandle feeds arbitrary frames to a node's receive path (decode,
// validation against the sender and merge into a real in-memory store).
// Whatever merges came from a live member with its token and names only
// that member's region or its replicas, and buckets no later than now plus
// one window. A frame Decode refuses is dropped and
// counted exactly once and changes nothing; an accepted one is counted as
// received. A canary bucket merged before every input never changes (no
// frame can lower a count).
func FuzzHandle(f *testing.F) {
	// The receiver's clock is t0: buckets near it are live and merged, older
	// ones are dropped as expired.
	sec, minute := t0.Unix(), t0.Unix()/60
	good, _ := Encode(KindFlush, t0, testSender("a"), []region.Total{{Key: "k", Window: time.Second, Bucket: sec, Region: "a", Count: 3}}, 1360)
	rec, _ := Encode(KindReconcile, t0, testSender("a"), []region.Total{
		{Key: "canary", Window: time.Minute, Bucket: minute, Region: "a", Count: 1},
		{Key: "k2", Window: time.Minute, Bucket: minute - 1, Region: "a~00f00d", Count: 1 << 40},
	}, 1360)
	touch, _ := Encode(KindTouch, t0, testSender("b"), []region.Total{{Key: "t", Window: time.Second, Bucket: sec, Region: "b", Count: 1}}, 1360)
	repair, _ := EncodeEmpty(KindRepair, t0, testSender("a"))
	rejoin, _ := EncodeEmpty(KindRejoin, t0, testSender("a"))
	repaired, _ := Encode(KindRepaired, t0, testSender("a"), []region.Total{{Key: "r", Window: time.Second, Bucket: sec, Region: "b", Count: 2}}, 1360)
	for _, fr := range [][]byte{good[0], rec[0], touch[0], repair, rejoin, repaired[0], {}, {1}, {2, 1}} {
		f.Add(fr)
	}
	store := region.NewMemory(region.MemoryConfig{Region: "b", MaxKeys: 10000})
	canary := region.Total{Key: "canary", Window: time.Minute, Bucket: minute, Region: "a", Count: 1000}
	// The seeds must reach the store, or the canary check is vacuous.
	n0 := receiver(f, "b", region.NewMemory(region.MemoryConfig{Region: "b"}))
	deliver(n0, good[0])
	deliver(n0, rec[0])
	if got := counterValue(n0.met.merges); got != 3 {
		f.Fatalf("the seed frames merged %v totals, want 3", got)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n := receiver(t, "b", store)
		n.cfg.MaxTouched = 1000
		if err := store.Merge(context.Background(), []region.Total{canary}); err != nil {
			t.Fatal(err)
		}
		dropped := func() float64 {
			var s float64
			for _, r := range []string{"malformed", "version", "kind", "oversized"} {
				s += n.met.dropCount(r)
			}
			return s
		}
		m, decErr := Decode(b)
		n.handle(b)
		if merged := counterValue(n.met.merges); decErr == nil && merged > 0 {
			// Whatever was merged passed frame validation: a live member
			// with its token, reporting only its own region or replicas,
			// buckets no later than now plus one window.
			if m.Node != testSender(m.From).Node || m.Token != testSender(m.From).Token {
				t.Fatalf("merged %v totals from %q (token %x), not a member", merged, m.Node, m.Token)
			}
			for _, tt := range m.Totals {
				if !replicaOf(tt.Region, m.From) {
					t.Fatalf("merged a total of region %q from a member of %q", tt.Region, m.From)
				}
				if start := time.UnixMilli(tt.Bucket * tt.Window.Milliseconds()); start.After(t0.Add(tt.Window)) {
					t.Fatalf("merged bucket %d of %v starting %v, after now + one window", tt.Bucket, tt.Window, start)
				}
			}
		}
		if decErr != nil {
			if got := dropped(); got != 1 {
				t.Fatalf("refused frame (%v): %v drops counted, want 1", decErr, got)
			}
			if got := counterValue(n.met.merges); got != 0 {
				t.Fatalf("refused frame merged %v totals", got)
			}
		} else if got := dropped(); got != 0 {
			t.Fatalf("accepted frame counted %v drops", got)
		}
		v, err := store.Vectors(context.Background(), []region.BucketRef{{Key: canary.Key, Window: canary.Window, Bucket: canary.Bucket}})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range v[0] {
			if tt.Region == "a" && tt.Count < canary.Count {
				t.Fatalf("canary count for region a fell to %d, want >= %d", tt.Count, canary.Count)
			}
		}
	})
}
