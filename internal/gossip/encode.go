package gossip

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// entrySize returns the encoded size of t's entry, excluding the region
// table.
func entrySize(t region.Total) int {
	var b [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(b[:], uint64(len(t.Key))) + len(t.Key)
	if t.Window < 0 {
		n += 1 + binary.PutUvarint(b[:], uint64(-t.Window.Milliseconds()))
	} else {
		n += binary.PutUvarint(b[:], uint64(t.Window.Milliseconds()))
	}
	n += binary.PutVarint(b[:], t.Bucket)
	n++
	n += binary.PutUvarint(b[:], t.Count)
	n += binary.PutUvarint(b[:], uint64(len(t.Trail)))
	next := int64(0)
	for i, m := range t.Trail {
		n += binary.PutUvarint(b[:], uint64(m.At-next)) + binary.PutUvarint(b[:], t.Trail.N(i))
		next = m.At + 1
	}
	return n
}

// wireTrail returns t's trail as sent: coarse when fine is set, else
// gathered into merge spans, and none when it is not valid for t
// (region.ValidTrail), so that a receiver never sees a malformed entry.
func wireTrail(t region.Total, fine bool) window.Trail {
	if t.Window < 0 {
		return nil // a calendar bucket: a fixed window's count
	}
	if fine {
		t.Trail = t.Trail.Coarse(t.Window.Milliseconds())
	} else {
		t.Trail = t.Trail.Spans(t.Window.Milliseconds())
	}
	if !region.ValidTrail(t) {
		return nil
	}
	return t.Trail
}

// encoder packs totals into frames of at most budget bytes each.
type encoder struct {
	kind    Kind
	fine    bool // trails coarse, not gathered into spans (see wireTrail)
	sent    int64
	from    Sender
	regions []string       // region table, sender first
	index   map[string]int // region -> index
	head    int            // size of header incl. table and count
}

func newEncoder(kind Kind, sent time.Time, from Sender, totals []region.Total) (*encoder, error) {
	if len(from.Node) == 0 || len(from.Node) > maxNodeName {
		return nil, fmt.Errorf("encode sender %q: %w", from.Node, ErrMalformed)
	}
	e := &encoder{kind: kind, sent: sent.UnixMilli(), from: from, index: map[string]int{}}
	add := func(r string) error {
		if _, ok := e.index[r]; ok {
			return nil
		}
		if len(r) == 0 || len(r) > MaxRegionLen {
			return fmt.Errorf("encode region %q: %w", r, ErrMalformed)
		}
		if len(e.regions) == MaxRegions {
			return fmt.Errorf("encode: more than %d regions: %w", MaxRegions, ErrMalformed)
		}
		e.index[r] = len(e.regions)
		e.regions = append(e.regions, r)
		return nil
	}
	if err := add(from.Region); err != nil {
		return nil, err
	}
	for _, t := range totals {
		if err := add(t.Region); err != nil {
			return nil, err
		}
	}
	e.head = headerFixed + len(from.Node) + 1 + 2
	for _, r := range e.regions {
		e.head += 1 + len(r)
	}
	return e, nil
}

// encode packs totals into frames no larger than budget, except that a
// single entry too large for budget gets a frame of its own. Totals with an
// invalid key or window are skipped and counted in skipped.
func (e *encoder) encode(totals []region.Total, budget int) (frames [][]byte, skipped int) {
	if budget > MaxMessage {
		budget = MaxMessage
	}
	var cur []byte
	n := 0
	finish := func() {
		if cur != nil {
			binary.BigEndian.PutUint16(cur[e.head-2:], uint16(n))
			frames = append(frames, cur)
			cur, n = nil, 0
		}
	}
	for _, t := range totals {
		wm := t.Window.Milliseconds()
		if len(t.Key) == 0 || len(t.Key) > MaxKeyLen || !validWindow(t.Window, t.Bucket) || t.Count > MaxCount {
			skipped++
			continue
		}
		t.Trail = wireTrail(t, e.fine)
		size := entrySize(t)
		if cur != nil && (len(cur)+size > budget || n == maxEntries) {
			finish()
		}
		if cur == nil {
			cur = e.header(budget)
		}
		cur = binary.AppendUvarint(cur, uint64(len(t.Key)))
		cur = append(cur, t.Key...)
		if wm < 0 {
			cur[0] = Version // the frame carries a calendar bucket
			cur = append(cur, 0)
			wm = -wm
		}
		cur = binary.AppendUvarint(cur, uint64(wm))
		cur = binary.AppendVarint(cur, t.Bucket)
		cur = append(cur, byte(e.index[t.Region]))
		cur = binary.AppendUvarint(cur, t.Count)
		cur = binary.AppendUvarint(cur, uint64(len(t.Trail)))
		next := int64(0)
		for i, m := range t.Trail {
			cur = binary.AppendUvarint(cur, uint64(m.At-next))
			cur = binary.AppendUvarint(cur, t.Trail.N(i))
			next = m.At + 1
		}
		n++
	}
	finish()
	return frames, skipped
}

func (e *encoder) header(budget int) []byte {
	b := make([]byte, 0, min(budget, 64<<10))
	b = append(b, versionFixed, byte(e.kind))
	b = binary.BigEndian.AppendUint64(b, uint64(e.sent))
	b = binary.BigEndian.AppendUint64(b, e.from.Token)
	b = append(b, make([]byte, 16)...) // to and seq: see stamp
	b = append(b, byte(len(e.from.Node)))
	b = append(b, e.from.Node...)
	b = append(b, byte(len(e.regions)))
	for _, r := range e.regions {
		b = append(b, byte(len(r)))
		b = append(b, r...)
	}
	return append(b, 0, 0) // entry count, filled in by finish
}

// Encode packs totals into frames of at most budget bytes (a single entry
// larger than budget gets a frame of its own), with to and seq 0: a
// state frame as it is, any other stamped for its receiver (stamp) as it
// is sent. from is the sending node;
// totals with an empty or too long key or an out-of-range window are left
// out, and so are counts above MaxCount.
//
// Trails are gathered into merge spans (window.Trail.Spans, at most
// window.MergeGranules marks), as every node of version 5 or later reads
// them; EncodeFine keeps them coarse.
func Encode(kind Kind, sent time.Time, from Sender, totals []region.Total, budget int) ([][]byte, error) {
	return encodeFrames(kind, sent, from, totals, budget, false)
}

// EncodeFine is Encode with trails coarse (window.Trail.Coarse, at most
// window.Granules marks), for a receiver that announces flagFineTrails: a
// node without it drops such a frame as malformed.
func EncodeFine(kind Kind, sent time.Time, from Sender, totals []region.Total, budget int) ([][]byte, error) {
	return encodeFrames(kind, sent, from, totals, budget, true)
}

func encodeFrames(kind Kind, sent time.Time, from Sender, totals []region.Total, budget int, fine bool) ([][]byte, error) {
	e, err := newEncoder(kind, sent, from, totals)
	if err != nil {
		return nil, err
	}
	e.fine = fine
	frames, _ := e.encode(totals, budget)
	return frames, nil
}

// EncodeEmpty returns a frame of kind with no entries (a KindRepair
// request).
func EncodeEmpty(kind Kind, sent time.Time, from Sender) ([]byte, error) {
	e, err := newEncoder(kind, sent, from, nil)
	if err != nil {
		return nil, err
	}
	return e.header(e.head), nil
}

// EncodeUnheard returns a KindUnheard frame: the member regions that
// from does not hear.
func EncodeUnheard(sent time.Time, from Sender, unheard []string) ([]byte, error) {
	e, err := newEncoder(KindUnheard, sent, from, nil)
	if err != nil {
		return nil, err
	}
	for _, r := range unheard {
		if r == from.Region || slices.Contains(e.regions, r) {
			continue
		}
		if len(r) == 0 || len(r) > MaxRegionLen || len(e.regions) == MaxRegions {
			return nil, fmt.Errorf("encode unheard region %q: %w", r, ErrMalformed)
		}
		e.index[r] = len(e.regions)
		e.regions = append(e.regions, r)
		e.head += 1 + len(r)
	}
	return e.header(e.head), nil
}

// stamp returns a copy of frame addressed to the incarnation to, with
// sequence number seq.
func stamp(frame []byte, to, seq uint64) []byte {
	out := append([]byte(nil), frame...)
	if len(out) >= headerFixed {
		binary.BigEndian.PutUint64(out[offTo:], to)
		binary.BigEndian.PutUint64(out[offSeq:], seq)
	}
	return out
}
