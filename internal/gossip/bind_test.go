package gossip

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
)

// dnsServer answers A and AAAA queries for the names it holds over UDP on
// loopback, as a real resolver would: a name bound by a test resolves to
// the addresses the test chose, through Go's own DNS client.
type dnsServer struct {
	conn  net.PacketConn
	names map[string][]net.IP // lower-case, no trailing dot
}

func newDNSServer(t *testing.T, names map[string][]string) *dnsServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{conn: conn, names: map[string][]net.IP{}}
	for n, addrs := range names {
		for _, a := range addrs {
			s.names[n] = append(s.names[n], net.ParseIP(a))
		}
	}
	go s.serve()
	t.Cleanup(func() { conn.Close() })
	return s
}

// resolver is a net.Resolver that asks only s.
func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.conn.LocalAddr().String())
	}}
}

func (s *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp := s.answer(buf[:n]); resp != nil {
			_, _ = s.conn.WriteTo(resp, from)
		}
	}
}

// answer builds the reply to one query: the question, then one record per
// address of the asked family; NXDOMAIN for an unknown name.
func (s *dnsServer) answer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	p := 12
	var labels []string
	for p < len(q) && q[p] != 0 {
		l := int(q[p])
		if p+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[p+1:p+1+l]))
		p += 1 + l
	}
	p++
	if p+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[p:])
	question := q[12 : p+4]
	ips, known := s.names[strings.ToLower(strings.Join(labels, "."))]
	var answers [][]byte
	for _, ip := range ips {
		rec := []byte{0xc0, 12} // the name: a pointer to the question's
		switch ip4 := ip.To4(); {
		case qtype == 1 && ip4 != nil:
			rec = binary.BigEndian.AppendUint16(rec, 1)
			rec = append(rec, 0, 1, 0, 0, 0, 60, 0, 4)
			rec = append(rec, ip4...)
		case qtype == 28 && ip4 == nil:
			rec = binary.BigEndian.AppendUint16(rec, 28)
			rec = append(rec, 0, 1, 0, 0, 0, 60, 0, 16)
			rec = append(rec, ip.To16()...)
		default:
			continue
		}
		answers = append(answers, rec)
	}
	flags := uint16(0x8180) // a response, recursion desired and available
	if !known {
		flags |= 3 // NXDOMAIN
	}
	out := append([]byte(nil), q[:2]...)
	out = binary.BigEndian.AppendUint16(out, flags)
	out = append(out, 0, 1)
	out = binary.BigEndian.AppendUint16(out, uint16(len(answers)))
	out = append(out, 0, 0, 0, 0)
	out = append(out, question...)
	for _, a := range answers {
		out = append(out, a...)
	}
	return out
}

// reachable reports whether a TCP connection to host:port is accepted.
func reachable(host string, port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(host, fmt.Sprint(port)), 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// nonLoopbackIPs returns the machine's addresses that are not loopback
// (nor link-local, which need a zone).
func nonLoopbackIPs(t *testing.T) []string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			out = append(out, n.IP.String())
		}
	}
	return out
}

// TestBindNamedAddressesOnly: a keyless node bound to a name listens on
// the addresses the name resolves to and on no other, over real sockets:
// "localhost" is reachable at 127.0.0.1 only, not at 127.0.0.2 (another
// loopback address) nor at any of the machine's other addresses; a name
// that resolves to two loopback addresses is reachable at both; [::1] at
// ::1 only. memberlist alone binds a name it cannot parse as an IP on
// every interface.
func TestBindNamedAddressesOnly(t *testing.T) {
	dns := newDNSServer(t, map[string][]string{"twice.test": {"127.0.0.1", "127.0.0.3"}})
	cases := []struct {
		addr      string
		reachable []string
		not       []string
	}{
		{"localhost:0", []string{"127.0.0.1"}, append([]string{"127.0.0.2", "::1"}, nonLoopbackIPs(t)...)},
		{"twice.test:0", []string{"127.0.0.1", "127.0.0.3"}, append([]string{"127.0.0.2", "::1"}, nonLoopbackIPs(t)...)},
		{"[::1]:0", []string{"::1"}, append([]string{"127.0.0.1"}, nonLoopbackIPs(t)...)},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			cfg := testConfig()
			cfg.Name, cfg.Region, cfg.BindAddr, cfg.Resolver = "n", "eu", c.addr, dns.resolver()
			n := startTestNode(t, cfg, region.NewMemory(region.MemoryConfig{Region: "eu"}))
			_, ps, _ := net.SplitHostPort(n.Addr())
			var port int
			fmt.Sscan(ps, &port)
			if host, _, _ := net.SplitHostPort(n.Addr()); host != c.reachable[0] {
				t.Errorf("Addr() = %s, want the first address %s", n.Addr(), c.reachable[0])
			}
			for _, h := range c.reachable {
				if !reachable(h, port) {
					t.Errorf("%s:%d refused, want it bound", h, port)
				}
			}
			for _, h := range c.not {
				if reachable(h, port) {
					t.Errorf("%s:%d accepted a connection: bound to an address %s does not name", h, port, c.addr)
				}
			}
		})
	}
}

// TestNoKeyUnlessEveryAddressLoopback: without a key, a node is refused
// (ErrNoKey) when any address its bind or advertise host resolves to is
// not loopback: a name with one loopback and one public address, in IPv4
// and IPv6, and a public IPv6 literal or name, for the bind or the
// advertise address. A name that resolves to ::1 alone binds.
func TestNoKeyUnlessEveryAddressLoopback(t *testing.T) {
	dns := newDNSServer(t, map[string][]string{
		"mixed.test":   {"127.0.0.1", "192.0.2.1"},
		"mixed6.test":  {"::1", "2001:db8::1"},
		"public6.test": {"2001:db8::1"},
		"lo6.test":     {"::1"},
	})
	store := region.NewMemory(region.MemoryConfig{Region: "eu"})
	for _, c := range []struct{ bind, advertise string }{
		{"mixed.test:0", ""},
		{"mixed6.test:0", ""},
		{"[2001:db8::1]:0", ""},
		{"public6.test:0", ""},
		{"[::1]:0", "mixed6.test:7946"},
		{"127.0.0.1:0", "[2001:db8::1]:7946"},
	} {
		cfg := testConfig()
		cfg.Name, cfg.Region, cfg.BindAddr, cfg.AdvertiseAddr, cfg.Resolver = "n", "eu", c.bind, c.advertise, dns.resolver()
		n, err := New(cfg, store)
		if err == nil {
			_ = n.Close(context.Background())
		}
		if !errors.Is(err, ErrNoKey) {
			t.Errorf("New(BindAddr %s, AdvertiseAddr %q, no key) = %v, want ErrNoKey", c.bind, c.advertise, err)
		}
	}
	cfg := testConfig()
	cfg.Name, cfg.Region, cfg.BindAddr, cfg.Resolver = "n", "eu", "lo6.test:0", dns.resolver()
	n := startTestNode(t, cfg, store)
	if got := n.Addr(); !strings.HasPrefix(got, "[::1]:") {
		t.Errorf("Addr() = %s, want [::1]:port", got)
	}
	if _, err := New(Config{Name: "x", Region: "eu", BindAddr: "unknown.test:0", Resolver: dns.resolver()}, store); !errors.Is(err, ErrConfig) {
		t.Errorf("New(a name that does not resolve) = %v, want ErrConfig", err)
	}
}
