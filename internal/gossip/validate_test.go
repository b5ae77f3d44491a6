package gossip

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
)

// TestHandleValidates: a frame merges only when a live member sends it with
// its token, naming only its own region (or replicas of it) and buckets
// no later than now plus one window; otherwise it is dropped whole and
// counted under its reason.
func TestHandleValidates(t *testing.T) {
	sec := t0.Unix()
	long := strings.Repeat("x", MaxRegionLen) // a region whose fallback name is cut
	fb := region.FallbackRegion(long)
	prefix := "a~" + strings.Repeat("0", MaxRegionLen-2) // a 64-byte name whose part before "~" prefixes "ab"
	tot := func(r string, b int64) region.Total {
		return region.Total{Key: "k", Window: time.Second, Bucket: b, Region: r, Count: 5}
	}
	cases := []struct {
		name   string
		from   Sender
		kind   Kind
		totals []region.Total
		reason string // "" when it merges
	}{
		{"own region", testSender("a"), KindFlush, []region.Total{tot("a", sec)}, ""},
		{"replica", testSender("a"), KindReconcile, []region.Total{tot("a~0f1e2d", sec)}, ""},
		{"next bucket", testSender("a"), KindFlush, []region.Total{tot("a", sec+1)}, ""},
		{"not a member", Sender{Node: "stranger", Region: "a", Token: testSender("a").Token}, KindFlush, []region.Total{tot("a", sec)}, "not_member"},
		{"wrong token", Sender{Node: "node-a", Region: "a", Token: 1}, KindFlush, []region.Total{tot("a", sec)}, "not_member"},
		{"claims another region", Sender{Node: "node-a", Region: "c", Token: testSender("a").Token}, KindFlush, []region.Total{tot("c", sec)}, "not_member"},
		{"made-up region", testSender("a"), KindFlush, []region.Total{tot("a", sec), tot("zz", sec)}, "foreign_region"},
		{"another member's region", testSender("a"), KindReconcile, []region.Total{tot("c", sec)}, "foreign_region"},
		{"prefix is not a replica", testSender("a"), KindFlush, []region.Total{tot("ab", sec)}, "foreign_region"},
		{"replica of a prefix", testSender("ap"), KindFlush, []region.Total{tot(prefix, sec)}, "foreign_region"},
		{"replica id not 6 hex digits", testSender("a"), KindFlush, []region.Total{tot("a~0f1e2", sec)}, "foreign_region"},
		{"replica id upper case", testSender("a"), KindFlush, []region.Total{tot("a~0F1E2D", sec)}, "foreign_region"},
		{"replica of a replica", testSender("a"), KindFlush, []region.Total{tot("a~0f1e2d~0f1e2d", sec)}, "foreign_region"},
		{"far-future bucket", testSender("a"), KindFlush, []region.Total{tot("a", sec+2)}, "future_bucket"},
		{"calendar bucket", testSender("a"), KindFlush, []region.Total{calTot(t0, 0)}, ""},
		{"next calendar bucket", testSender("a"), KindFlush, []region.Total{calTot(t0, 1)}, ""},
		{"far-future calendar bucket", testSender("a"), KindFlush, []region.Total{calTot(t0, 2)}, "future_bucket"},
		{"bucket before the epoch", testSender("a"), KindFlush, []region.Total{tot("a", -1<<60)}, "old_bucket"},
		{"touch before the epoch", testSender("b"), KindTouch, []region.Total{tot("b", -1<<60)}, "old_bucket"},
		{"touch from another region", testSender("a"), KindTouch, []region.Total{tot("a", sec)}, "foreign_region"},
		{"flush from own region", testSender("b"), KindFlush, []region.Total{tot("b", sec)}, "foreign_kind"},
		{"region too long for a whole replica name", Sender{Node: "node-long", Region: long, Token: 9}, KindFlush, []region.Total{tot(fb, sec)}, "not_member"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := region.NewMemory(region.MemoryConfig{Region: "b"})
			n := receiver(t, "b", store)
			n.setMember(memberNode("node-long", long, 9), "alive")
			fs, err := Encode(c.kind, t0, c.from, c.totals, 1360)
			if err != nil || len(fs) != 1 {
				t.Fatalf("Encode() = %d frames, %v", len(fs), err)
			}
			deliver(n, fs[0])
			merged := counterValue(n.met.merges)
			if c.reason == "" {
				if got, want := merged, float64(len(c.totals)); got != want {
					t.Errorf("merged %v totals, want %v", got, want)
				}
				return
			}
			if merged != 0 {
				t.Errorf("merged %v totals, want none", merged)
			}
			if got := n.met.dropCount(c.reason); got != 1 {
				t.Errorf("dropped(%s) = %v, want 1", c.reason, got)
			}
		})
	}
}

// TestReplicasBounded: a member region's totals under more than
// MaxReplicas replica names with live buckets are dropped, so a bucket
// holds a bounded number of regions; a name frees up once its buckets
// expire.
func TestReplicasBounded(t *testing.T) {
	store := region.NewMemory(region.MemoryConfig{Region: "b"})
	n := receiver(t, "b", store)
	n.cfg.MaxReplicas = 4
	sec := t0.Unix()
	var ts []region.Total
	for i := range 10 {
		ts = append(ts, region.Total{Key: "k", Window: time.Second, Bucket: sec, Region: fmt.Sprintf("a~%06x", i), Count: 1})
	}
	fs, _ := Encode(KindFlush, t0, testSender("a"), ts, 1360)
	deliver(n, fs[0])
	v, err := store.Vectors(context.Background(), []region.BucketRef{{Key: "k", Window: time.Second, Bucket: sec}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(v[0]), 4; got != want {
		t.Errorf("bucket holds %d regions, want the bound %d: %v", got, want, v[0])
	}
	if got, want := n.met.dropCount("replicas_full"), 1.0; got != want {
		t.Errorf("dropped(replicas_full) = %v, want %v", got, want)
	}
	// Past the bucket's expiry a new name is admitted.
	later := t0.Add(time.Minute)
	n.cfg.Now = func() time.Time { return later }
	fs, _ = Encode(KindFlush, later, testSender("a"), []region.Total{{Key: "k", Window: time.Second, Bucket: later.Unix(), Region: "a~00000a", Count: 1}}, 1360)
	deliver(n, fs[0])
	if got, want := counterValue(n.met.merges), 5.0; got != want {
		t.Errorf("merges = %v, want %v (the new name after the old ones expired)", got, want)
	}
}
