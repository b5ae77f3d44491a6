package gossip

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// receiver returns a Node that is only a receive path (decode and merge)
// over store, for property tests of the merge without sockets.
func receiver(t testing.TB, regionName string, store Store) *Node {
	t.Helper()
	cfg := Config{Name: "r", Region: regionName, Now: func() time.Time { return t0 }}.withDefaults()
	n := &Node{cfg: cfg, store: store, met: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		touched: map[int64]map[ref]struct{}{}, newest: map[string]time.Time{}, offsets: map[string]time.Duration{}, skewed: map[string]bool{},
		members: map[string]*member{}, replicas: map[string]map[string]time.Time{}}
	n.met.node = n
	n.initRepair()
	for _, r := range testRegions {
		n.setMember(memberNode(testSender(r).Node, r, testSender(r).Token), "alive")
	}
	return n
}

// deliver hands frame to n's receive path as its sender would send it:
// stamped for n's incarnation with the sender's next sequence number for
// n (a state frame, or bytes that do not decode, as they are).
func deliver(n *Node, frame []byte) {
	if m, err := Decode(frame); err == nil && m.Kind != KindState {
		testSeqs.Lock()
		if testSeqs.m == nil {
			testSeqs.m = map[*Node]map[string]uint64{}
		}
		if testSeqs.m[n] == nil {
			testSeqs.m[n] = map[string]uint64{}
		}
		testSeqs.m[n][m.Node]++
		s := testSeqs.m[n][m.Node]
		testSeqs.Unlock()
		frame = stamp(frame, n.token, s)
	}
	n.handle(frame)
}

// testSeqs are the sequence numbers deliver used, per receiver and sender.
var testSeqs struct {
	sync.Mutex
	m map[*Node]map[string]uint64
}

// testRegions are the regions whose test senders (testSender) a receiver
// knows as live members.
var testRegions = []string{"a", "b", "c", "ap", "eu", "us"}

// testSender is the member of region r that test frames come from.
func testSender(r string) Sender { return Sender{Node: "node-" + r, Region: r, Token: 0x5eed} }

// TestMergeIdempotentOrderFree is invariant 3 as a property: regions "a"
// and "c" count up, recording where their hits fell (window.Trail); every
// total they report is encoded into frames that reach region "b"
// duplicated, reordered and some of them lost. At every step b's state for
// each region never goes back and never passes the truth (counts, last
// offsets and runs no larger, first offsets no smaller); once the last
// totals are delivered (a later message repairs lost ones), b holds exactly
// the truth. Senders encode some frames as a node before fine trails
// does (Encode, trails gathered into spans) and the others fine
// (EncodeFine), as in a rolling upgrade. It runs on the in-memory store
// and on a real Redis.
func TestMergeIdempotentOrderFree(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		testMergeOrderFree(t, 50, func(string) Store { return region.NewMemory(region.MemoryConfig{Region: "b"}) })
	})
	t.Run("redis", func(t *testing.T) {
		testMergeOrderFree(t, 5, func(prefix string) Store { return newTestStore(t, "b") })
	})
}

