package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonCodec is Connect's JSON codec, except that responses show every
// scalar field, zero or not ("allowed": false, "remaining": "0"), in compact
// form, so that curl users see the whole decision.
type jsonCodec struct{ name string }

var _ connect.Codec = jsonCodec{}

// jsonCodecs replace Connect's default JSON codecs.
func jsonCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(jsonCodec{name: "json"}),
		connect.WithCodec(jsonCodec{name: "json; charset=utf-8"}),
	}
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
	if decodeFast(b, m) {
		return nil
	}
	// Unknown fields and unknown enum names are errors (invalid_argument),
	// unlike Connect's own codec, which drops them: a misspelled field or
	// algorithm name must not silently fall back to a default.
	return protojson.UnmarshalOptions{}.Unmarshal(b, pm)
}
