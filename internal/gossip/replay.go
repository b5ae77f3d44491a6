package gossip

import (
	"errors"
	"sync"
)

// Frames that cannot be replayed.
//
// memberlist's encryption (AES-GCM) authenticates a packet but does not
// stop anyone who captured one from sending it again, later or to another
// node. So every frame names the incarnation it is for and carries a
// sequence number (wire.go): the sender's token (its incarnation, drawn
// at start), the receiver's token, and a number that grows with each of
// the sender's frames to that receiver incarnation. A receiver drops:
//
//   - misdirected: a frame sent to another node, or to an earlier
//     incarnation of this one;
//   - replay: a number it has accepted from that sender incarnation;
//   - stale: a number older than the last seqWindow it has seen from it
//     (a window rather than strict order, so that UDP and TCP frames that
//     overtake each other are all accepted);
//   - not_alive: a frame from a member memberlist holds failed, unless
//     it is newer than every frame heard from that member and was sent
//     after the member was seen to fail (less the clock skew bound): a
//     captured frame can never bring a failed member back, and a member
//     that did come back (a healed partition) is heard at once (see
//     revive in probe.go). A state frame (push-pull, which has no single
//     receiver and no sequence) from a failed member is dropped too.
//
// A restarted sender draws a new token, which its metadata announces: its
// numbers start again and are accepted once the receiver knows the new
// token; frames under the old token are dropped as not_member.

// seqWindow is how many of a sender's latest sequence numbers a receiver
// remembers; an older one is stale. At a flush every 20 ms, a heartbeat
// every 100 ms and probes, a node sends one receiver well under 200 frames
// a second, so a frame may arrive up to 20 s after later ones.
const seqWindow = 4096

// seqWin is what a receiver knows of one sender incarnation's sequence
// numbers: the highest accepted, and which of the seqWindow numbers up to
// it were.
type seqWin struct {
	token uint64
	top   uint64
	bits  [seqWindow / 64]uint64
}

// check returns why number s must be dropped ("replay" or "stale"), or ""
// when it is new, and whether it is newer than every number accepted.
func (w *seqWin) check(s uint64) (reason string, newest bool) {
	switch {
	case s == 0:
		return "stale", false
	case s > w.top:
		return "", true
	case w.top-s >= seqWindow:
		return "stale", false
	case w.bits[(s/64)%(seqWindow/64)]&(1<<(s%64)) != 0:
		return "replay", false
	}
	return "", false
}

// mark records s as accepted; check must have allowed it.
func (w *seqWin) mark(s uint64) {
	if s > w.top {
		if s-w.top >= seqWindow {
			w.bits = [seqWindow / 64]uint64{}
		} else {
			for x := w.top + 1; x < s; x++ {
				w.bits[(x/64)%(seqWindow/64)] &^= 1 << (x % 64)
			}
		}
		w.top = s
	}
	w.bits[(s/64)%(seqWindow/64)] |= 1 << (s % 64)
}

// sequences is a Node's sequence numbers: the last one sent to each
// receiver incarnation (by its token) and what was accepted from each
// sender (by its name).
type sequences struct {
	mu   sync.Mutex
	out  map[uint64]uint64
	high uint64 // the highest number in out, or forgotten from it
	in   map[string]*seqWin
}

// stampFor returns frame addressed to m's incarnation with the next
// sequence number for it. A receiver's numbers start at the highest this
// node has used for any receiver, so that if it forgets a receiver and
// numbers its frames to it again, they follow every number it used
// before: a receiver that remembers this node never takes them for
// replays.
func (n *Node) stampFor(m *member, frame []byte) []byte {
	n.seq.mu.Lock()
	if n.seq.out == nil {
		n.seq.out = map[uint64]uint64{}
	}
	s, ok := n.seq.out[m.token]
	if !ok {
		s = n.seq.high
	}
	s++
	n.seq.out[m.token] = s
	n.seq.high = max(n.seq.high, s)
	n.seq.mu.Unlock()
	return stamp(frame, m.token, s)
}

// errNoPool is the error of a send by a node that has no memberlist (one
// built without New, as the package's tests build receivers).
var errNoPool = errors.New("gossip: the node has no pool to send on")

// sendPacket sends frame to m over UDP, stamped for m.
func (n *Node) sendPacket(m *member, frame []byte) error {
	if n.ml == nil {
		return errNoPool
	}
	return n.ml.SendBestEffort(&m.node, n.stampFor(m, frame))
}

// sendStream sends frame to m over TCP, stamped for m.
func (n *Node) sendStream(m *member, frame []byte) error {
	if n.ml == nil {
		return errNoPool
	}
	return n.ml.SendReliable(&m.node, n.stampFor(m, frame))
}

// unreplayed returns why frame m from sender s must be dropped as misdirected,
// replayed, stale or from a failed member (see the top of this file), or
// "" when it is accepted, in which case its number is recorded.
func (n *Node) unreplayed(m Message, s *member) string {
	n.memMu.RLock()
	dead, deadAt := s.state == "dead", s.deadAt
	n.memMu.RUnlock()
	if m.Kind == KindState { // decoded with to and seq 0
		if dead {
			return "not_alive"
		}
		return ""
	}
	if m.To != n.token {
		return "misdirected"
	}
	n.seq.mu.Lock()
	defer n.seq.mu.Unlock()
	if n.seq.in == nil {
		n.seq.in = map[string]*seqWin{}
	}
	w := n.seq.in[m.Node]
	if w == nil || w.token != m.Token {
		w = &seqWin{token: m.Token}
		n.seq.in[m.Node] = w
	}
	reason, newest := w.check(m.Seq)
	if reason != "" {
		return reason
	}
	if dead && (!newest || m.Sent.Before(deadAt.Add(-n.cfg.MaxClockSkew))) {
		return "not_alive"
	}
	w.mark(m.Seq)
	return ""
}

// pruneSequences forgets the sequence numbers of members no longer
// listed: tokens maps each listed member's name to its token.
func (n *Node) pruneSequences(tokens map[string]uint64) {
	live := make(map[uint64]bool, len(tokens))
	for _, t := range tokens {
		live[t] = true
	}
	n.seq.mu.Lock()
	defer n.seq.mu.Unlock()
	for t := range n.seq.out {
		if !live[t] {
			delete(n.seq.out, t)
		}
	}
	for name, w := range n.seq.in {
		if t, ok := tokens[name]; !ok || t != w.token {
			delete(n.seq.in, name)
		}
	}
}
