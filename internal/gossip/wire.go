package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// The wire format, version 6, or 5 for a frame without calendar buckets.
// Every replication message is one frame, all integers big-endian or
// (u)varint as noted:
//
//	off  size     field
//	0    1        version: 6 when the frame carries a calendar bucket,
//	              else 5 (a version-5 node reads it); a frame of another
//	              version is dropped
//	1    1        kind: 1 flush, 2 reconcile, 3 state (push-pull), 4 touch,
//	              5 repair (a request, no entries), 6 repaired (its answer),
//	              7 rejoin (no entries), 8 unheard (no entries; the
//	              regions after the sender's in the region table are the
//	              member regions the sender does not hear), 9 relay,
//	              10 demand (counts of refused hits, no trails). A node
//	              that predates a kind drops its frames.
//	2    8        sent: the sender's clock, Unix milliseconds (int64)
//	10   8        token: the sender's incarnation, a random value it draws
//	              at start and announces in its member metadata (uint64)
//	18   8        to: the receiver's token, so that a frame is valid only
//	              at the incarnation it was sent to; 0 in a state frame,
//	              which memberlist's push-pull hands to whichever member
//	              it syncs with
//	26   8        seq: the sender's sequence number for frames to that
//	              incarnation, at least 1 and growing with each frame; 0
//	              in a state frame. The receiver drops a number it has
//	              seen, or one older than the last 4096 (see replay.go)
//	34   1        sender node name length (1..255), then the name (UTF-8)
//	     1        nregions, 1..MaxRegions; region 0 is the sender's region
//	     ...      nregions times: 1-byte length (1..MaxRegionLen), name
//	              bytes (valid UTF-8)
//	     2        nentries (uint16)
//	     ...      nentries times:
//	                uvarint key length (1..MaxKeyLen), key bytes
//	                uvarint window in ms (1..7d); in version 6, 0 for a
//	                        calendar bucket, then uvarint its length in
//	                        ms (1 s..window.MaxCalendarBucket, whole
//	                        seconds)
//	                varint  bucket (zig-zag); a calendar bucket's start
//	                        in Unix ms (whole seconds, not before the
//	                        epoch), see window.Limit.BucketAt
//	                        (region.Total names it with Window minus
//	                        the length)
//	                1 byte  region index (< nregions)
//	                uvarint count (at most MaxCount)
//	                uvarint nmarks (0..window.Granules): the region's
//	                        trail of the bucket (window.Trail); at most
//	                        window.MergeGranules unless the receiver
//	                        announces flagFineTrails (see below)
//	                ...     nmarks times: uvarint At, less the previous
//	                        mark's At plus one (the first: At), and
//	                        uvarint N (1..count)
//
// Offsets are ms from the bucket's start; the trail must be a valid coarse
// trail for the window (window.Trail.Valid: at most one mark per 1/256 of
// the bucket) counting at most count hits, or the frame is malformed. A
// calendar bucket (a fixed window) carries no marks.
//
// Nodes before fine trails read at most 64 marks, one per 1/64 of the
// bucket (window.MergeSpan), and drop a frame with more as malformed. So
// a node gathers trails into those spans (Encode) for every frame except
// those to a member that announces flagFineTrails in its metadata
// (EncodeFine), and a push-pull state frame, whose receiver memberlist
// does not name, is fine only when every member it sees announces the
// flag. Either kind of report merges with the other (window.Trail.Merge),
// so a cluster in a rolling upgrade counts every hit, with remote hits
// late by up to 1/64 of a window where an older node reported them.
// A frame is at most MaxMessage bytes and ends exactly after its last entry.
// An entry with a 20-byte key, a small count and a mark or two takes about
// 40 bytes, so one UDP packet (about 1360 bytes of payload) carries about
// 30 totals; a mark takes 2 to 5 bytes, so a full trail (window.Granules
// marks) adds up to about 1,300, one gathered into spans about 320.
// Decode never panics on any input (see FuzzDecode). Decode checks what a
// frame says on its own; whether its sender may say it (a live member,
// reporting only its own region) is the receiver's check (see receive.go).
const (
	// Version is the wire format version this package writes and reads.
	// Versions 2 to 4 carried no sequence numbers (2, 3), or no trails
	// (a sequenced version 4 of half-buckets): they are dropped.
	Version = 6
	// versionFixed is the version of a frame without calendar buckets:
	// version 5, which a node of that version reads.
	versionFixed = 5
	// MaxMessage is the largest frame accepted or written (bytes).
	MaxMessage = 1 << 20
	// MaxKeyLen is the longest key carried (bytes); Dirty drops longer keys.
	// It is the stores' bound, region.MaxKeyBytes.
	MaxKeyLen = region.MaxKeyBytes
	// MaxRegionLen is the longest region name (bytes), region.MaxRegionName.
	MaxRegionLen = region.MaxRegionName
	// MaxRegions is the most regions one frame names.
	MaxRegions = 255
	// MaxCount is the largest count a frame may carry: 2^53, so that counts
	// stay exact as float64 (metrics, JSON) and a sum over regions cannot
	// wrap.
	MaxCount = 1 << 53
	// maxNodeName is the longest sender node name.
	maxNodeName = 255
	// maxEntries is the most entries one frame holds.
	maxEntries = 1<<16 - 1
	// headerFixed is the size of the fixed part of the header, up to the
	// sender name's length byte.
	headerFixed = 35
	// offTo and offSeq are the offsets of the header's to and seq fields.
	offTo, offSeq = 18, 26
	// maxWindowMs bounds a window on the wire: the longest window a limit
	// may have.
	maxWindowMs = int64(window.MaxWindow / time.Millisecond)
)