func testMergeOrderFree(t *testing.T, seeds uint64, newStore func(string) Store) {
	const W = time.Second
	type state struct {
		n uint64
		h window.Trail
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 7))
		store := newStore(fmt.Sprint(seed))
		n := receiver(t, "b", store)
		keys := []string{fmt.Sprintf("k1/%d", seed), fmt.Sprintf("k2/%d", seed), fmt.Sprintf("k3/%d", seed)}
		bucket := t0.Unix()
		truth := map[[2]string]state{} // (key, region) -> state
		at := map[[2]string]int64{}    // (key, region) -> offset of the last hit
		var frames [][]byte
		for range 200 {
			reg := []string{"a", "c"}[rng.IntN(2)]
			key := keys[rng.IntN(len(keys))]
			kr := [2]string{key, reg}
			hits := 1 + rng.Uint64N(5)
			st := truth[kr]
			st.n += hits
			if rng.IntN(4) > 0 { // some hits are counted without halves
				at[kr] = min(at[kr]+rng.Int64N(40), 999)
				st.h.Add(at[kr], 1000, hits, false)
			}
			truth[kr] = st
			enc := Encode
			if rng.IntN(2) == 0 {
				enc = EncodeFine
			}
			fs, err := enc(KindFlush, t0, testSender(reg), []region.Total{{Key: key, Window: W, Bucket: bucket, Region: reg, Count: st.n, Trail: st.h}}, 1360)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fs {
				for range 1 + rng.IntN(3) { // 1 to 3 copies
					frames = append(frames, f)
				}
			}
		}
		rng.Shuffle(len(frames), func(i, j int) { frames[i], frames[j] = frames[j], frames[i] })
		// The final totals are sent again at the end (reconciliation).
		// Each region reports its own final totals.
		final := map[string][]region.Total{}
		for kr, st := range truth {
			final[kr[1]] = append(final[kr[1]], region.Total{Key: kr[0], Window: W, Bucket: bucket, Region: kr[1], Count: st.n, Trail: st.h})
		}
		var fs [][]byte
		for reg, ts := range final {
			f, _ := EncodeFine(KindReconcile, t0, testSender(reg), ts, MaxMessage)
			fs = append(fs, f...)
		}
		last := map[[2]string]state{}
		// within reports whether trail x is no further than y from nothing:
		// in every merge span, no more hits and no later last hit.
		within := func(x, y window.Trail) bool {
			for i, m := range x {
				g := window.MergeSpan(m.At, 1000)
				var n uint64
				last := int64(-1)
				for j, o := range y {
					if window.MergeSpan(o.At, 1000) == g {
						n, last = n+y.N(j), o.At
					}
				}
				if x.N(i) > n || m.At > last {
					return false
				}
			}
			return true
		}
		check := func(step int) {
			refs := make([]region.BucketRef, len(keys))
			for i, k := range keys {
				refs[i] = region.BucketRef{Key: k, Window: W, Bucket: bucket}
			}
			vecs, err := store.Vectors(context.Background(), refs)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range vecs {
				for _, tt := range v {
					kr := [2]string{keys[i], tt.Region}
					got, was, max := state{tt.Count, tt.Trail}, last[kr], truth[kr]
					if got.n < was.n || !within(was.h, got.h) {
						t.Fatalf("seed %d step %d: %v went back from %+v to %+v", seed, step, kr, was, got)
					}
					if got.n > max.n || !within(got.h, max.h) {
						t.Fatalf("seed %d step %d: %v = %+v passes the truth %+v", seed, step, kr, got, max)
					}
					last[kr] = got
				}
			}
		}
		for i, f := range frames {
			if rng.Float64() < 0.2 {
				continue // lost
			}
			deliver(n, f)
			if i%10 == 0 {
				check(i)
			}
		}
		for _, f := range fs {
			deliver(n, f)
		}
		check(len(frames))
		for kr, want := range truth {
			if got := last[kr]; got.n != want.n || !slices.Equal(got.h, want.h) {
				t.Errorf("seed %d: %v = %+v after reconciliation, want %+v", seed, kr, got, want)
			}
		}
	}
}

// TestHandleDropsBadFrames checks that malformed frames are counted and
// leave the store alone.
func TestHandleDropsBadFrames(t *testing.T) {
	store := region.NewMemory(region.MemoryConfig{Region: "b"})
	n := receiver(t, "b", store)
	good, _ := Encode(KindFlush, t0, testSender("a"), []region.Total{{Key: "k", Window: time.Second, Bucket: t0.Unix(), Region: "a", Count: 3}}, 1360)
	bad := append([]byte(nil), good[0]...)
	bad[0] = 99
	deliver(n, bad)
	deliver(n, good[0][:5])
	deliver(n, good[0])
	// A total for a bucket past its successor's close plus RetryMargin is
	// late: dropped and counted, so it cannot re-create an expired bucket.
	late, _ := Encode(KindReconcile, t0, testSender("a"), []region.Total{{Key: "old", Window: time.Second, Bucket: t0.Unix() - 20, Region: "a", Count: 3}}, 1360)
	deliver(n, late[0])
	if got, want := n.met.dropCount("expired"), 1.0; got != want {
		t.Errorf("dropped(expired) = %v, want %v", got, want)
	}
	if v, _ := store.Vectors(context.Background(), []region.BucketRef{{Key: "old", Window: time.Second, Bucket: t0.Unix() - 20}}); len(v[0]) != 0 {
		t.Errorf("the late total was merged: %v", v[0])
	}
	if got, want := n.met.dropCount("version"), 1.0; got != want {
		t.Errorf("dropped(version) = %v, want %v", got, want)
	}
	if got, want := n.met.dropCount("malformed"), 1.0; got != want {
		t.Errorf("dropped(malformed) = %v, want %v", got, want)
	}
	if got, want := counterValue(n.met.merges), 1.0; got != want {
		t.Errorf("merges = %v, want %v", got, want)
	}
}

// memberNode returns a memberlist node named name announcing region r and
// token.
func memberNode(name, r string, token uint64) *memberlist.Node {
	return &memberlist.Node{Name: name, Meta: encodeMeta(r, "", 0, token, 0)}
}
