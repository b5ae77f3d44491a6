package gossip

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestSimRelayAfterSplits: five regions 60 ms apart split into a, d |
// b, c, e, and b takes most of its side's share of a limit of 100 per
// 10 s while c and e hear it. Then, before that heals, the split moves:
// a, c, d, e | b. Now a and d hear c and e again but not b, and a and d
// burst. Without a relay they charge b, silent, only its share (what
// they last knew of it), and the pool goes past the bound of a fault;
// c and e relay what they hold of b as they hear a and d again
// (KindRelay), and the pool stays within the bound of a fault,
// (1 + 1/R) x the limit.
func TestSimRelayAfterSplits(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		regions := []string{"a", "b", "c", "d", "e"}
		s := newSim(t, regions, 1, 60*time.Millisecond)
		defer s.close()
		time.Sleep(time.Second) // let the start-up's rejoin sends pass
		lim := window.Limit{Limit: 100, Window: 10 * time.Second}
		guards := map[string]*guard.Guard{}
		for _, r := range regions {
			guards[r] = guard.New(guard.Config{})
		}
		split := func(sides ...[]string) {
			s.fn.HealAll()
			for i, x := range sides {
				for _, y := range sides[i+1:] {
					for _, p := range x {
						for _, q := range y {
							s.fn.Partition(p, q)
						}
					}
				}
			}
		}
		var at []time.Time
		burst := func(d time.Duration, rs ...string) {
			end := time.Now().Add(d)
			for i := 0; time.Now().Before(end); i++ {
				r := rs[i%len(rs)]
				if s.simGuardHit(s.nodes[r+"-0"], guards[r], "k", lim) {
					at = append(at, time.Now())
				}
				time.Sleep(time.Millisecond)
			}
		}
		start := time.Now()
		split([]string{"a", "d"}, []string{"b", "c", "e"})
		time.Sleep(3 * time.Second) // every side sees the others silent
		burst(time.Second, "b")
		tookB := len(at)
		time.Sleep(100 * time.Millisecond) // b's last totals reach c and e
		split([]string{"a", "c", "d", "e"}, []string{"b"})
		time.Sleep(2 * time.Second) // a and d hear c and e again
		// What a holds of b now: what c and e relayed.
		b := s.now().UnixMilli() / lim.Window.Milliseconds()
		relayed := s.count("a", "b", "k", lim.Window, b)
		burst(time.Second, "a", "d")
		got := maxTrailing(at, at, lim.Window, start)
		bound := lim.Limit + lim.Limit/uint64(len(regions))
		t.Logf("b admitted %d while c and e heard it; a held %d of b after the second split; %d in the worst trailing window (bound %d, limit %d)",
			tookB, relayed, got, bound, lim.Limit)
		if relayed < uint64(tookB) {
			t.Errorf("a holds %d of b's count after the second split, want the %d c and e heard of (relayed)", relayed, tookB)
		}
		if got > int(bound) {
			t.Errorf("%d admitted in a trailing window of %v, want at most (1 + 1/%d) x %d = %d", got, lim.Window, len(regions), lim.Limit, bound)
		}
		if tookB <= int(lim.Limit)/len(regions) {
			t.Errorf("b admitted %d alone on its side, want more than its equal share %d (the case needs b over its share)", tookB, int(lim.Limit)/len(regions))
		}
	})
}

// TestAttackRelay: a member relays (KindRelay) totals of regions other
// than its own. They are merged only for regions of the pool that the
// receiver does not hear: a relay naming the receiver's own region, the
// sender's, or a region no member belongs to is dropped whole, and a
// relayed total of a region the receiver hears is skipped, so a relay
// can neither raise the receiver's own count nor add regions to a bucket.
func TestAttackRelay(t *testing.T) {
	p := newAttackPool(t)
	lim := window.Limit{Limit: 10, Window: time.Minute}
	b := p.admit(t, "alice", lim, 1)
	for _, c := range []struct {
		name   string
		regs   []string
		reason string
	}{
		{"the receiver's own region", []string{"us"}, "foreign_region"},
		{"the sender's region", []string{"evil"}, "foreign_region"},
		{"a made-up region", []string{"zz"}, "unknown_region"},
		{"a made-up region beside a member region", []string{"eu", "zz"}, "unknown_region"},
		{"a member region's replica beside a made-up one", []string{"eu~0a1b2c", "zz~0a1b2c"}, "unknown_region"},
	} {
		before := p.victim.met.dropCount(c.reason)
		var ts []region.Total
		for _, r := range c.regs {
			ts = append(ts, region.Total{Key: "alice", Window: lim.Window, Bucket: b, Region: r, Count: 1e15})
		}
		fs, err := Encode(KindRelay, time.Now(), p.rogue.self(), ts, 1360)
		if err != nil {
			t.Fatal(err)
		}
		p.sendAsRogue(t, fs[0])
		p.settle(t)
		if got := p.victim.met.dropCount(c.reason) - before; got != 1 {
			t.Errorf("%s: dropped(%s) rose by %v, want 1", c.name, c.reason, got)
		}
	}
	// eu is heard by the victim (its heartbeats): its relayed total is
	// skipped, the frame taken.
	fs, err := Encode(KindRelay, time.Now(), p.rogue.self(), []region.Total{{Key: "alice", Window: lim.Window, Bucket: b, Region: "eu", Count: 1e15}}, 1360)
	if err != nil {
		t.Fatal(err)
	}
	p.sendAsRogue(t, fs[0])
	p.settle(t)
	if got, want := p.vector(t, "alice", lim.Window, b), map[string]uint64{"us": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("alice's bucket = %v after the relays, want %v", got, want)
	}
}