// Kind is the purpose of a frame.
type Kind uint8

// The kinds of frames.
const (
	// KindFlush carries the dirty totals of one flush interval.
	KindFlush Kind = 1
	// KindReconcile carries the final vectors of closed buckets.
	KindReconcile Kind = 2
	// KindState is the push-pull anti-entropy state (recent closed buckets).
	KindState Kind = 3
	// KindTouch tells a node of the sender's own region which buckets the
	// sender touched, so that it reconciles them too if the sender dies.
	KindTouch Kind = 4
	// KindRepair asks the receiver to send back the totals it holds of
	// the sender's region (and its replicas): the sender's store lost its
	// counts (a Redis restarted empty) or starts empty (a new node on the
	// in-memory store). It carries no entries.
	KindRepair Kind = 5
	// KindRepaired answers a KindRepair: the totals of the requester's
	// region that the sender holds, which that region once reported. It
	// is accepted only by a node that asked for a repair recently.
	KindRepaired Kind = 6
	// KindRejoin tells the receiver that the sender sees it alive again
	// (after a partition, say): the receiver re-sends its region's totals
	// of open buckets to the sender's region at once, as it does for a
	// member it sees come alive itself. It carries no entries.
	KindRejoin Kind = 7
	// KindUnheard tells the receiver which member regions the sender
	// does not hear (the burst guard's silent regions), so that a cut
	// link shows as one (see guard.View.Crossed). A node sends it with
	// each heartbeat while any region is silent to it. It carries no
	// entries: the regions are the frame's region table after the
	// sender's.
	KindUnheard Kind = 8
	// KindRelay carries the totals the sender holds of regions other
	// than its own and the receiver's, sent with its own open totals to
	// a region it hears again after a silence: that region may have been
	// cut off from a region the sender heard meanwhile (one split
	// following another), and until it hears that region again it would
	// charge it, silent, only its share, not what it admitted.
	KindRelay Kind = 9
	// KindDemand carries the hits the sender's burst guard and store
	// refused, per key and bucket (each entry's count, of the sender's
	// region, without a trail), sent with each flush to every alive
	// member, of the sender's region too: the guard's shares weigh each
	// region by what it admitted and what it was refused (see
	// guard.Demand).
	KindDemand Kind = 10
)

// String returns the kind's metric label.
func (k Kind) String() string {
	switch k {
	case KindFlush:
		return "flush"
	case KindReconcile:
		return "reconcile"
	case KindState:
		return "state"
	case KindTouch:
		return "touch"
	case KindRepair:
		return "repair"
	case KindRepaired:
		return "repaired"
	case KindRejoin:
		return "rejoin"
	case KindUnheard:
		return "unheard"
	case KindRelay:
		return "relay"
	case KindDemand:
		return "demand"
	}
	return "unknown"
}

