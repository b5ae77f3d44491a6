package api

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

var decodeSeeds = []struct {
	name string
	in   string
	fast bool // whether the fast path should take it
}{
	{"inline", `{"key":"alice","limit":{"limit":100,"window":"60s"}}`, true},
	{"quoted numbers", `{"key":"alice","hits":"2","limit":{"limit":"100","window":"1.5s","algorithm":"ALGORITHM_FIXED_WINDOW"}}`, true},
	{"rule", ` { "key" : "bob" , "rule" : "login" , "hits" : 3 } `, true},
	{"empty", `{}`, true},
	{"nanos", `{"key":"k","limit":{"limit":1,"window":"0.000000001s"}}`, true},
	{"empty limit", `{"key":"k","limit":{}}`, true},
	{"escape", `{"key":"a\"b","limit":{"limit":1,"window":"1s"}}`, false},
	{"unicode", `{"key":"héllo"}`, false},
	{"unknown field", `{"key":"k","extra":1}`, false},
	{"proto name", `{"key":"k","limit":{"limit":1,"window":"1s","algorithm":2}}`, false},
	{"repeated", `{"key":"a","key":"b"}`, false},
	{"null", `{"key":null}`, false},
	{"exponent", `{"hits":1e2}`, false},
	{"fraction", `{"hits":1.0}`, false},
	{"negative", `{"hits":-1}`, false},
	{"leading zero", `{"hits":01}`, false},
	{"overflow", `{"hits":18446744073709551616}`, false},
	{"max", `{"hits":18446744073709551615}`, true},
	{"bad window", `{"limit":{"window":"60"}}`, false},
	{"minutes", `{"limit":{"window":"1m"}}`, false},
	{"trailing", `{"key":"k"}x`, false},
	{"trailing comma", `{"key":"k",}`, false},
	{"unknown algorithm", `{"limit":{"algorithm":"NOPE"}}`, false},
	{"not an object", `[]`, false},
	{"huge window", `{"limit":{"window":"315576000000s"}}`, false},
	{"scope", `{"key":"k","limit":{"limit":1,"window":"1s","scope":"SCOPE_REGION"}}`, true},
	{"scope and algorithm", `{"limit":{"scope":"SCOPE_GLOBAL","algorithm":"ALGORITHM_TOKEN_BUCKET"}}`, true},
	{"scope number", `{"limit":{"scope":2}}`, false},
	{"unknown scope", `{"limit":{"scope":"SCOPE_PLANET"}}`, false},
	{"repeated scope", `{"limit":{"scope":"SCOPE_REGION","scope":"SCOPE_GLOBAL"}}`, false},
	{"omit stats", `{"key":"k","omitStats":true,"limit":{"limit":1,"window":"1s"}}`, true},
	{"omit stats, proto name", `{"key":"k","omit_stats":false}`, true},
	{"omit stats twice", `{"omitStats":true,"omit_stats":true}`, false},
	{"omit stats quoted", `{"omitStats":"true"}`, false},
	{"omit stats number", `{"omitStats":1}`, false},
}

// TestFastJSONDecode checks the seeds: the fast path takes the plain ones
// and gives what protojson gives.
func TestFastJSONDecode(t *testing.T) {
	for _, tt := range decodeSeeds {
		t.Run(tt.name, func(t *testing.T) {
			got := &ratelimitv1.CheckRequest{}
			if ok := decodeFast([]byte(tt.in), got); ok != tt.fast {
				t.Fatalf("decodeFast(%s) = %v, want %v", tt.in, ok, tt.fast)
			}
			if !tt.fast {
				return
			}
			want := &ratelimitv1.CheckRequest{}
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(tt.in), want); err != nil {
				t.Fatalf("protojson rejects %s (%v), the fast path took it", tt.in, err)
			}
			if !proto.Equal(got, want) {
				t.Errorf("decodeFast(%s) = %v, want %v", tt.in, got, want)
			}
		})
	}
	batch := &ratelimitv1.CheckBatchRequest{}
	in := `{"checks":[{"key":"a","limit":{"limit":1,"window":"1s"}},{"key":"b","rule":"r"}]}`
	if !decodeFast([]byte(in), batch) {
		t.Fatalf("decodeFast(%s) = false, want true", in)
	}
	want := &ratelimitv1.CheckBatchRequest{}
	if err := protojson.Unmarshal([]byte(in), want); err != nil || !proto.Equal(batch, want) {
		t.Errorf("decodeFast(batch) = %v, want %v (%v)", batch, want, err)
	}
}

// FuzzFastJSONDecode: whatever the fast path accepts, protojson accepts
// and decodes to the same message.
func FuzzFastJSONDecode(f *testing.F) {
	for _, tt := range decodeSeeds {
		f.Add([]byte(tt.in))
		f.Add([]byte(`{"checks":[` + tt.in + `]}`))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, mk := range []func() proto.Message{
			func() proto.Message { return &ratelimitv1.CheckRequest{} },
			func() proto.Message { return &ratelimitv1.PeekRequest{} },
			func() proto.Message { return &ratelimitv1.CheckBatchRequest{} },
		} {
			got := mk()
			if !decodeFast(b, got) {
				continue
			}
			want := mk()
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, want); err != nil {
				t.Fatalf("fast path took %q into %v; protojson rejects it: %v", b, got, err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("fast path decoded %q as %v; protojson as %v", b, got, want)
			}
		}
	})
}
