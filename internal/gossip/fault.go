package gossip

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// FaultNetwork is a simulated WAN between regions for tests and demos:
// one-way latency per region pair, packet loss, duplication, reordering and
// partitions, applied by the FaultTransports made from it. Faults are drawn
// from a PCG generator seeded with the seed given to NewFaultNetwork, so the
// same sequence of sends meets the same faults. Safe for concurrent use.
//
// Packets (UDP) are delayed by the pair's latency (plus Jitter for a share
// Reorder of them, so that they overtake or are overtaken), dropped with
// probability Loss, sent twice with probability Duplicate, and dropped when
// their regions are partitioned (checked at send and at delivery). Streams
// (TCP) cannot be lost: a dial between partitioned regions fails, a dial
// takes two one-way latencies (the handshake), the first write one more,
// and writes on a stream fail once its regions are partitioned.
type FaultNetwork struct {
	mu       sync.Mutex
	rng      *rand.Rand
	latency  map[[2]string]time.Duration
	loss     float64
	dup      float64
	reorder  float64
	jitter   time.Duration
	cut      map[[2]string]bool
	regionOf map[string]string // advertised ip:port -> region
	stats    map[[2]string]*PairStats
}

// PairStats counts what one ordered region pair sent through the network.
type PairStats struct {
	Packets, PacketBytes int64
	Dropped, Duplicated  int64
	Streams, StreamBytes int64
}

// NewFaultNetwork returns a network with no faults.
func NewFaultNetwork(seed uint64) *FaultNetwork {
	return &FaultNetwork{
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		latency:  map[[2]string]time.Duration{},
		cut:      map[[2]string]bool{},
		regionOf: map[string]string{},
		stats:    map[[2]string]*PairStats{},
	}
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// SetLatency sets the one-way latency between regions a and b (both ways;
// a == b sets the latency inside a region).
func (f *FaultNetwork) SetLatency(a, b string, oneWay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency[pair(a, b)] = oneWay
}

// SetLoss sets the share of packets between different regions dropped.
func (f *FaultNetwork) SetLoss(p float64) { f.mu.Lock(); f.loss = p; f.mu.Unlock() }

// SetDuplicate sets the share of packets between different regions sent
// twice.
func (f *FaultNetwork) SetDuplicate(p float64) { f.mu.Lock(); f.dup = p; f.mu.Unlock() }

// SetReorder delays a share p of the packets between different regions by
// up to extra more, so that they arrive out of order.
func (f *FaultNetwork) SetReorder(p float64, extra time.Duration) {
	f.mu.Lock()
	f.reorder, f.jitter = p, extra
	f.mu.Unlock()
}

// Partition cuts every packet and stream between regions a and b.
func (f *FaultNetwork) Partition(a, b string) { f.mu.Lock(); f.cut[pair(a, b)] = true; f.mu.Unlock() }

// Heal restores the link between regions a and b.
func (f *FaultNetwork) Heal(a, b string) { f.mu.Lock(); delete(f.cut, pair(a, b)); f.mu.Unlock() }

// HealAll restores every link.
func (f *FaultNetwork) HealAll() { f.mu.Lock(); f.cut = map[[2]string]bool{}; f.mu.Unlock() }

// Stats returns a copy of the traffic counts per ordered (from, to) region
// pair.
func (f *FaultNetwork) Stats() map[[2]string]PairStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[[2]string]PairStats, len(f.stats))
	for k, v := range f.stats {
		out[k] = *v
	}
	return out
}

func (f *FaultNetwork) statLocked(from, to string) *PairStats {
	k := [2]string{from, to}
	s := f.stats[k]
	if s == nil {
		s = &PairStats{}
		f.stats[k] = s
	}
	return s
}

// ErrPartitioned is returned for a stream between partitioned regions.
var ErrPartitioned = errors.New("gossip: fault network: regions partitioned")

// FaultTransport wraps a memberlist transport of one region with the
// faults of a FaultNetwork. Create it with NewFaultTransport.
type FaultTransport struct {
	inner  memberlist.NodeAwareTransport
	net    *FaultNetwork
	region string
}

var _ memberlist.NodeAwareTransport = (*FaultTransport)(nil)

// NewFaultTransport wraps inner, the transport of a node in region, in the
// faults of fn. Pass the result as Config.Transport.
func NewFaultTransport(inner memberlist.NodeAwareTransport, fn *FaultNetwork, region string) *FaultTransport {
	return &FaultTransport{inner: inner, net: fn, region: region}
}

