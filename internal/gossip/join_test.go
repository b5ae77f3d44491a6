package gossip

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rlcluster/rlcluster/internal/region"
)

// TestSimJoinCountedAtOnce: a node joining region a of a pool whose
// regions are 60 ms apart is counted among a's nodes by every member
// from the same instant, the one it announced (Node.countFrom), though
// they hear of the join up to a gossip interval and the one-way delay
// apart, and it holds its own decisions until then, and every view says
// the pool grew at that instant (guard.View.Grown). Counted as each
// hears of it, a limit the join lifts past the pool's nodes is decided
// by shares in some views and by the stagger in others (the simulator's
// seed 94982 went past its bound so).
func TestSimJoinCountedAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		regions := []string{"a", "b", "c"}
		s := newSim(t, regions, 1, 60*time.Millisecond)
		defer s.close()
		time.Sleep(2 * time.Second)
		joiner := s.start("a-1", "a", s.nodes["a-0"].Addr())
		counts := func(n *Node) bool {
			v := n.GuardView(s.now())
			if n.Region() == "a" {
				return v.Nodes == 2
			}
			return v.RegionNodes["a"] == 2
		}
		first := map[string]time.Time{}
		var heldUntil time.Time
		for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(time.Millisecond) {
			for name, n := range s.nodes {
				if _, ok := first[name]; !ok && name != "a-1" && counts(n) {
					first[name] = s.now()
				}
			}
			if v := joiner.GuardView(s.now()); v.Joining > 0 {
				heldUntil = s.now().Add(v.Joining)
			}
		}
		from := time.UnixMilli(joiner.countFrom.Load())
		// The pool grew then, in every view (guard.View.Grown).
		for name, n := range s.nodes {
			if g := n.GuardView(s.now()).Grown; !g.Equal(from) {
				t.Errorf("%s: the pool grew at %v in its view, want %v (a-1's instant)", name, g, from)
			}
		}
		t.Logf("a-1 announced %v; counted from %v; held until %v", from.Sub(from.Truncate(time.Second)), first, heldUntil.Sub(from))
		for _, name := range []string{"a-0", "b-0", "c-0"} {
			at, ok := first[name]
			if !ok {
				t.Errorf("%s never counted a-1", name)
				continue
			}
			if d := at.Sub(from); d < 0 || d > time.Millisecond {
				t.Errorf("%s counted a-1 %v after the instant it announced, want within 1 ms of it", name, d)
			}
		}
		if heldUntil.Before(from) {
			t.Errorf("a-1 held its decisions until %v before the instant the others count it from", from.Sub(heldUntil))
		}
	})
}

// TestMetaCountFrom: a node's metadata carries the instant its members
// count it from; metadata of an earlier release, without it, decodes
// with 0 (counted at once), and anything longer or shorter is refused.
func TestMetaCountFrom(t *testing.T) {
	const from = int64(1_800_000_000_123)
	b := encodeMeta("eu", "10.0.0.1:8080", flagFineTrails, 42, from)
	m, ok := decodeMeta(b)
	if !ok || m.countFrom != from || m.token != 42 || m.region != "eu" || m.api != "10.0.0.1:8080" || m.flags != flagFineTrails {
		t.Errorf("decodeMeta(encodeMeta(...)) = %+v, %v; want count-from %d", m, ok, from)
	}
	old := b[:len(b)-8] // an earlier release's: no count-from
	if m, ok := decodeMeta(old); !ok || m.countFrom != 0 || m.token != 42 {
		t.Errorf("decodeMeta(earlier layout) = %+v, %v; want count-from 0, token 42", m, ok)
	}
	for _, bad := range [][]byte{b[:len(b)-1], append(append([]byte(nil), b...), 0), old[:len(old)-1]} {
		if m, ok := decodeMeta(bad); ok {
			t.Errorf("decodeMeta(%d bytes) = %+v, ok; want refused", len(bad), m)
		}
	}
}

// TestCountFromBounded: a member's announced instant is taken as the
// first metadata of its incarnation announced it, and at most a join hold
// after it was seen: a member cannot keep itself uncounted by announcing
// a far instant, nor make every view see the pool grow again (guard.View
// Grown, which holds small limits' staggered asks for a horizon) by
// announcing a new one; a new incarnation (a restart) announces its own.
func TestCountFromBounded(t *testing.T) {
	n := receiver(t, "b", region.NewMemory(region.MemoryConfig{Region: "b"}))
	at := func() int64 {
		n.memMu.RLock()
		defer n.memMu.RUnlock()
		return n.members["peer"].countFrom
	}
	hold := n.cfg.joinCountHold().Milliseconds()
	now := n.cfg.Now().UnixMilli()
	n.setMember(&memberlist.Node{Name: "peer", Meta: encodeMeta("a", "", flagFineTrails, 9, now+3_600_000)}, "alive")
	if got := at(); got < now+hold-1000 || got > n.cfg.Now().UnixMilli()+hold {
		t.Errorf("an instant an hour ahead: counted from %d ms from now, want at most the hold, %d ms", got-now, hold)
	}
	first := at()
	n.setMember(&memberlist.Node{Name: "peer", Meta: encodeMeta("a", "", flagFineTrails, 9, now+500)}, "alive")
	if got := at(); got != first {
		t.Errorf("the same incarnation announcing another instant: counted from %d, want %d (the first)", got, first)
	}
	n.setMember(&memberlist.Node{Name: "peer", Meta: encodeMeta("a", "", flagFineTrails, 10, now+500)}, "alive")
	if got := at(); got != now+500 {
		t.Errorf("a new incarnation: counted from %d, want %d (its own)", got, now+500)
	}
}
