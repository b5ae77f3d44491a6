package gossip

import (
	"encoding/binary"
	"time"

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

// Node metadata layout: version (1), region length (1), region, API address
// length (1), API address, flags (1; bit 0: leaving gracefully).
const (
	metaVersion = 1
	flagLeaving = 1
)

func encodeMeta(regionName, api string, flags byte) []byte {
	if len(api) > 255 {
		api = api[:255]
	}
	b := []byte{metaVersion, byte(len(regionName))}
	b = append(b, regionName...)
	b = append(b, byte(len(api)))
	b = append(b, api...)
	return append(b, flags)
}

func decodeMeta(b []byte) (regionName, api string, flags byte, ok bool) {
	if len(b) < 3 || b[0] != metaVersion {
		return "", "", 0, false
	}
	l := int(b[1])
	if 2+l+1 > len(b) {
		return "", "", 0, false
	}
	regionName = string(b[2 : 2+l])
	p := 2 + l
	al := int(b[p])
	if p+1+al > len(b) {
		return "", "", 0, false
	}
	api = string(b[p+1 : p+1+al])
	if p+1+al < len(b) {
		flags = b[p+1+al]
	}
	return regionName, api, flags, true
}

// NodeMeta returns the region and API address.
func (d *delegate) NodeMeta(limit int) []byte {
	var flags byte
	if d.n.leaving.Load() {
		flags |= flagLeaving
	}
	b := encodeMeta(d.n.cfg.Region, d.n.cfg.APIAddr, flags)
	if len(b) > limit {
		return encodeMeta(d.n.cfg.Region, "", flags)
	}
	return b
}

// NotifyMsg queues a replication frame; it copies b and never blocks.
func (d *delegate) NotifyMsg(b []byte) { d.n.enqueue(b) }

// GetBroadcasts returns nothing: totals go point to point, not by gossip.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState returns the recently reconciled totals (anti-entropy).
func (d *delegate) LocalState(join bool) []byte { return d.n.localState() }

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
	d.n.ageMu.Lock()
	d.n.offsets[other.Name] = peer.Sub(mid).Round(time.Millisecond)
	d.n.ageMu.Unlock()
}
