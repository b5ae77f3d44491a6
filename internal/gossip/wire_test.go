package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// trailOf returns the coarse trail of hits at the offsets at (ms) in a
// bucket of w, one hit each.
func trailOf(w time.Duration, at ...int64) window.Trail {
	var h window.Trail
	for _, e := range at {
		h.Add(e, w.Milliseconds(), 1, false)
	}
	return h
}

var t0 = time.UnixMilli(1_700_000_000_123)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	cases := []struct {
		name   string
		kind   Kind
		totals []region.Total
	}{
		{"one", KindFlush, []region.Total{{Key: "k", Window: time.Second, Bucket: 1_700_000_000, Region: "eu", Count: 7}}},
		{"regions", KindReconcile, []region.Total{
			{Key: "a", Window: time.Minute, Bucket: 28_333_333, Region: "us", Count: 1},
			{Key: "a", Window: time.Minute, Bucket: 28_333_333, Region: "eu", Count: 500},
			{Key: "b", Window: 7 * 24 * time.Hour, Bucket: -3, Region: "ap", Count: MaxCount},
		}},
		{"halves", KindFlush, []region.Total{
			{Key: "h", Window: time.Minute, Bucket: 28_333_333, Region: "eu", Count: 6, Trail: trailOf(time.Minute, 10, 20, 9000, 31000, 59999)},
			{Key: "h", Window: time.Minute, Bucket: 28_333_334, Region: "eu", Count: 4, Trail: trailOf(time.Minute, 40000)},
		}},
		{"empty", KindState, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []region.Total
			for _, m := range encodeDecode(t, c.kind, t0, testSender("eu"), c.totals, 1360) {
				if m.Kind != c.kind || m.From != "eu" || !m.Sent.Equal(t0) || m.Node != "node-eu" || m.Token != testSender("eu").Token {
					t.Errorf("Decode() header = %v %q %v %q %x, want %v %q %v %q %x", m.Kind, m.From, m.Sent, m.Node, m.Token,
						c.kind, "eu", t0, "node-eu", testSender("eu").Token)
				}
				got = append(got, m.Totals...)
			}
			if len(c.totals) == 0 && len(got) == 0 {
				return
			}
			if !reflect.DeepEqual(got, c.totals) {
				t.Errorf("round trip = %+v, want %+v", got, c.totals)
			}
		})
	}
}

// encodeDecode encodes totals into frames of at most limit bytes, trails
// fine (EncodeFine), and decodes each frame back, failing t if either step
// fails.
func encodeDecode(t *testing.T, kind Kind, sent time.Time, s Sender, totals []region.Total, limit int) []Message {
	t.Helper()
	frames, err := EncodeFine(kind, sent, s, totals, limit)
	if err != nil {
		t.Fatalf("Encode(%v, %d totals) error = %v", kind, len(totals), err)
	}
	ms := make([]Message, len(frames))
	for i, f := range frames {
		if ms[i], err = Decode(f); err != nil {
			t.Fatalf("Decode(frame %d of %d) error = %v", i, len(frames), err)
		}
	}
	return ms
}

