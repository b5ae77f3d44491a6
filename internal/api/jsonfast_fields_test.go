package api

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

// fill sets every field of m, recursively, to a value that is not its
// default, as the descriptor lists them, so that a field added to the
// .proto is set too. In a oneof it sets the choice-th member (modulo the
// oneof's size); a repeated field gets 3 elements, filled with choices
// 0, 1 and 2, so that lists carry every member of their elements' oneofs.
func fill(t *testing.T, m protoreflect.Message, choice int) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if od.Fields().Get(choice%od.Fields().Len()) != fd {
				continue
			}
		}
		switch {
		case fd.IsMap():
			t.Fatalf("%s: map fields are not supported by this test; extend it", fd.FullName())
		case fd.IsList():
			l := m.Mutable(fd).List()
			for c := range 3 {
				if fd.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					fill(t, e.Message(), c)
					l.Append(e)
				} else {
					l.Append(scalar(t, fd))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			fill(t, m.Mutable(fd).Message(), choice)
		default:
			m.Set(fd, scalar(t, fd))
		}
	}
}

// scalar returns a value for fd that is not its default and that the fast
// decoder's plain shape covers (ASCII strings without escapes).
func scalar(t *testing.T, fd protoreflect.FieldDescriptor) protoreflect.Value {
	t.Helper()
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(7)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(0.25)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(0.25)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("s-" + string(fd.Name()))
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len() - 1).Number())
	}
	t.Fatalf("%s: kind %v is not supported by this test; extend it", fd.FullName(), fd.Kind())
	return protoreflect.Value{}
}

// TestFastJSONCoversEveryField: every field of the messages the codec
// encodes or decodes by hand, as their descriptors list them, makes the
// trip. A field added to the .proto fails here until the hand-written
// encoder writes it (or the decoder reads it) exactly as protojson does.
func TestFastJSONCoversEveryField(t *testing.T) {
	for _, m := range []proto.Message{&ratelimitv1.CheckResponse{}, &ratelimitv1.PeekResponse{}, &ratelimitv1.CheckBatchResponse{}} {
		for choice := range 2 {
			m := proto.Clone(m)
			fill(t, m.ProtoReflect(), choice)
			want, err := protojsonCompact(t, m)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := appendFast(nil, m)
			if !ok || !bytes.Equal(got, want) {
				t.Errorf("%T with every field set: appendFast =\n %s (ok %v), want\n %s", m, got, ok, want)
			}
		}
	}
	for _, m := range []proto.Message{&ratelimitv1.CheckRequest{}, &ratelimitv1.PeekRequest{}, &ratelimitv1.CheckBatchRequest{}} {
		fill(t, m.ProtoReflect(), 0)
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := m.ProtoReflect().Type().New().Interface()
		if !decodeFast(b, got) {
			t.Errorf("%T with every field set: decodeFast(%s) fell back to protojson; teach it the new field", m, b)
			continue
		}
		if !proto.Equal(got, m) {
			t.Errorf("decodeFast(%s) = %v, want %v", b, got, m)
		}
	}
}
