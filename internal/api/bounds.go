package api

import (
	"errors"
	"fmt"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/envoyrls"
	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// A request's size bounds the bytes a node reads, not what decoding them
// makes: an empty entry is two bytes of protobuf and three of JSON, and a
// decoded one about a hundred bytes, so 1 MiB of empty checks decoded to
// more than 50 MB before the batch's length was checked. The repeated
// fields of the requests (a CheckBatch's checks, an Envoy request's
// descriptors and each descriptor's entries) are therefore counted before
// they are decoded, and decoding keeps at most one more of each than the
// bound: the handler then refuses the request as too long, whatever the
// encoding, having decoded a bounded amount.
//
// Each endpoint also reads at most what its largest valid request takes
// (see readLimits).

// countLimits are the most entries of each repeated field a request may
// carry.
type countLimits struct {
	batch   int // checks of a CheckBatch; descriptors of an Envoy request
	entries int // entries of one Envoy descriptor
}

// Field numbers of the repeated fields counted.
const (
	fieldChecks      protowire.Number = 1 // ratelimit.v1.CheckBatchRequest.checks
	fieldDescriptors protowire.Number = 2 // envoy RateLimitRequest.descriptors
	fieldEntries     protowire.Number = 1 // envoy RateLimitDescriptor.entries
)

// field returns the repeated field of m that l counts (0 when m has none)
// and whether its elements have entries of their own to count.
func (l countLimits) field(m any) (protowire.Number, bool) {
	switch m.(type) {
	case *ratelimitv1.CheckBatchRequest:
		return fieldChecks, false
	case *rlsv3.RateLimitRequest:
		return fieldDescriptors, true
	}
	return 0, false
}

// unmarshalProto decodes the protobuf b into m, keeping at most one more
// check, descriptor or descriptor entry than l allows (see above).
func (l countLimits) unmarshalProto(b []byte, m proto.Message) error {
	if num, sub := l.field(m); num != 0 && l.overProto(b, num, sub) {
		proto.Reset(m)
		return l.unmarshalTruncated(b, num, sub, m)
	}
	return proto.Unmarshal(b, m)
}

// overProto reports whether the message b has more than l.batch fields
// num, or (sub) an element with more than l.entries entries, without
// decoding it. A malformed message is left to proto.Unmarshal to refuse.
func (l countLimits) overProto(b []byte, num protowire.Number, sub bool) bool {
	n := 0
	for len(b) > 0 {
		f, typ, tl := protowire.ConsumeTag(b)
		if tl < 0 {
			return false
		}
		vl := protowire.ConsumeFieldValue(f, typ, b[tl:])
		if vl < 0 {
			return false
		}
		if f == num && typ == protowire.BytesType {
			if n++; n > l.batch {
				return true
			}
			if sub {
				v, _ := protowire.ConsumeBytes(b[tl:])
				if countField(v, fieldEntries, l.entries+1) > l.entries {
					return true
				}
			}
		}
		b = b[tl+vl:]
	}
	return false
}

// countField counts the fields num of the message b, up to stop.
func countField(b []byte, num protowire.Number, stop int) int {
	n := 0
	for len(b) > 0 && n < stop {
		f, typ, tl := protowire.ConsumeTag(b)
		if tl < 0 {
			return n
		}
		vl := protowire.ConsumeFieldValue(f, typ, b[tl:])
		if vl < 0 {
			return n
		}
		if f == num {
			n++
		}
		b = b[tl+vl:]
	}
	return n
}

// unmarshalTruncated decodes the message b into m field by field (the
// wire format merges repeated fields and sub-messages, so decoding each
// field in turn decodes the whole), skipping the fields num past the
// l.batch+1st and, when sub, the entries of each past the l.entries+1st.
// It is called only for messages over a bound, and copies nothing.
func (l countLimits) unmarshalTruncated(b []byte, num protowire.Number, sub bool, m proto.Message) error {
	merge := proto.UnmarshalOptions{Merge: true}
	n := 0
	for len(b) > 0 {
		f, typ, tl := protowire.ConsumeTag(b)
		if tl < 0 {
			return merge.Unmarshal(b, m) // malformed: proto says how
		}
		vl := protowire.ConsumeFieldValue(f, typ, b[tl:])
		if vl < 0 {
			return merge.Unmarshal(b, m)
		}
		whole := b[:tl+vl]
		b = b[tl+vl:]
		if f != num || typ != protowire.BytesType {
			if err := merge.Unmarshal(whole, m); err != nil {
				return err
			}
			continue
		}
		if n++; n > l.batch+1 {
			continue
		}
		v, _ := protowire.ConsumeBytes(whole[tl:])
		if !sub || countField(v, fieldEntries, l.entries+2) <= l.entries+1 {
			if err := merge.Unmarshal(whole, m); err != nil {
				return err
			}
			continue
		}
		if err := l.unmarshalDescriptor(v, m); err != nil {
			return err
		}
	}
	return nil
}

// unmarshalDescriptor decodes the Envoy descriptor b, with only its first
// l.entries+1 entries, and appends it to the request m.
func (l countLimits) unmarshalDescriptor(b []byte, m proto.Message) error {
	req, ok := m.(*rlsv3.RateLimitRequest)
	if !ok {
		return fmt.Errorf("unmarshal %T: not an Envoy request", m)
	}
	d := new(commonv3.RateLimitDescriptor)
	merge := proto.UnmarshalOptions{Merge: true}
	n := 0
	for len(b) > 0 {
		f, typ, tl := protowire.ConsumeTag(b)
		if tl < 0 {
			return merge.Unmarshal(b, d)
		}
		vl := protowire.ConsumeFieldValue(f, typ, b[tl:])
		if vl < 0 {
			return merge.Unmarshal(b, d)
		}
		if f != fieldEntries {
			if err := merge.Unmarshal(b[:tl+vl], d); err != nil {
				return err
			}
		} else if n++; n <= l.entries+1 {
			if err := merge.Unmarshal(b[:tl+vl], d); err != nil {
				return err
			}
		}
		b = b[tl+vl:]
	}
	req.Descriptors = append(req.Descriptors, d)
	return nil
}

// maxJSONDepth bounds the nesting of a JSON request; the messages' own
// is at most five.
const maxJSONDepth = 32

var errJSONDepth = errors.New("more than 32 nested objects and arrays")

// checkJSON refuses the JSON body b of m when it carries more entries
// than l allows, counting without decoding: every array that is a member
// of the top-level object counts toward l.batch (only the counted field is
// an array there in a valid request, so no name, escaped or not, gets
// around it), and every array that is a member of one of their elements
// counts toward l.entries.
func (l countLimits) checkJSON(b []byte, m any) error {
	num, sub := l.field(m)
	if num == 0 {
		return nil
	}
	type frame struct {
		array    bool
		kind     uint8 // 1: a top-level array; 2: an array in one of its elements
		elems    int
		nonEmpty bool
	}
	var stack [maxJSONDepth]frame
	depth := 0
	batch := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch c {
		case ' ', '\t', '\n', '\r', ':':
			continue
		}
		top := &stack[max(depth-1, 0)]
		if depth > 0 && top.array && c != ']' && c != ',' && !top.nonEmpty {
			// The first byte of an array's first element.
			top.nonEmpty = true
			if err := l.countElem(top.kind, &top.elems, &batch, m); err != nil {
				return err
			}
		}
		switch c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case ',':
			if depth > 0 && top.array {
				if err := l.countElem(top.kind, &top.elems, &batch, m); err != nil {
					return err
				}
			}
		case '{', '[':
			if depth == maxJSONDepth {
				return fmt.Errorf("%w", errJSONDepth)
			}
			f := frame{array: c == '['}
			if f.array {
				switch {
				case depth == 1:
					f.kind = 1
				case sub && depth == 3 && stack[1].kind == 1:
					f.kind = 2
				}
			}
			stack[depth] = f
			depth++
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}

// countElem counts one element of an array of kind (see checkJSON) and
// refuses the one over its bound.
func (l countLimits) countElem(kind uint8, elems, batch *int, m any) error {
	*elems++
	switch kind {
	case 1:
		if *batch++; *batch > l.batch {
			return l.tooMany(m, -1)
		}
	case 2:
		if *elems > l.entries {
			return l.tooMany(m, *batch-1)
		}
	}
	return nil
}

// tooMany is the refusal of a request m with more checks or descriptors
// than allowed, or, for desc >= 0, of an Envoy descriptor desc with more
// entries than allowed; the handlers give the same.
func (l countLimits) tooMany(m any, desc int) error {
	if _, ok := m.(*ratelimitv1.CheckBatchRequest); ok {
		return tooManyChecks(l.batch)
	}
	if desc >= 0 {
		return envoyrls.TooManyEntries(desc, l.entries)
	}
	return envoyrls.TooManyDescriptors(l.batch)
}

// tooManyChecks is the refusal of a CheckBatch of more than max checks.
func tooManyChecks(max int) error {
	return decision.Invalid("checks: more than the maximum of %d checks", max)
}

// readLimits are the most bytes each endpoint reads of a request.
type readLimits struct {
	check int // Check and Peek: one key, one rule name, one limit
	batch int // CheckBatch and Envoy's ShouldRateLimit
	small int // health checking and server reflection
}

// smallReadBytes bounds the requests of gRPC health checking and server
// reflection, which name a service, a file or a symbol.
const smallReadBytes = 16 << 10

// newReadLimits returns the read limits of cfg: a Check is at most its
// key and rule name, each byte escaped in JSON (six bytes: \u0000), and a
// few kilobytes of fields and spaces; the rest is bounded by
// MaxRequestBytes.
func newReadLimits(cfg Config) readLimits {
	check := 6*(cfg.MaxKeyBytes+rules.MaxNameBytes) + 4096
	return readLimits{
		check: min(check, cfg.MaxRequestBytes),
		batch: cfg.MaxRequestBytes,
		small: min(smallReadBytes, cfg.MaxRequestBytes),
	}
}

// UnmarshalRequest decodes the protobuf b into the request m as the
// server's own codecs do, for other transports (a grpc-go server): at most
// one check, descriptor or descriptor entry more than a request may carry
// is decoded, so that the handler refuses it having decoded a bounded
// amount.
func (s *Server) UnmarshalRequest(b []byte, m proto.Message) error {
	return s.lim.unmarshalProto(b, m)
}
