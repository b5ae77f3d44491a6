package gossip

import (
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestReviveOnlyAuthenticated: a member memberlist holds failed comes back
// for replication only on a frame that passes every check, and what its
// frames can make this node do is rate-limited: one re-send per revival
// and per silence, at most once a second; a revived member that goes
// silent for the suspicion timeout is failed again.
func TestReviveOnlyAuthenticated(t *testing.T) {
	n := receiver(t, "eu", region.NewMemory(region.MemoryConfig{Region: "eu"}))
	now := t0
	n.cfg.Now = func() time.Time { return now }
	n.cfg.Suspicion = 200 * time.Millisecond // shorter than the rate limit, to show it
	us := testSender("us")
	n.setMember(memberNode(us.Node, "us", us.Token), "dead")
	n.rep.joined = map[string]bool{} // forget the members that came alive in receiver
	frame := func(s Sender, ts ...region.Total) {
		t.Helper()
		var fs [][]byte
		if len(ts) == 0 {
			f, err := EncodeEmpty(KindFlush, now, s)
			if err != nil {
				t.Fatal(err)
			}
			fs = [][]byte{f}
		} else {
			var err error
			if fs, err = Encode(KindFlush, now, s, ts, MaxMessage); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range fs {
			deliver(n, f)
		}
	}
	queued := func() map[string]bool {
		n.rep.mu.Lock()
		defer n.rep.mu.Unlock()
		q := n.rep.joined
		n.rep.joined = map[string]bool{}
		return q
	}
	check := func(step, state string, want map[string]bool) {
		t.Helper()
		if got := memberState(n, us.Node); got != state {
			t.Errorf("%s: %s is %q, want %q", step, us.Node, got, state)
		}
		got := queued()
		if len(got) != len(want) {
			t.Errorf("%s: re-sends queued for %v, want %v", step, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: re-sends queued for %v, want %v", step, got, want)
			}
		}
	}

	forged := us
	forged.Token++
	frame(forged)
	check("a frame with another token", "dead", nil)
	b := window.Bucket(t0.UnixMilli(), time.Minute)
	frame(us, region.Total{Key: "k", Window: time.Minute, Bucket: b, Region: "ap", Count: 1})
	check("a frame naming another region's totals", "dead", nil)
	if got := n.met.dropCount("foreign_region"); got != 1 {
		t.Errorf("dropped foreign_region = %v, want 1", got)
	}

	frame(us)
	check("a valid heartbeat", "alive", map[string]bool{us.Node: true}) // re-send and tell it
	for range 100 {
		now = now.Add(time.Millisecond)
		frame(us)
	}
	check("a hundred more frames", "alive", nil)

	now = now.Add(n.cfg.Suspicion + time.Millisecond)
	n.unrevive()
	check("silent for the suspicion timeout", "dead", nil)
	frame(us)
	check("revived again within a second", "alive", nil) // alive, no second re-send yet
	now = t0.Add(answerEvery + n.cfg.Suspicion)
	n.unrevive()
	frame(us)
	check("revived again a second later", "alive", map[string]bool{us.Node: true})

	// A live member silent for three heartbeat intervals: its next frame
	// re-sends the open totals to its region (without telling it), once a
	// second at most.
	ap := testSender("ap")
	frame(ap)
	now = now.Add(n.silentAfter() + time.Millisecond)
	frame(ap)
	if got, ok := queued()[ap.Node]; !ok || got {
		t.Errorf("after a silence: re-send queued for %s: %v, tell %v; want queued, not told", ap.Node, ok, got)
	}
	now = now.Add(n.silentAfter() + time.Millisecond)
	frame(ap)
	if got := queued(); len(got) != 0 {
		t.Errorf("a second silence within a second: re-sends queued for %v, want none", got)
	}
}

// TestProbeTargets: probes go to failed members of regions not heard from
// otherwise and to members silent for the suspicion timeout, not to a
// crashed node whose region-mate is heard from, nor to healthy members.
func TestProbeTargets(t *testing.T) {
	n := receiver(t, "eu", region.NewMemory(region.MemoryConfig{Region: "eu"}))
	now := t0
	n.cfg.Now = func() time.Time { return now }
	for _, r := range testRegions {
		n.heardFrom(n.members[testSender(r).Node], now)
	}
	n.setMember(memberNode("us-2", "us", 7), "dead") // crashed; node-us is heard from
	n.setMember(memberNode("xx-1", "xx", 7), "dead") // a region cut off
	names := func() map[string]bool {
		out := map[string]bool{}
		for _, ms := range n.silentMembers(time.Now()) {
			for _, m := range ms {
				out[m.node.Name] = true
			}
		}
		return out
	}
	if got := names(); len(got) != 1 || !got["xx-1"] {
		t.Errorf("probe targets = %v, want only xx-1", got)
	}
	now = now.Add(n.cfg.Suspicion / 2)
	n.heardFrom(n.members[testSender("ap").Node], now) // only ap keeps talking
	now = now.Add(n.cfg.Suspicion/2 + time.Millisecond)
	got := names()
	for _, r := range testRegions {
		if want := r != "ap" && r != "eu"; got[testSender(r).Node] != want {
			t.Errorf("after a silence: %s probed = %v, want %v", testSender(r).Node, got[testSender(r).Node], want)
		}
	}
	if !got["us-2"] || !got["xx-1"] {
		t.Errorf("after a silence: probe targets = %v, want us-2 (its region went silent) and xx-1 too", got)
	}
}
