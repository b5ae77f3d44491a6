package gossip

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// memNet is an in-memory network of memberlist transports for tests that
// run inside a testing/synctest bubble: packets go through buffered
// channels (dropped, as UDP would be, when the receiver is gone or its
// buffer is full) and streams are net.Pipe pairs. Nothing blocks on a node
// that has shut down, so every goroutine ends when the nodes close.
type memNet struct {
	mu    sync.Mutex
	nodes map[string]*memTransport
	port  int
}

func newMemNet() *memNet { return &memNet{nodes: map[string]*memTransport{}} }

// transport returns a new transport at the next free 127.0.0.1 address.
func (n *memNet) transport() *memTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.port++
	t := &memTransport{net: n, ip: net.IPv4(127, 0, 0, 1), port: n.port,
		packets: make(chan *memberlist.Packet, 1024), streams: make(chan net.Conn, 64), done: make(chan struct{})}
	t.addr = net.JoinHostPort(t.ip.String(), strconv.Itoa(t.port))
	n.nodes[t.addr] = t
	return t
}

func (n *memNet) peer(addr string) *memTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nodes[addr]
}

type memTransport struct {
	net     *memNet
	ip      net.IP
	port    int
	addr    string
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
	once    sync.Once
}

var _ memberlist.NodeAwareTransport = (*memTransport)(nil)

func (t *memTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) { return t.ip, t.port, nil }

func (t *memTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *memTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	p := t.net.peer(a.Addr)
	if p == nil {
		return now, nil // nobody there: lost, as UDP is
	}
	pk := &memberlist.Packet{Buf: append([]byte(nil), b...), From: &net.UDPAddr{IP: t.ip, Port: t.port}, Timestamp: now}
	select {
	case <-p.done:
	case p.packets <- pk:
	default: // receiver's buffer full: lost
	}
	return now, nil
}

func (t *memTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *memTransport) StreamCh() <-chan net.Conn           { return t.streams }

func (t *memTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *memTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	p := t.net.peer(a.Addr)
	if p == nil {
		return nil, fmt.Errorf("dial %s: %w", a.Addr, errRefused)
	}
	mine, theirs := net.Pipe()
	select {
	case <-p.done:
		return nil, fmt.Errorf("dial %s: %w", a.Addr, errRefused)
	case p.streams <- theirs:
		return mine, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("dial %s: timeout", a.Addr)
	}
}

var errRefused = errors.New("connection refused")

func (t *memTransport) Shutdown() error {
	t.once.Do(func() {
		t.net.mu.Lock()
		delete(t.net.nodes, t.addr)
		t.net.mu.Unlock()
		close(t.done)
	})
	return nil
}
