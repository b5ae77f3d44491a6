package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
)

// startKeyed starts a node on a free loopback port with keys (primary
// first) and returns it with its store.
func startKeyed(t *testing.T, name, regionName string, keys [][]byte, join ...string) (*Node, region.Store) {
	t.Helper()
	cfg := testConfig()
	cfg.Name, cfg.Region, cfg.BindAddr, cfg.SecretKeys, cfg.Join = name, regionName, "127.0.0.1:0", keys, join
	store := region.NewMemory(region.MemoryConfig{Region: regionName})
	return startTestNode(t, cfg, store), store
}

// TestKeyRotation rotates a three-region pool from key A to key B in the
// three documented steps. After each step every node still sees every
// other alive, a total still reaches every other region (UDP), and a
// push-pull join still succeeds (TCP). At the end a node holding only A is
// refused.
func TestKeyRotation(t *testing.T) {
	keyA := []byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	keyB := []byte("BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB")
	a, _ := startKeyed(t, "a1", "eu", [][]byte{keyA})
	b, bStore := startKeyed(t, "b1", "us", [][]byte{keyA}, a.Addr())
	c, cStore := startKeyed(t, "c1", "ap", [][]byte{keyA}, a.Addr())
	nodes := []*Node{a, b, c}
	allAlive := func() bool { return allSeeAlive(len(nodes), nodes...) }
	waitFor(t, 10*time.Second, "three nodes alive", allAlive)

	bucket := time.Now().UnixMilli() / 3_600_000
	var count uint64
	replicates := func(step string) {
		t.Helper()
		count++
		a.Dirty(region.Total{Key: "k", Window: time.Hour, Bucket: bucket, Count: count})
		waitFor(t, 10*time.Second, step+": a's total reaches us and ap", func() bool {
			for _, s := range []region.Store{bStore, cStore} {
				v, err := s.Vectors(context.Background(), []region.BucketRef{{Key: "k", Window: time.Hour, Bucket: bucket}})
				if err != nil || len(v[0]) == 0 || v[0][0].Region != "eu" || v[0][0].Count != count {
					return false
				}
			}
			return true
		})
		if k, err := c.ml.Join([]string{b.Addr()}); err != nil || k != 1 {
			t.Errorf("%s: push-pull join c -> b = %d, %v; want 1, nil", step, k, err)
		}
		if !allAlive() {
			t.Fatalf("%s: a member is not alive: %+v / %+v / %+v", step, a.Members(), b.Members(), c.Members())
		}
	}
	replicates("before rotation")

	fpA, fpB := KeyFingerprint(keyA), KeyFingerprint(keyB)
	steps := []struct {
		name string
		do   func(n *Node) error
		want []string
	}{
		{"install B", func(n *Node) error { return n.InstallKey(keyB) }, []string{fpA, fpB}},
		{"use B", func(n *Node) error { return n.UseKey(keyB) }, []string{fpB, fpA}},
		{"remove A", func(n *Node) error { return n.RemoveKey(keyA) }, []string{fpB}},
	}
	for _, st := range steps {
		for _, n := range nodes {
			if err := st.do(n); err != nil {
				t.Fatalf("%s on %s: %v", st.name, n.Name(), err)
			}
			if got := n.Keys(); fmt.Sprint(got) != fmt.Sprint(st.want) {
				t.Errorf("%s: %s.Keys() = %v, want %v", st.name, n.Name(), got, st.want)
			}
		}
		replicates(st.name)
	}

	old, _ := startKeyed(t, "d1", "sa", [][]byte{keyA})
	if k, err := old.ml.Join([]string{a.Addr()}); err == nil || k != 0 {
		t.Errorf("Join with only the old key = %d, %v; want refused", k, err)
	}
	fresh, _ := startKeyed(t, "e1", "sa", [][]byte{keyB})
	if k, err := fresh.ml.Join([]string{a.Addr()}); err != nil || k != 1 {
		t.Errorf("Join with the new key = %d, %v; want 1, nil", k, err)
	}
}

// TestSetKeys drives the same rotation through SetKeys, as rlnode's
// SIGHUP reload does, and checks its refusals.
func TestSetKeys(t *testing.T) {
	keyA := bytes.Repeat([]byte{'a'}, 16)
	keyB := bytes.Repeat([]byte{'b'}, 24)
	a, _ := startKeyed(t, "a1", "eu", [][]byte{keyA, keyB})
	if got, want := fmt.Sprint(a.Keys()), fmt.Sprint([]string{KeyFingerprint(keyA), KeyFingerprint(keyB)}); got != want {
		t.Errorf("Keys() at start = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name string
		keys [][]byte
		want []string
	}{
		{"swap", [][]byte{keyB, keyA}, []string{KeyFingerprint(keyB), KeyFingerprint(keyA)}},
		{"drop old", [][]byte{keyB}, []string{KeyFingerprint(keyB)}},
		{"again", [][]byte{keyB}, []string{KeyFingerprint(keyB)}},
	} {
		if err := a.SetKeys(tc.keys); err != nil {
			t.Fatalf("%s: SetKeys: %v", tc.name, err)
		}
		if got := a.Keys(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: Keys() = %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"empty", a.SetKeys(nil), "empty list"},
		{"short", a.SetKeys([][]byte{keyA, []byte("short")}), "key 2: must be 16, 24 or 32 bytes, got 5"},
		{"remove primary", a.RemoveKey(keyB), "is the primary key"},
		{"use missing", a.UseKey(keyA), "not installed"},
	} {
		if tc.err == nil || !bytes.Contains([]byte(tc.err.Error()), []byte(tc.want)) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
		if bytes.Contains([]byte(fmt.Sprint(tc.err)), keyA) || bytes.Contains([]byte(fmt.Sprint(tc.err)), keyB) {
			t.Errorf("%s: error %q shows a key", tc.name, tc.err)
		}
	}
	if got, want := fmt.Sprint(a.Keys()), fmt.Sprint([]string{KeyFingerprint(keyB)}); got != want {
		t.Errorf("Keys() after refused changes = %v, want %v", got, want)
	}

	plain := startNode(t, "p1", "us", nil)
	if err := plain.InstallKey(keyA); !errors.Is(err, ErrNoEncryption) {
		t.Errorf("InstallKey on an unencrypted node = %v, want ErrNoEncryption", err)
	}
	if plain.Encrypted() || !a.Encrypted() {
		t.Errorf("Encrypted() = %v (plain), %v (keyed); want false, true", plain.Encrypted(), a.Encrypted())
	}
	if _, err := New(Config{Name: "x", Region: "eu", BindAddr: "127.0.0.1:0", SecretKeys: [][]byte{keyA, []byte("bad")}},
		region.NewMemory(region.MemoryConfig{})); !errors.Is(err, ErrConfig) {
		t.Errorf("New with a bad key in SecretKeys = %v, want ErrConfig", err)
	}
}
