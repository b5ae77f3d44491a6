package gossip

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rlcluster/rlcluster/internal/region"
)

// TestSequenceWindow: a frame is accepted once per sender incarnation and
// number; numbers may arrive in any order within seqWindow of the newest.
func TestSequenceWindow(t *testing.T) {
	var w seqWin
	accept := func(s uint64) string {
		t.Helper()
		r, _ := w.check(s)
		if r == "" {
			w.mark(s)
		}
		return r
	}
	for _, c := range []struct {
		seq  uint64
		want string
	}{
		{0, "stale"}, {3, ""}, {1, ""}, {3, "replay"}, {2, ""}, {1, "replay"},
		{seqWindow + 2, ""}, {2, "stale"}, {3, "replay"}, {5, ""}, {5, "replay"},
		{3 * seqWindow, ""}, {seqWindow + 2, "stale"}, {3*seqWindow - 1, ""}, {3*seqWindow - 1, "replay"},
	} {
		if got := accept(c.seq); got != c.want {
			t.Errorf("frame %d: %q, want %q", c.seq, got, c.want)
		}
	}
}

// TestFramesCannotBeReplayed: the receive path drops a frame it accepted
// before (replay), one older than the window (stale), one sent to another
// incarnation (misdirected), and, from a member memberlist holds failed,
// one that is not newer than every frame heard from it or that was sent
// before the member failed (not_alive); a new incarnation's frames, and a
// newer frame from a failed member sent after it failed, are accepted.
func TestFramesCannotBeReplayed(t *testing.T) {
	n := receiver(t, "b", region.NewMemory(region.MemoryConfig{Region: "b"}))
	n.token = 0xb0b
	now := t0
	n.cfg.Now = func() time.Time { return now }
	a := testSender("a")
	frame := func(sent time.Time, to, seq uint64) []byte {
		f, err := Encode(KindFlush, sent, a, []region.Total{{Key: "k", Window: time.Minute, Bucket: t0.Unix() / 60, Region: "a", Count: seq}}, 1360)
		if err != nil {
			t.Fatal(err)
		}
		return stamp(f[0], to, seq)
	}
	steps := []struct {
		name string
		f    []byte
		drop string // "" when merged
	}{
		{"first", frame(now, n.token, 1), ""},
		{"again", frame(now, n.token, 1), "replay"},
		{"to another incarnation", frame(now, 0xdead, 2), "misdirected"},
		{"overtaken", frame(now, n.token, 5), ""},
		{"late within the window", frame(now, n.token, 4), ""},
		{"far ahead", frame(now, n.token, 5+seqWindow), ""},
		{"behind the window", frame(now, n.token, 3), "stale"},
		{"no number", frame(now, n.token, 0), "stale"},
	}
	run := func(steps []struct {
		name string
		f    []byte
		drop string
	}) {
		t.Helper()
		for _, s := range steps {
			merges, dropped := counterValue(n.met.merges), 0.0
			if s.drop != "" {
				dropped = n.met.dropCount(s.drop)
			}
			n.handle(s.f)
			switch {
			case s.drop == "" && counterValue(n.met.merges) != merges+1:
				t.Errorf("%s: not merged", s.name)
			case s.drop != "" && (counterValue(n.met.merges) != merges || n.met.dropCount(s.drop) != dropped+1):
				t.Errorf("%s: merged or not counted as %s", s.name, s.drop)
			}
		}
	}
	run(steps)

	// memberlist sees a fail: a frame it did not deliver before (held
	// back by whoever captured it), and frames sent before the fail,
	// do not bring it back; a newer one sent after it does.
	held := frame(now.Add(-time.Second), n.token, 6+seqWindow)
	now = now.Add(5 * time.Second)
	n.setMember(memberNode(a.Node, "a", a.Token), "dead")
	run([]struct {
		name string
		f    []byte
		drop string
	}{
		{"from a failed member: held back, sent before it failed", held, "not_alive"},
		{"from a failed member: not the newest", frame(now, n.token, 5+seqWindow-1), "not_alive"},
		{"from a failed member: new, sent after it failed", frame(now, n.token, 7+seqWindow), ""},
	})
	if got := memberState(n, a.Node); got != "alive" {
		t.Errorf("the failed member is %q after its new frame, want alive (revived)", got)
	}

	// A restart: a new token, announced in its metadata; numbers start
	// at 1 again, and the old incarnation's frames are not a member's.
	old := frame(now, n.token, 8+seqWindow)
	a.Token++
	n.setMember(memberNode(a.Node, "a", a.Token), "alive")
	run([]struct {
		name string
		f    []byte
		drop string
	}{
		{"new incarnation", frame(now, n.token, 1), ""},
		{"old incarnation", old, "not_member"},
	})
}

