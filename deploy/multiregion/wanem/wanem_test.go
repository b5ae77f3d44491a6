package main

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	env := map[string]string{"WANEM_LOSS": "us-ap=1%", "WANEM_QUEUE": "9"}
	cfg, err := parseConfig([]string{"--delays", "eu-us=30ms,ap-eu=60ms,us-ap=90ms"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	if got, want := cfg.Regions["eu"], netip.MustParsePrefix("172.28.2.0/24"); got != want {
		t.Errorf("Regions[eu] = %v, want %v", got, want)
	}
	wantLinks := map[Pair]Link{
		{"eu", "us"}: {Delay: 30 * time.Millisecond},
		{"ap", "eu"}: {Delay: 60 * time.Millisecond},
		{"ap", "us"}: {Delay: 90 * time.Millisecond, Loss: 0.01},
	}
	if got := cfg.Links; !reflect.DeepEqual(got, wantLinks) {
		t.Errorf("Links = %v, want %v", got, wantLinks)
	}
	if got, want := cfg.QueueNum, uint16(9); got != want {
		t.Errorf("QueueNum = %v, want %v", got, want)
	}
	if got, want := cfg.Chain, "RLWANEM"; got != want {
		t.Errorf("Chain = %v, want %v", got, want)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"one region", []string{"--regions", "us=10.0.0.0/24"}},
		{"overlap", []string{"--regions", "us=10.0.0.0/16,eu=10.0.1.0/24", "--delays", ""}},
		{"unknown region", []string{"--delays", "us-mars=10ms"}},
		{"bad delay", []string{"--delays", "us-eu=soon"}},
		{"bad loss", []string{"--loss", "us-eu=2"}},
		{"same region", []string{"--delays", "us-us=1ms"}},
		{"ipv6", []string{"--regions", "us=fd00::/64,eu=fd01::/64", "--delays", ""}},
		{"no dash", []string{"--delays", "useu=1ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseConfig(tt.args, func(string) string { return "" }); err == nil {
				t.Errorf("parseConfig(%q) = nil error, want one", tt.args)
			}
		})
	}
}

func TestBuildRules(t *testing.T) {
	cfg, err := parseConfig([]string{"--regions", "a=127.201.1.0/24,b=127.201.2.0/24", "--delays", "a-b=5ms", "--queue", "42"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	got := buildRules(cfg)
	want := []ruleSpec{
		{"-s", "127.201.1.0/24", "-d", "127.201.2.0/24", "-m", "comment", "--comment", "rlcluster wanem a->b", "-j", "NFQUEUE", "--queue-num", "42"},
		{"-s", "127.201.2.0/24", "-d", "127.201.1.0/24", "-m", "comment", "--comment", "rlcluster wanem b->a", "-j", "NFQUEUE", "--queue-num", "42"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("buildRules() = %q, want %q", got, want)
	}
}

func TestClassify(t *testing.T) {
	cfg, err := parseConfig(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cls, paths := newClassifier(cfg)
	pkt := func(src, dst string) []byte {
		b := make([]byte, 20)
		b[0] = 0x45
		s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
		copy(b[12:], s[:])
		copy(b[16:], d[:])
		return b
	}
	tests := []struct {
		name     string
		pkt      []byte
		from, to string // empty: not classified
	}{
		{"us to ap", pkt("172.28.1.5", "172.28.3.7"), "us", "ap"},
		{"ap to us", pkt("172.28.3.7", "172.28.1.5"), "ap", "us"},
		{"eu to us", pkt("172.28.2.9", "172.28.1.5"), "eu", "us"},
		{"same region", pkt("172.28.1.5", "172.28.1.6"), "", ""},
		{"outside", pkt("127.0.0.1", "172.28.1.6"), "", ""},
		{"short", []byte{0x45, 0}, "", ""},
		{"ipv6", append([]byte{0x60}, make([]byte, 39)...), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := cls.classify(tt.pkt)
			if tt.from == "" {
				if p != -1 {
					t.Errorf("classify() = %d, want -1", p)
				}
				return
			}
			if p < 0 {
				t.Fatalf("classify() = -1, want %s->%s", tt.from, tt.to)
			}
			if got, want := paths[p].from+"->"+paths[p].to, tt.from+"->"+tt.to; got != want {
				t.Errorf("classify() path = %s, want %s", got, want)
			}
			wantDelay := cfg.Links[MakePair(tt.from, tt.to)].Delay
			if got := paths[p].link.Delay; got != wantDelay || got == 0 {
				t.Errorf("path delay = %v, want %v (non-zero)", got, wantDelay)
			}
		})
	}
}

func TestScheduler(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	s := newScheduler(2)
	s.add(0, 1, t0, 30*ms)
	s.add(1, 2, t0.Add(1*ms), 10*ms)
	s.add(0, 3, t0.Add(2*ms), 30*ms)
	s.add(1, 4, t0.Add(25*ms), 10*ms)
	for i := uint32(0); i < 200; i++ { // force the ring to grow while wrapped
		s.add(1, 100+i, t0.Add(40*ms), 10*ms)
	}
	steps := []struct {
		now  time.Duration
		want []uint32
		next time.Duration // 0: none held
	}{
		{5 * ms, nil, 11 * ms},
		{11 * ms, []uint32{2}, 30 * ms},
		{32 * ms, []uint32{1, 3}, 35 * ms},
		{36 * ms, []uint32{4}, 50 * ms},
	}
	for _, st := range steps {
		got := s.due(t0.Add(st.now), nil)
		if !slices.Equal(got, st.want) {
			t.Errorf("due(t0+%v) = %v, want %v", st.now, got, st.want)
		}
		next, ok := s.next()
		if ok != (st.next != 0) || (ok && !next.Equal(t0.Add(st.next))) {
			t.Errorf("after t0+%v: next() = %v, %v, want t0+%v", st.now, next.Sub(t0), ok, st.next)
		}
	}
	got := s.due(t0.Add(time.Second), nil)
	if len(got) != 200 || got[0] != 100 || got[199] != 299 || !slices.IsSorted(got) {
		t.Errorf("due(t0+1s) = %d ids from %v, want 100..299 in order", len(got), got[:1])
	}
	if n := s.held(); n != 0 {
		t.Errorf("held() = %d, want 0", n)
	}
}