// FinalAdvertiseAddr asks the inner transport and records the address's
// region, so that other FaultTransports know where packets go.
func (t *FaultTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	aip, aport, err := t.inner.FinalAdvertiseAddr(ip, port)
	if err == nil {
		t.net.mu.Lock()
		t.net.regionOf[net.JoinHostPort(aip.String(), strconv.Itoa(aport))] = t.region
		t.net.mu.Unlock()
	}
	return aip, aport, err
}

// plan decides the fate of one packet to addr: how many copies and the
// delay of each (none: dropped).
func (t *FaultTransport) plan(addr string, size int) (to string, delays []time.Duration) {
	f := t.net
	f.mu.Lock()
	defer f.mu.Unlock()
	to, ok := f.regionOf[addr]
	if !ok {
		return "", []time.Duration{0}
	}
	st := f.statLocked(t.region, to)
	st.Packets++
	st.PacketBytes += int64(size)
	p := pair(t.region, to)
	if f.cut[p] {
		st.Dropped++
		return to, nil
	}
	lat := f.latency[p]
	if to == t.region {
		return to, []time.Duration{lat}
	}
	if f.loss > 0 && f.rng.Float64() < f.loss {
		st.Dropped++
		return to, nil
	}
	copies := 1
	if f.dup > 0 && f.rng.Float64() < f.dup {
		copies = 2
		st.Duplicated++
	}
	for range copies {
		d := lat
		if f.reorder > 0 && f.jitter > 0 && f.rng.Float64() < f.reorder {
			d += time.Duration(f.rng.Int64N(int64(f.jitter)))
		}
		delays = append(delays, d)
	}
	return to, delays
}

func (t *FaultTransport) cutTo(to string) bool {
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	return t.net.cut[pair(t.region, to)]
}

// WriteTo sends a packet through the faults.
func (t *FaultTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a packet through the faults; a dropped packet still
// reports success, as UDP does.
func (t *FaultTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	to, delays := t.plan(addr.Addr, len(b))
	now := time.Now()
	for _, d := range delays {
		if d <= 0 {
			if _, err := t.inner.WriteToAddress(b, addr); err != nil {
				return now, err
			}
			continue
		}
		c := append([]byte(nil), b...)
		time.AfterFunc(d, func() {
			if to != "" && t.cutTo(to) {
				return
			}
			_, _ = t.inner.WriteToAddress(c, addr)
		})
	}
	return now, nil
}

// PacketCh returns the inner transport's packets.
func (t *FaultTransport) PacketCh() <-chan *memberlist.Packet { return t.inner.PacketCh() }

// StreamCh returns the inner transport's incoming streams.
func (t *FaultTransport) StreamCh() <-chan net.Conn { return t.inner.StreamCh() }

// Shutdown shuts the inner transport down.
func (t *FaultTransport) Shutdown() error { return t.inner.Shutdown() }

// DialTimeout dials through the faults.
func (t *FaultTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout dials through the faults: it fails between partitioned
// regions and takes two one-way latencies otherwise.
func (t *FaultTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	f := t.net
	f.mu.Lock()
	to, known := f.regionOf[addr.Addr]
	var lat time.Duration
	cut := false
	if known {
		cut = f.cut[pair(t.region, to)]
		lat = f.latency[pair(t.region, to)]
		f.statLocked(t.region, to).Streams++
	}
	f.mu.Unlock()
	if cut {
		time.Sleep(min(timeout, 2*lat))
		return nil, ErrPartitioned
	}
	if 2*lat > timeout {
		time.Sleep(timeout)
		return nil, errors.New("gossip: fault network: dial timeout")
	}
	time.Sleep(2 * lat)
	c, err := t.inner.DialAddressTimeout(addr, timeout-2*lat)
	if err != nil || !known {
		return c, err
	}
	return &faultConn{Conn: c, t: t, to: to, lat: lat}, nil
}

// faultConn delays a stream's first write by one latency and fails writes
// once the regions are partitioned.
type faultConn struct {
	net.Conn
	t       *FaultTransport
	to      string
	lat     time.Duration
	written bool
}

func (c *faultConn) Write(b []byte) (int, error) {
	if c.t.cutTo(c.to) {
		return 0, ErrPartitioned
	}
	if !c.written {
		c.written = true
		time.Sleep(c.lat)
	}
	c.t.net.mu.Lock()
	c.t.net.statLocked(c.t.region, c.to).StreamBytes += int64(len(b))
	c.t.net.mu.Unlock()
	return c.Conn.Write(b)
}