// TestFrameSize checks the size figures the wire.go comment promises and
// that packing respects the budget.
func TestFrameSize(t *testing.T) {
	one := region.Total{Key: "tenant-0001:api/login", Window: time.Minute, Bucket: 29_000_000, Region: "us-east", Count: 12345}
	if got := entrySize(one); got > 33 {
		t.Errorf("entrySize(20-byte key) = %d, want <= 33", got)
	}
	// A mark in every granule of the minute: the largest trail.
	var h window.Trail
	for i := range int64(12345) {
		h.Add(i*60000/12345, 60000, 1, false)
	}
	if len(h) != window.Granules {
		t.Fatalf("trail of %d marks, want %d", len(h), window.Granules)
	}
	one.Trail = h
	if got := entrySize(one); got > 33+window.Granules*5 {
		t.Errorf("entrySize(20-byte key, a full trail) = %d, want <= %d", got, 33+window.Granules*5)
	}
	one.Trail = h.Spans(60000)
	if len(one.Trail) != window.MergeGranules {
		t.Fatalf("trail gathered into spans: %d marks, want %d", len(one.Trail), window.MergeGranules)
	}
	if got := entrySize(one); got > 33+window.MergeGranules*5 {
		t.Errorf("entrySize(20-byte key, a full trail in spans) = %d, want <= %d", got, 33+window.MergeGranules*5)
	}
	// Keys far below their limit, a few hits each: a mark or two.
	one.Trail = window.Trail{{At: 12000, Cum: 3}, {At: 30500, Cum: 5}}
	var totals []region.Total
	for i := range 1000 {
		tt := one
		tt.Key = fmt.Sprintf("tenant-%04d:api/login", i)
		totals = append(totals, tt)
	}
	frames, err := Encode(KindFlush, t0, testSender("us-east"), totals, 1360)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range frames {
		if len(f) > 1360 {
			t.Errorf("frame of %d bytes, want <= 1360", len(f))
		}
		m, err := Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		n += len(m.Totals)
	}
	if n != len(totals) {
		t.Errorf("decoded %d totals, want %d", n, len(totals))
	}
	perFrame := len(totals) / len(frames)
	t.Logf("1000 totals with 21-byte keys: %d frames, about %d totals per 1360-byte packet", len(frames), perFrame)
	if perFrame < 21 {
		t.Errorf("%d totals per packet, want >= 21", perFrame)
	}
}

func TestEncodeSkipsBadTotals(t *testing.T) {
	long := make([]byte, MaxKeyLen+1)
	frames, err := Encode(KindFlush, t0, testSender("eu"), []region.Total{
		{Key: "", Window: time.Second, Region: "eu", Count: 1},
		{Key: string(long), Window: time.Second, Region: "eu", Count: 1},
		{Key: "ok", Window: 0, Region: "eu", Count: 1},
		{Key: "ok", Window: time.Second, Region: "eu", Count: 1},
	}, 1360)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 1 {
		t.Fatalf("got %d frames, want 1", len(frames))
	}
	m, _ := Decode(frames[0])
	if got, want := len(m.Totals), 1; got != want {
		t.Errorf("kept %d totals, want %d", got, want)
	}
	if _, err := Encode(KindFlush, t0, Sender{Node: "n"}, nil, 1360); err == nil {
		t.Errorf("Encode(empty region) error = nil, want an error")
	}
	if _, err := Encode(KindFlush, t0, Sender{Region: "eu"}, nil, 1360); err == nil {
		t.Errorf("Encode(empty node name) error = nil, want an error")
	}
	over, _ := Encode(KindFlush, t0, testSender("eu"), []region.Total{{Key: "k", Window: time.Second, Region: "eu", Count: MaxCount + 1}}, 1360)
	if len(over) != 0 {
		t.Errorf("Encode(count %d) made %d frames, want none", uint64(MaxCount+1), len(over))
	}
}

// withMark returns a frame of one total of count 1 (1 s window) with a
// trail of one mark of n hits at at, encoded by hand.
func withMark(n uint64, at int64) []byte {
	f, _ := Encode(KindFlush, t0, testSender("eu"), []region.Total{{Key: "k", Window: time.Second, Bucket: 5, Region: "eu", Count: 1}}, 1360)
	b := f[0]
	b[len(b)-1] = 1
	b = binary.AppendUvarint(b, uint64(at))
	return binary.AppendUvarint(b, n)
}

