package gossip

import (
	"encoding/binary"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"
)

// delegate implements memberlist's Delegate, EventDelegate and PingDelegate
// for a Node. memberlist calls these on its own goroutines, some holding its
// locks: none of them blocks.
type delegate struct{ n *Node }

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
	_ memberlist.PingDelegate  = (*delegate)(nil)
)

// Node metadata layout: version (2), region length (1), region, API address
// length (1), API address, flags (1; bit 0: leaving gracefully; bit 1:
// the node decides from a store of its own now, not shared with its
// region's other nodes: Config.OwnStore, or its fallback, see apart.go;
// bit 2: the node reads trails of up to window.Granules marks, see
// wire.go), token (8: the random value the node's frames
// carry, see wire.go), and count-from (8, Unix ms: the instant from
// which the members count the node among its region's nodes, see
// Node.countFrom; absent in earlier releases' metadata, which count it at
// once). A node ignores flags it does not know.
const (
	metaVersion    = 2
	flagLeaving    = 1
	flagOwnStore   = 2
	flagFineTrails = 4
)

func encodeMeta(regionName, api string, flags byte, token uint64, countFrom int64) []byte {
	if len(api) > 255 {
		api = api[:255]
	}
	b := []byte{metaVersion, byte(len(regionName))}
	b = append(b, regionName...)
	b = append(b, byte(len(api)))
	b = append(b, api...)
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, token)
	return binary.BigEndian.AppendUint64(b, uint64(countFrom))
}

// nodeMeta is a member's decoded metadata.
type nodeMeta struct {
	region string
	api    string
	flags  byte
	token  uint64
	// countFrom is when the members count the node (Unix ms; 0: at once).
	countFrom int64
}

// decodeMeta decodes a member's metadata; ok is false unless it is
// well formed with a valid region name (1 to MaxRegionLen bytes of UTF-8)
// and a UTF-8 API address.
func decodeMeta(b []byte) (m nodeMeta, ok bool) {
	if len(b) < 2 || b[0] != metaVersion {
		return m, false
	}
	l := int(b[1])
	p := 2 + l
	if p+1 > len(b) {
		return m, false
	}
	m.region = string(b[2:p])
	al := int(b[p])
	p++
	if end := p + al + 1 + 8; end != len(b) && end+8 != len(b) {
		return m, false
	}
	m.api = string(b[p : p+al])
	p += al
	m.flags = b[p]
	m.token = binary.BigEndian.Uint64(b[p+1:])
	if p+1+8 < len(b) {
		m.countFrom = int64(binary.BigEndian.Uint64(b[p+1+8:]))
	}
	if !validRegion(m.region) || !utf8.ValidString(m.api) {
		return m, false
	}
	return m, true
}

// NodeMeta returns the region and API address.
func (d *delegate) NodeMeta(limit int) []byte {
	flags := byte(flagFineTrails)
	if d.n.leaving.Load() {
		flags |= flagLeaving
	}
	if d.n.apart() {
		flags |= flagOwnStore
	}
	from := d.n.countFrom.Load()
	b := encodeMeta(d.n.cfg.Region, d.n.cfg.APIAddr, flags, d.n.token, from)
	if len(b) > limit {
		return encodeMeta(d.n.cfg.Region, "", flags, d.n.token, from)
	}
	return b
}

// NotifyMsg queues a replication frame; it copies b and never blocks.
func (d *delegate) NotifyMsg(b []byte) { d.n.enqueue(b) }

// GetBroadcasts returns nothing: totals go point to point, not by gossip.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState returns the recently reconciled totals (anti-entropy).
func (d *delegate) LocalState(join bool) []byte { return d.n.localState(join) }

// MergeRemoteState queues a peer's recently reconciled totals for merging.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	if len(buf) > 0 {
		d.n.enqueue(buf)
	}
}

// NotifyJoin records a member coming alive.
func (d *delegate) NotifyJoin(node *memberlist.Node) { d.n.setMember(node, "alive") }

// NotifyUpdate records a member's new metadata.
func (d *delegate) NotifyUpdate(node *memberlist.Node) { d.n.setMember(node, "alive") }

// NotifyLeave records a member that failed, or left when it announced its
// leave in its metadata first (memberlist's Node.State does not tell).
func (d *delegate) NotifyLeave(node *memberlist.Node) { d.n.setMember(node, "dead") }

// AckPayload carries this node's clock (Unix ms) in ping acks.
func (d *delegate) AckPayload() []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(d.n.cfg.Now().UnixMilli()))
}

// NotifyPingComplete estimates the peer's clock offset NTP-style: the peer
// stamped its ack about rtt/2 before it arrived.
func (d *delegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	if len(payload) != 8 || other == nil {
		return
	}
	peer := time.UnixMilli(int64(binary.BigEndian.Uint64(payload)))
	mid := d.n.cfg.Now().Add(-rtt / 2)
	// Only members this node records (valid names and metadata) get an
	// entry, and setMember forgets it when they go.
	d.n.memMu.RLock()
	m := d.n.members[other.Name]
	known := m != nil && m.state == "alive"
	d.n.memMu.RUnlock()
	if !known {
		return
	}
	d.n.noteRTT(m.region, rtt)
	off := peer.Sub(mid).Round(time.Millisecond)
	d.n.ageMu.Lock()
	d.n.offsets[other.Name] = off
	d.n.ageMu.Unlock()
	d.n.checkSkew(other.Name, m.region, off)
}