// validWindow reports whether the bucket (w, b) may be carried: a window
// of 1 ms to window.MaxWindow, or a calendar bucket
// (window.ValidCalendarBucket).
func validWindow(w time.Duration, b int64) bool {
	return (w >= time.Millisecond && w.Milliseconds() <= maxWindowMs) || window.ValidCalendarBucket(w, b)
}

// Errors returned by Decode; the drop counter uses them as reasons.
var (
	ErrVersion   = errors.New("gossip: unknown wire version")
	ErrKind      = errors.New("gossip: unknown message kind")
	ErrOversized = errors.New("gossip: message too large")
	ErrMalformed = errors.New("gossip: malformed message")
)

// Message is one decoded frame.
type Message struct {
	Kind Kind
	// Sent is the sender's clock when it built the frame.
	Sent time.Time
	// From is the sender's region.
	From string
	// Node is the sender's node name.
	Node string
	// Token is the token the sender announced in its metadata: its
	// incarnation.
	Token uint64
	// To is the receiver's token the frame was sent to (0: a state frame).
	To uint64
	// Seq is the sender's sequence number for frames to To (0: a state
	// frame).
	Seq uint64
	// Totals are the entries; each Total.Region is one of the frame's regions.
	Totals []region.Total
	// Unheard is, in a KindUnheard frame, the regions the sender does not
	// hear: distinct, none the sender's own.
	Unheard []string
}

// Sender names the node that builds a frame.
type Sender struct {
	// Node is the node's name in the pool, 1 to 255 bytes.
	Node string
	// Region is the node's region: region 0 of every frame it sends.
	Region string
	// Token is the random token the node announces in its metadata.
	Token uint64
}