// TestEncodeTrailsForOlderNodes: Encode gathers a trail into merge spans,
// at most window.MergeGranules marks with one per span, as a node before
// fine trails accepts them; EncodeFine carries it coarse, and Decode
// accepts up to window.Granules marks, one per coarse granule, no more.
func TestEncodeTrailsForOlderNodes(t *testing.T) {
	const wMs = 60000
	var h window.Trail
	for i := range int64(5000) {
		h.Add(i*wMs/5000, wMs, 1, false)
	}
	total := region.Total{Key: "k", Window: time.Minute, Bucket: 7, Region: "eu", Count: 5000, Trail: h}
	for _, c := range []struct {
		name string
		enc  func(Kind, time.Time, Sender, []region.Total, int) ([][]byte, error)
		want window.Trail
	}{
		{"Encode", Encode, h.Spans(wMs)},
		{"EncodeFine", EncodeFine, h},
	} {
		frames, err := c.enc(KindFlush, t0, testSender("eu"), []region.Total{total}, 1360)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Decode(frames[0])
		if err != nil {
			t.Fatalf("%s: Decode() error = %v", c.name, err)
		}
		if got := m.Totals[0].Trail; !slices.Equal(got, c.want) {
			t.Errorf("%s: trail of %d marks, want %d: %v", c.name, len(got), len(c.want), got)
		}
	}
	if got := h.Spans(wMs); len(got) != window.MergeGranules || got.Count() != h.Count() {
		t.Errorf("Spans() = %d marks, %d hits; want %d, %d", len(got), got.Count(), window.MergeGranules, h.Count())
	}
	for i := 1; i < len(h.Spans(wMs)); i++ {
		if s := h.Spans(wMs); window.MergeSpan(s[i].At, wMs) == window.MergeSpan(s[i-1].At, wMs) {
			t.Fatalf("Spans() has two marks in span %d", window.MergeSpan(s[i].At, wMs))
		}
	}
	// One more mark than granules, or two in one granule: malformed.
	f, _ := EncodeFine(KindFlush, t0, testSender("eu"), []region.Total{{Key: "k", Window: time.Minute, Bucket: 7, Region: "eu", Count: 5000}}, 1360)
	for _, c := range []struct {
		name string
		ats  []int64
	}{
		{"more marks than granules", func() []int64 {
			ats := make([]int64, window.Granules+1)
			for i := range ats {
				ats[i] = int64(i) * (wMs / (window.Granules + 1))
			}
			return ats
		}()},
		{"two marks in one granule", []int64{0, wMs/window.Granules - 2}},
	} {
		b := append([]byte(nil), f[0][:len(f[0])-1]...)
		b = binary.AppendUvarint(b, uint64(len(c.ats)))
		next := int64(0)
		for _, at := range c.ats {
			b = binary.AppendUvarint(b, uint64(at-next))
			b = binary.AppendUvarint(b, 1)
			next = at + 1
		}
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Decode() = %v, want ErrMalformed", c.name, err)
		}
	}
}

// A frame carries its receiver's incarnation and a sequence number that
// stamp sets; frames of versions 2 to 4, which carried neither or no
// trails, are refused, and so is a state frame (push-pull, sent to no one in
// particular) that names a receiver.
func TestDecodeStampAndVersions(t *testing.T) {
	f, _ := Encode(KindFlush, t0, testSender("eu"), []region.Total{{Key: "k", Window: time.Second, Bucket: 5, Region: "eu", Count: 9}}, 1360)
	m, err := Decode(stamp(f[0], 0xfeed, 42))
	if err != nil || m.To != 0xfeed || m.Seq != 42 || m.Token != testSender("eu").Token {
		t.Errorf("Decode(stamped) = to %x seq %d token %x, %v; want to feed seq 42", m.To, m.Seq, m.Token, err)
	}
	if m, err := Decode(f[0]); err != nil || m.To != 0 || m.Seq != 0 {
		t.Errorf("Decode(unstamped) = to %x seq %d, %v; want 0 0", m.To, m.Seq, err)
	}
	for _, v := range []byte{2, 3, 4} {
		old := append([]byte(nil), f[0]...)
		old[0] = v
		if _, err := Decode(old); !errors.Is(err, ErrVersion) {
			t.Errorf("Decode(version %d) = %v, want ErrVersion", v, err)
		}
	}
	st, _ := Encode(KindState, t0, testSender("eu"), []region.Total{{Key: "k", Window: time.Second, Bucket: 5, Region: "eu", Count: 9}}, 1360)
	if _, err := Decode(stamp(st[0], 1, 1)); !errors.Is(err, ErrMalformed) {
		t.Errorf("Decode(a state frame addressed to a receiver) = %v, want ErrMalformed", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := Encode(KindFlush, t0, testSender("eu"), []region.Total{{Key: "k", Window: time.Second, Bucket: 5, Region: "eu", Count: MaxCount}}, 1360)
	g := good[0]
	nregions := headerFixed + len(testSender("eu").Node) // offset of nregions
	// MaxCount = 2^53 is the uvarint 80 80 80 80 80 80 80 10: the last byte
	// 0x11 makes it 2^53 + 2^49.
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), g...)) }
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"version", mut(func(b []byte) []byte { b[0] = 1; return b }), ErrVersion},
		{"kind", mut(func(b []byte) []byte { b[1] = byte(KindDemand) + 1; return b }), ErrKind},
		{"truncated", g[:len(g)-1], ErrMalformed},
		{"trailing", append(append([]byte(nil), g...), 0), ErrMalformed},
		{"no regions", mut(func(b []byte) []byte { b[nregions] = 0; return b }), ErrMalformed},
		{"no sender", mut(func(b []byte) []byte { b[headerFixed-1] = 0; return b }), ErrMalformed},
		{"sender not UTF-8", mut(func(b []byte) []byte { b[headerFixed] = 0xff; return b }), ErrMalformed},
		{"region not UTF-8", mut(func(b []byte) []byte { b[nregions+2] = 0xc3; b[nregions+3] = 0x28; return b }), ErrMalformed},
		{"oversized", make([]byte, MaxMessage+1), ErrOversized},
		{"count above 2^53", mut(func(b []byte) []byte { b[len(b)-2] = 0x11; return b }), ErrMalformed},
		{"halves flags", mut(func(b []byte) []byte { b[len(b)-1] = 4; return b }), ErrMalformed},
		{"halves missing", mut(func(b []byte) []byte { b[len(b)-1] = 1; return b }), ErrMalformed},
		{"mark count above the total", withMark(2, 0), ErrMalformed},
		{"mark valid", withMark(1, 999), nil},
		{"mark outside the bucket", withMark(1, 1000), ErrMalformed},
		{"mark empty", withMark(0, 0), ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.in)
			if !errors.Is(err, c.want) {
				t.Errorf("Decode() error = %v, want %v", err, c.want)
			}
		})
	}
}