// TestSequenceAfterForgetting: a node that forgets a receiver (it left
// and was pruned) and numbers its frames to it again starts above every
// number it used before, so the receiver, which may remember it, takes
// them.
func TestSequenceAfterForgetting(t *testing.T) {
	n := receiver(t, "b", region.NewMemory(region.MemoryConfig{Region: "b"}))
	to := &member{token: 7}
	f, _ := EncodeEmpty(KindFlush, t0, n.self())
	seq := func() uint64 {
		m, err := Decode(n.stampFor(to, f))
		if err != nil {
			t.Fatal(err)
		}
		return m.Seq
	}
	first := seq()
	for range 1000 {
		seq()
	}
	last := seq()
	n.pruneSequences(map[string]uint64{}) // forgets every receiver
	if again := seq(); again <= last || first != 1 || last != first+1001 {
		t.Errorf("numbers %d..%d, then %d after forgetting: want consecutive, then above them", first, last, again)
	}
}

// captureTransport records the packets a transport sends to one address,
// as they leave it (encrypted, with a key), as an eavesdropper would.
type captureTransport struct {
	*memberlist.NetTransport
	mu      sync.Mutex
	to      string
	packets [][]byte
}

func (c *captureTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	c.mu.Lock()
	if a.Addr == c.to {
		c.packets = append(c.packets, append([]byte(nil), b...))
	}
	c.mu.Unlock()
	return c.NetTransport.WriteToAddress(b, a)
}

func (c *captureTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return c.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (c *captureTransport) captured() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.packets...)
}

// TestAttackReplayFromFailedMember: in a pool with a key, an eavesdropper
// records every encrypted UDP packet a member of eu sends the victim
// (region us) while it reports a total, and, once the member has failed,
// sends them all to the victim again. Nothing is merged and the failed
// member stays failed; the replayed frames are counted as drops. (Before
// frames carried sequence numbers, the replay was merged and revived the
// member: "member heard from again before the failure detector saw it".)
func TestAttackReplayFromFailedMember(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	mk := func(name, reg string, tr memberlist.NodeAwareTransport, join []string) *Node {
		cfg := testConfig()
		cfg.Name, cfg.Region, cfg.Transport, cfg.Join, cfg.SecretKey = name, reg, tr, join, key
		return startTestNode(t, cfg, region.NewMemory(region.MemoryConfig{Region: reg}))
	}
	victim := mk("us-0", "us", listenLoopback(t, nil, ""), nil)
	nt, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	tap := &captureTransport{NetTransport: nt, to: victim.Addr()}
	eu := mk("eu-0", "eu", tap, []string{victim.Addr()})
	ap := mk("ap-0", "ap", listenLoopback(t, nil, ""), []string{victim.Addr()})
	waitFor(t, 10*time.Second, "every member sees the others alive", func() bool { return allSeeAlive(3, victim, eu, ap) })
	waitFor(t, 10*time.Second, "eu-0 has us-0's key state", func() bool { return knows(eu, "us-0") })

	// eu reports a total to the victim, over UDP; it is merged.
	bucket := time.Now().Unix() / 60
	before := counterValue(victim.met.merges)
	fs, err := Encode(KindFlush, time.Now(), eu.self(), []region.Total{{Key: "bob", Window: time.Minute, Bucket: bucket, Region: "eu", Count: 5}}, 1360)
	if err != nil {
		t.Fatal(err)
	}
	if err := eu.sendPacket(memberOf(t, eu, "us-0"), fs[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "eu's total merged", func() bool { return counterValue(victim.met.merges) > before })

	eu.kill()
	waitFor(t, 10*time.Second, "the victim sees eu-0 failed", func() bool { return memberState(victim, "eu-0") == "dead" })
	packets := tap.captured()
	if len(packets) == 0 {
		t.Fatal("nothing captured")
	}
	merges := counterValue(victim.met.merges)
	drops := func() float64 {
		var s float64
		for _, r := range []string{"replay", "stale", "misdirected", "not_alive", "not_member"} {
			s += victim.met.dropCount(r)
		}
		return s
	}
	dropped := drops()
	conn, err := net.Dial("udp", victim.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, p := range packets {
		if _, err := conn.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "the replayed frames dropped", func() bool { return drops() > dropped })

	// ap's frame, handled after everything replayed, shows it is all done.
	fs, _ = Encode(KindFlush, time.Now(), ap.self(), []region.Total{{Key: "settle", Window: time.Minute, Bucket: bucket, Region: "ap", Count: 1}}, 1360)
	if err := ap.sendStream(memberOf(t, ap, "us-0"), fs[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "ap's frame merged", func() bool { return counterValue(victim.met.merges) > merges })
	if got, want := counterValue(victim.met.merges), merges+1; got != want {
		t.Errorf("merges after the replay = %v, want %v (ap's only)", got, want)
	}
	if got := memberState(victim, "eu-0"); got != "dead" {
		t.Errorf("eu-0 is %q after the replay, want dead", got)
	}
	// The frames the victim had accepted are replays.
	if got := victim.met.dropCount("replay"); got < 1 {
		t.Errorf("dropped(replay) = %v after replaying %d packets, want at least 1", got, len(packets))
	}
}
