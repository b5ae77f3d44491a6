package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rlcluster/rlcluster/internal/api/decision"
)

// jsonCodec is Connect's JSON codec, except that responses show every
// scalar field, zero or not ("allowed": false, "remaining": "0"), in compact
// form, so that curl users see the whole decision, and that requests with
// more entries than lim allows are refused before they are decoded (see
// countLimits). The zero lim counts nothing.
type jsonCodec struct {
	name string
	lim  *countLimits
}

var _ connect.Codec = jsonCodec{}

// protoCodec is Connect's protobuf codec, except that it decodes at most
// one more entry of a request's repeated fields than lim allows (see
// countLimits).
type protoCodec struct{ lim *countLimits }

var _ connect.Codec = protoCodec{}

// compressMinBytes is the smallest response the Connect handlers compress
// for a client that accepts it (connect-go's clients accept gzip by
// default, and net/http's add Accept-Encoding: gzip). Connect compresses
// every response otherwise: on a Check's hundred-odd bytes gzip makes the
// message larger, and resetting a gzip writer costs more CPU than the
// rest of the call (docs/performance.md, "Compression").
const compressMinBytes = 4 << 10

// codecs replace Connect's default codecs with ones bound by lim.
func codecs(lim *countLimits) []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(protoCodec{lim: lim}),
		connect.WithCodec(jsonCodec{name: "json", lim: lim}),
		connect.WithCodec(jsonCodec{name: "json; charset=utf-8", lim: lim}),
	}
}

func (protoCodec) Name() string { return "proto" }

func (protoCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a proto.Message", m)
	}
	return proto.Marshal(pm)
}

func (protoCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a proto.Message", m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

func (c protoCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal into %T: not a proto.Message", m)
	}
	if c.lim == nil {
		return proto.Unmarshal(b, pm)
	}
	return c.lim.unmarshalProto(b, pm)
}

func (c jsonCodec) Name() string { return c.name }

func (c jsonCodec) Marshal(m any) ([]byte, error) {
	return c.MarshalAppend(nil, m)
}

// MarshalAppend appends m's JSON to dst, which Connect takes from its
// buffer pool. The responses of Check, CheckBatch and Peek are encoded by
// hand (see appendFast); other messages by protojson.
func (c jsonCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	if out, ok := appendFast(dst, m); ok {
		return out, nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a proto.Message", m)
	}
	b, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(pm)
	if err != nil {
		return nil, err
	}
	out := bytes.NewBuffer(dst)
	if err := json.Compact(out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func (c jsonCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal into %T: not a proto.Message", m)
	}
	if len(b) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	if c.lim != nil {
		if err := c.lim.checkJSON(b, m); err != nil {
			return errors.New(decision.Message(err))
		}
	}
	if decodeFast(b, m) {
		return nil
	}
	// Unknown fields and unknown enum names are errors (invalid_argument),
	// unlike Connect's own codec, which drops them: a misspelled field or
	// algorithm name must not silently fall back to a default.
	return protojson.UnmarshalOptions{}.Unmarshal(b, pm)
}
