package api

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

// protojsonCompact is what the codec promises to produce: protojson with
// EmitDefaultValues, compacted.
func protojsonCompact(t *testing.T, m proto.Message) ([]byte, error) {
	t.Helper()
	b, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("compact protojson output %s: %v", b, err)
	}
	return out.Bytes(), nil
}

var awkwardStrings = []string{
	"", "us-east", "a\"b", `back\slash`, "tab\there", "nl\n", "\x00\x01\x1f\x7f", "\b\f\r",
	"héllo", "日本", "\u2028\u2029", "\uFFFD", "bad\xffutf8", "\xc3", "<>&",
}

func randDuration(rng *rand.Rand) *durationpb.Duration {
	switch rng.IntN(10) {
	case 0:
		return nil
	case 1:
		return durationpb.New(time.Duration(math.MaxInt64)) // window.Never
	case 2:
		return &durationpb.Duration{Seconds: -rng.Int64N(100), Nanos: -rng.Int32N(1e9)}
	case 3:
		return &durationpb.Duration{Seconds: 400_000_000_000} // out of range
	case 4:
		return &durationpb.Duration{Seconds: rng.Int64N(1000), Nanos: rng.Int32N(1000) * 1e6}
	case 5:
		return &durationpb.Duration{Seconds: rng.Int64N(1000), Nanos: rng.Int32N(1000) * 1e3}
	case 6:
		return &durationpb.Duration{Nanos: 1e9 + 5} // invalid nanos
	}
	return durationpb.New(time.Duration(rng.Int64N(int64(200 * time.Hour))))
}

func randFloat(rng *rand.Rand) float64 {
	switch rng.IntN(8) {
	case 0:
		return 0
	case 1:
		return math.NaN()
	case 2:
		return math.Inf(1 - 2*rng.IntN(2))
	case 3:
		return 1e-7 * rng.Float64()
	case 4:
		return 1e22 * rng.Float64()
	case 5:
		return 1
	}
	return rng.Float64()
}

func randUint(rng *rand.Rand) uint64 {
	switch rng.IntN(4) {
	case 0:
		return 0
	case 1:
		return math.MaxUint64
	}
	return rng.Uint64() >> uint(rng.IntN(64))
}

func randResponse(rng *rand.Rand) *ratelimitv1.CheckResponse {
	r := &ratelimitv1.CheckResponse{
		Allowed: rng.IntN(2) == 0, Limit: randUint(rng), Remaining: randUint(rng),
		ResetAfter: randDuration(rng), RetryAfter: randDuration(rng),
		Shadow: rng.IntN(2) == 0,
		// 3 is no Scope: protojson writes its number, the fast path
		// declines.
		Scope: ratelimitv1.Scope(rng.IntN(4)),
	}
	if rng.IntN(6) == 0 {
		return r
	}
	r.Stats = &ratelimitv1.WindowStats{
		Bucket: int64(randUint(rng)), Current: randUint(rng), Previous: randUint(rng),
		PreviousWeight: randFloat(rng), Estimate: randUint(rng),
	}
	for i := rng.IntN(4); i > 0; i-- {
		r.Stats.Regions = append(r.Stats.Regions, &ratelimitv1.RegionCount{
			Region:  awkwardStrings[rng.IntN(len(awkwardStrings))],
			Current: randUint(rng), Previous: randUint(rng), Age: randDuration(rng),
		})
	}
	return r
}

func randMessage(rng *rand.Rand) proto.Message {
	switch rng.IntN(3) {
	case 0:
		return randResponse(rng)
	case 1:
		p := &ratelimitv1.PeekResponse{}
		if rng.IntN(4) > 0 {
			p.Response = randResponse(rng)
		}
		return p
	}
	b := &ratelimitv1.CheckBatchResponse{}
	for i := rng.IntN(4); i > 0; i-- {
		switch rng.IntN(4) {
		case 0:
			b.Results = append(b.Results, &ratelimitv1.CheckResult{})
		case 1:
			b.Results = append(b.Results, &ratelimitv1.CheckResult{Result: &ratelimitv1.CheckResult_Error{Error: &ratelimitv1.Error{
				Code: awkwardStrings[rng.IntN(len(awkwardStrings))], Message: awkwardStrings[rng.IntN(len(awkwardStrings))],
			}}})
		default:
			b.Results = append(b.Results, &ratelimitv1.CheckResult{Result: &ratelimitv1.CheckResult_Response{Response: randResponse(rng)}})
		}
	}
	return b
}

// TestFastJSONMatchesProtojson holds the hand-written encoder to protojson's
// output, byte for byte, on random messages full of edge cases; where
// protojson fails, the codec must fail the same way.
func TestFastJSONMatchesProtojson(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := jsonCodec{name: "json"}
	fast := 0
	for i := 0; i < 20000; i++ {
		m := randMessage(rng)
		want, wantErr := protojsonCompact(t, m)
		prefix := []byte("prefix")
		got, err := c.MarshalAppend(prefix, m)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("message %d %v: error %v, want %v", i, m, err, wantErr)
		}
		if err != nil {
			continue
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("message %d:\n got  %s\n want prefix%s", i, got, want)
		}
		if _, ok := appendFast(nil, m); ok {
			fast++
		}
	}
	t.Logf("%d of 20000 random messages took the fast path", fast)
	if fast < 1000 {
		t.Errorf("only %d messages took the fast path; the test checks little", fast)
	}
	// The codec's typical answer takes the fast path.
	typical := &ratelimitv1.CheckResponse{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: durationpb.New(20284 * time.Millisecond), RetryAfter: durationpb.New(0),
		Stats: &ratelimitv1.WindowStats{Bucket: 29922113, Current: 1, PreviousWeight: 0.33805, Regions: []*ratelimitv1.RegionCount{{Region: "local", Current: 1}}},
		Scope: ratelimitv1.Scope_SCOPE_GLOBAL}
	got, ok := appendFast(nil, typical)
	if want := `{"allowed":true,"limit":"100","remaining":"99","resetAfter":"20.284s","retryAfter":"0s","stats":{"bucket":"29922113","current":"1","previous":"0","previousWeight":0.33805,"estimate":"0","regions":[{"region":"local","current":"1","previous":"0","previousMarks":[]}],"elapsedMs":"0","whole":"0","terms":[]},"shadow":false,"scope":"SCOPE_GLOBAL"}`; !ok || string(got) != want {
		t.Errorf("appendFast(typical) = %s, %v; want %s, true", got, ok, want)
	}
}

func BenchmarkJSONMarshalCheckResponse(b *testing.B) {
	m := &ratelimitv1.CheckResponse{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: durationpb.New(20284 * time.Millisecond), RetryAfter: durationpb.New(0),
		Stats: &ratelimitv1.WindowStats{Bucket: 29922113, Current: 1, PreviousWeight: 0.33805, Regions: []*ratelimitv1.RegionCount{{Region: "local", Current: 1}}}}
	c := jsonCodec{name: "json"}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			var err error
			if buf, err = c.MarshalAppend(buf[:0], m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pb, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			var out bytes.Buffer
			if err := json.Compact(&out, pb); err != nil {
				b.Fatal(err)
			}
		}
	})
}