// A KindUnheard frame carries the regions its sender does not hear in its
// region table, once each and never the sender's own, and no entries.
func TestUnheardRoundTrip(t *testing.T) {
	b, err := EncodeUnheard(t0, testSender("eu"), []string{"us", "eu", "ap", "us"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindUnheard || m.From != "eu" || !reflect.DeepEqual(m.Unheard, []string{"us", "ap"}) || len(m.Totals) != 0 {
		t.Errorf("decoded kind %v from %q, unheard %q, %d totals; want unheard from eu, [us ap], none", m.Kind, m.From, m.Unheard, len(m.Totals))
	}
	if _, err := EncodeUnheard(t0, testSender("eu"), []string{""}); !errors.Is(err, ErrMalformed) {
		t.Errorf("an empty region name: error %v, want ErrMalformed", err)
	}
	// The same region twice in the table, or an entry, is malformed.
	twice, _ := EncodeUnheard(t0, testSender("eu"), []string{"us", "ap"})
	nregions := headerFixed + len(testSender("eu").Node)
	twice[nregions+1+1+len("eu")+1] = 'e' // "us" -> "es"? keep the length: make it "eu"
	twice[nregions+1+1+len("eu")+2] = 'u'
	if _, err := Decode(twice); !errors.Is(err, ErrMalformed) {
		t.Errorf("the sender's region named again: error %v, want ErrMalformed", err)
	}
	withEntry := append([]byte(nil), b...)
	withEntry[len(withEntry)-1] = 1
	if _, err := Decode(withEntry); !errors.Is(err, ErrMalformed) {
		t.Errorf("an entry count of 1: error %v, want ErrMalformed", err)
	}
}

// FuzzDecode checks that Decode never panics and that whatever it accepts
// encodes back to a frame that decodes to the same totals.
func FuzzDecode(f *testing.F) {
	frames, _ := Encode(KindReconcile, t0, testSender("eu"), []region.Total{
		{Key: "k", Window: time.Second, Bucket: 5, Region: "eu", Count: 3},
		{Key: "k2", Window: time.Minute, Bucket: -1, Region: "us", Count: 1 << 40},
		{Key: "k3", Window: time.Minute, Bucket: 7, Region: "eu", Count: 5, Trail: trailOf(time.Minute, 1, 2, 5000, 30001)},
	}, 1360)
	f.Add(frames[0])
	fine, _ := EncodeFine(KindFlush, t0, testSender("eu"), []region.Total{
		{Key: "f", Window: time.Minute, Bucket: 7, Region: "eu", Count: 300, Trail: trailOf(time.Minute, 0, 240, 480, 720, 960, 1200, 59999)},
	}, 1360)
	f.Add(fine[0])
	f.Add(append([]byte{Version, 1}, append(make([]byte, headerFixed-3), 1, 'n', 1, 1, 'x', 0, 0)...))
	f.Add([]byte{})
	un, _ := EncodeUnheard(t0, testSender("eu"), []string{"us", "ap"})
	f.Add(un)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if m.Kind == KindUnheard {
			b2, err := EncodeUnheard(m.Sent, Sender{Node: m.Node, Region: m.From, Token: m.Token}, m.Unheard)
			if err != nil {
				t.Fatalf("re-encode unheard %q: %v", m.Unheard, err)
			}
			m2, err := Decode(b2)
			if err != nil || !reflect.DeepEqual(m2.Unheard, m.Unheard) {
				t.Fatalf("re-encoded unheard %q decodes to %q, %v", m.Unheard, m2.Unheard, err)
			}
			return
		}
		var got []region.Total
		for _, m2 := range encodeDecode(t, m.Kind, m.Sent, Sender{Node: m.Node, Region: m.From, Token: m.Token}, m.Totals, MaxMessage) {
			got = append(got, m2.Totals...)
		}
		if len(got) != len(m.Totals) || (len(got) > 0 && !reflect.DeepEqual(got, m.Totals)) {
			t.Fatalf("re-encoded totals differ: %v vs %v", got, m.Totals)
		}
	})
}