// Decode parses one frame. It returns ErrOversized, ErrVersion, ErrKind or
// ErrMalformed (wrapped) for a frame it cannot accept, and never panics.
func Decode(b []byte) (Message, error) {
	var m Message
	if len(b) > MaxMessage {
		return m, ErrOversized
	}
	if len(b) < 1 {
		return m, fmt.Errorf("empty frame: %w", ErrMalformed)
	}
	if b[0] != Version && b[0] != versionFixed {
		return m, ErrVersion
	}
	calendar := b[0] == Version
	if len(b) < headerFixed {
		return m, fmt.Errorf("short header: %w", ErrMalformed)
	}
	m.Kind = Kind(b[1])
	if m.Kind < KindFlush || m.Kind > KindDemand {
		return m, ErrKind
	}
	m.Sent = time.UnixMilli(int64(binary.BigEndian.Uint64(b[2:10])))
	m.Token = binary.BigEndian.Uint64(b[10:offTo])
	m.To = binary.BigEndian.Uint64(b[offTo:offSeq])
	m.Seq = binary.BigEndian.Uint64(b[offSeq:headerFixed])
	if m.Kind == KindState && (m.To != 0 || m.Seq != 0) {
		return m, fmt.Errorf("state frame addressed to a receiver: %w", ErrMalformed)
	}
	p := headerFixed
	nl := int(b[p-1])
	if nl == 0 || p+nl >= len(b) {
		return m, fmt.Errorf("bad sender name length %d: %w", nl, ErrMalformed)
	}
	m.Node = string(b[p : p+nl])
	if !utf8.ValidString(m.Node) {
		return m, fmt.Errorf("sender name not UTF-8: %w", ErrMalformed)
	}
	p += nl
	nr := int(b[p])
	p++
	if nr == 0 {
		return m, fmt.Errorf("no regions: %w", ErrMalformed)
	}
	regions := make([]string, nr)
	for i := range regions {
		if p >= len(b) {
			return m, fmt.Errorf("region table truncated: %w", ErrMalformed)
		}
		l := int(b[p])
		p++
		if l == 0 || l > MaxRegionLen || p+l > len(b) {
			return m, fmt.Errorf("bad region length %d: %w", l, ErrMalformed)
		}
		regions[i] = string(b[p : p+l])
		if !utf8.ValidString(regions[i]) {
			return m, fmt.Errorf("region %d not UTF-8: %w", i, ErrMalformed)
		}
		p += l
	}
	m.From = regions[0]
	if p+2 > len(b) {
		return m, fmt.Errorf("entry count truncated: %w", ErrMalformed)
	}
	n := int(binary.BigEndian.Uint16(b[p:]))
	p += 2
	if m.Kind == KindUnheard {
		for i, r := range regions {
			if slices.Contains(regions[:i], r) {
				return m, fmt.Errorf("region %q named twice: %w", r, ErrMalformed)
			}
		}
		if n != 0 || p != len(b) {
			return m, fmt.Errorf("unheard frame with entries: %w", ErrMalformed)
		}
		m.Unheard = regions[1:]
		return m, nil
	}
	// Every entry takes at least 5 bytes: bound the allocation by the input.
	if n > (len(b)-p)/5 {
		return m, fmt.Errorf("%d entries in %d bytes: %w", n, len(b)-p, ErrMalformed)
	}
	m.Totals = make([]region.Total, n)
	for i := range m.Totals {
		kl, k := binary.Uvarint(b[p:])
		if k <= 0 || kl == 0 || kl > MaxKeyLen || uint64(len(b)-p-k) < kl {
			return m, fmt.Errorf("entry %d: bad key length: %w", i, ErrMalformed)
		}
		p += k
		key := string(b[p : p+int(kl)])
		p += int(kl)
		wm, k := binary.Uvarint(b[p:])
		if k <= 0 || (wm == 0 && !calendar) || wm > uint64(maxWindowMs) {
			return m, fmt.Errorf("entry %d: bad window: %w", i, ErrMalformed)
		}
		p += k
		w := time.Duration(wm) * time.Millisecond
		if wm == 0 { // a calendar bucket: its length follows
			l, k := binary.Uvarint(b[p:])
			if k <= 0 || l > uint64(window.MaxCalendarBucket/time.Millisecond) {
				return m, fmt.Errorf("entry %d: bad calendar bucket: %w", i, ErrMalformed)
			}
			p += k
			w = -time.Duration(l) * time.Millisecond
		}
		bucket, k := binary.Varint(b[p:])
		if k <= 0 || (w < 0 && !window.ValidCalendarBucket(w, bucket)) {
			return m, fmt.Errorf("entry %d: bad bucket: %w", i, ErrMalformed)
		}
		p += k
		if p >= len(b) || int(b[p]) >= nr {
			return m, fmt.Errorf("entry %d: bad region index: %w", i, ErrMalformed)
		}
		reg := regions[b[p]]
		p++
		count, k := binary.Uvarint(b[p:])
		if k <= 0 || count > MaxCount {
			return m, fmt.Errorf("entry %d: bad count: %w", i, ErrMalformed)
		}
		p += k
		t := region.Total{Key: key, Window: w, Bucket: bucket, Region: reg, Count: count}
		k, err := decodeTrail(b[p:], &t)
		if err != nil {
			return m, fmt.Errorf("entry %d: %w", i, err)
		}
		p += k
		m.Totals[i] = t
	}
	if p != len(b) {
		return m, fmt.Errorf("%d trailing bytes: %w", len(b)-p, ErrMalformed)
	}
	return m, nil
}

// decodeTrail reads an entry's trail (see the wire format) into t and
// returns the bytes read: a coarse trail valid for t's window, counting at
// most t.Count hits, or ErrMalformed.
func decodeTrail(b []byte, t *region.Total) (int, error) {
	k, p := binary.Uvarint(b)
	if p <= 0 || k > window.Granules || (k > 0 && t.Window < 0) {
		return 0, fmt.Errorf("bad trail length: %w", ErrMalformed)
	}
	if k > 0 {
		t.Trail = make(window.Trail, k)
	}
	next, cum := int64(0), uint64(0)
	for i := range t.Trail {
		d, n1 := binary.Uvarint(b[p:])
		if n1 <= 0 || d > uint64(maxWindowMs) {
			return 0, fmt.Errorf("bad mark: %w", ErrMalformed)
		}
		p += n1
		n, n2 := binary.Uvarint(b[p:])
		if n2 <= 0 || n == 0 || n > MaxCount {
			return 0, fmt.Errorf("bad mark: %w", ErrMalformed)
		}
		p += n2
		cum += n
		t.Trail[i] = window.Mark{At: next + int64(d), Cum: cum}
		next = t.Trail[i].At + 1
	}
	if k > 0 && !region.ValidTrail(*t) {
		return 0, fmt.Errorf("trail not valid for the window or the count: %w", ErrMalformed)
	}
	return p, nil
}