// TestFineTrailsOnlyToThoseWhoReadThem: a node announces flagFineTrails;
// frames to a member that announces it carry trails coarse, to one that
// does not (a node before fine trails) gathered into spans; a push-pull
// state frame is fine only when every member seen announces the flag and
// the exchange is not a join.
func TestFineTrailsOnlyToThoseWhoReadThem(t *testing.T) {
	n := receiver(t, "b", region.NewMemory(region.MemoryConfig{Region: "b"}))
	if m, ok := decodeMeta((&delegate{n}).NodeMeta(512)); !ok || m.flags&flagFineTrails == 0 {
		t.Fatalf("NodeMeta() flags = %b, ok %v; want flagFineTrails", m.flags, ok)
	}
	const wMs = 60000
	var h window.Trail
	for i := range int64(5000) {
		h.Add(i*wMs/5000, wMs, 1, false)
	}
	totals := []region.Total{{Key: "k", Window: time.Minute, Bucket: t0.UnixMilli() / wMs, Region: "b", Count: 5000, Trail: h}}
	marks := func(f []byte) int {
		t.Helper()
		m, err := Decode(f)
		if err != nil {
			t.Fatalf("Decode() error = %v", err)
		}
		return len(m.Totals[0].Trail)
	}
	for _, c := range []struct {
		name  string
		flags byte
		want  int
	}{
		{"older node", 0, window.MergeGranules},
		{"fine node", flagFineTrails, window.Granules},
	} {
		n.setMember(&memberlist.Node{Name: "peer", Meta: encodeMeta("a", "", c.flags, 9, 0)}, "alive")
		n.memMu.RLock()
		dest := n.members["peer"]
		n.memMu.RUnlock()
		frames, err := n.encodeFor(dest, KindFlush, t0, totals, 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		if got := marks(frames[0]); got != c.want {
			t.Errorf("%s: a frame to it carries %d marks, want %d", c.name, got, c.want)
		}
	}
	n.recent = newRing[region.Total](4)
	n.keepRecent(totals)
	for _, c := range []struct {
		name string
		old  bool // a member before fine trails is alive
		join bool
		want int
	}{
		{"all fine", false, false, window.Granules},
		{"all fine, a join", false, true, window.MergeGranules},
		{"an older member", true, false, window.MergeGranules},
	} {
		n.members = map[string]*member{}
		flags := byte(flagFineTrails)
		if c.old {
			flags = 0
		}
		n.setMember(&memberlist.Node{Name: "peer", Meta: encodeMeta("a", "", flags, 9, 0)}, "alive")
		if got := marks(n.localState(c.join)); got != c.want {
			t.Errorf("%s: the state frame carries %d marks, want %d", c.name, got, c.want)
		}
	}
}
