package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"

	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestFastPathMatchesConnect sends the same calls to two servers in the
// same state, one through serveFast and one through Connect, and wants the
// same status, content type and body, byte for byte.
func TestFastPathMatchesConnect(t *testing.T) {
	now := time.UnixMilli(29_000_000*60_000 + 30_000)
	rs, err := rules.New([]rules.Rule{{Name: "login", Limit: window.Limit{Limit: 2, Window: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	newSrv := func() *Server {
		s, err := NewHandler(Config{Store: region.NewMemory(region.MemoryConfig{}), Rules: rs, Now: func() time.Time { return now }, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	fast, slow := newSrv(), newSrv()
	calls := []struct {
		name, path, ct, body string
		wantFast             bool
	}{
		{"check", pathCheck, "application/json", `{"key":"alice","limit":{"limit":"2","window":"60s"}}`, true},
		{"check again", pathCheck, "application/json", `{"key":"alice","limit":{"limit":2,"window":"60s"}}`, true},
		{"check denied", pathCheck, "application/json", `{"key":"alice","limit":{"limit":2,"window":"60s"}}`, true},
		{"charset", pathCheck, "application/json; charset=utf-8", `{"key":"bob","rule":"login"}`, true},
		{"token bucket", pathCheck, "application/json", `{"key":"t","hits":2,"limit":{"limit":5,"window":"1.5s","algorithm":"ALGORITHM_TOKEN_BUCKET"}}`, true},
		{"peek", pathPeek, "application/json", `{"key":"alice","limit":{"limit":2,"window":"60s"}}`, true},
		{"batch", pathCheckBatch, "application/json", `{"checks":[{"key":"a","limit":{"limit":1,"window":"1s"}},{"key":"","limit":{"limit":1,"window":"1s"}},{"key":"r","rule":"nope"}]}`, true},
		{"bad hits", pathCheck, "application/json", `{"key":"alice","hits":500,"limit":{"limit":100,"window":"60s"}}`, true},
		{"empty key", pathCheck, "application/json", `{"key":"","limit":{"limit":100,"window":"60s"}}`, true},
		{"unknown rule", pathCheck, "application/json", `{"key":"x","rule":"nope"}`, true},
		{"escaped key", pathCheck, "application/json", `{"key":"a\"b<>","limit":{"limit":1,"window":"60s"}}`, false},
		{"malformed", pathCheck, "application/json", `{"key":`, false},
		{"unknown field", pathCheck, "application/json", `{"key":"u","limit":{"limit":1,"window":"60s"},"x":1}`, false},
		{"too big", pathCheck, "application/json", `{"key":"` + strings.Repeat("k", DefaultMaxRequestBytes) + `"}`, false},
		{"proto", pathCheck, "application/proto", pb(&ratelimitv1.CheckRequest{Key: "pat", Limit: &ratelimitv1.Limit{Limit: 2, Window: durationpb.New(time.Minute)}}), true},
		{"proto again", pathCheck, "application/proto", pb(&ratelimitv1.CheckRequest{Key: "pat", Hits: 2, Limit: &ratelimitv1.Limit{Limit: 2, Window: durationpb.New(time.Minute)}}), true},
		{"proto rule", pathCheck, "application/proto", pb(&ratelimitv1.CheckRequest{Key: "bob", Rule: "login"}), true},
		{"proto empty", pathCheck, "application/proto", "", true},
		{"proto peek", pathPeek, "application/proto", pb(&ratelimitv1.PeekRequest{Key: "pat", Limit: &ratelimitv1.Limit{Limit: 2, Window: durationpb.New(time.Minute)}}), true},
		{"proto batch", pathCheckBatch, "application/proto", pb(&ratelimitv1.CheckBatchRequest{Checks: []*ratelimitv1.CheckRequest{{Key: "a", Limit: &ratelimitv1.Limit{Limit: 1, Window: durationpb.New(time.Second)}}, {Key: "r", Rule: "nope"}}}), true},
		{"proto batch too long", pathCheckBatch, "application/proto", pb(&ratelimitv1.CheckBatchRequest{Checks: make([]*ratelimitv1.CheckRequest, DefaultMaxBatch+1)}), true},
		{"omit stats", pathCheck, "application/json", `{"key":"alice","omitStats":true,"limit":{"limit":2,"window":"60s"}}`, true},
		{"peek omit stats", pathPeek, "application/json", `{"key":"alice","omit_stats":true,"limit":{"limit":2,"window":"60s"}}`, true},
		{"batch omit stats", pathCheckBatch, "application/json", `{"checks":[{"key":"a","omitStats":true,"limit":{"limit":1,"window":"1s"}},{"key":"a","limit":{"limit":1,"window":"1s"}}]}`, true},
		{"proto omit stats", pathCheck, "application/proto", pb(&ratelimitv1.CheckRequest{Key: "pat", OmitStats: true, Limit: &ratelimitv1.Limit{Limit: 2, Window: durationpb.New(time.Minute)}}), true},
		{"proto malformed", pathCheck, "application/proto", "\x0a\x05ab", false},
		{"proto unknown codec", pathCheck, "application/x-protobuf", pb(&ratelimitv1.CheckRequest{Key: "pat"}), false},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			req := func() *http.Request {
				r := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
				r.Header.Set("Content-Type", c.ct)
				return r
			}
			fw := httptest.NewRecorder()
			took := fast.serveFast(fw, req())
			if took != c.wantFast {
				t.Fatalf("serveFast took it: %v, want %v", took, c.wantFast)
			}
			if !took {
				fast.ServeHTTP(fw, req())
			}
			sw := httptest.NewRecorder()
			slow.mux.ServeHTTP(sw, req())
			if fw.Code != sw.Code {
				t.Errorf("status %d, Connect's %d", fw.Code, sw.Code)
			}
			if got, want := fw.Header().Get("Content-Type"), sw.Header().Get("Content-Type"); got != want {
				t.Errorf("Content-Type %q, Connect's %q", got, want)
			}
			if got, want := fw.Body.String(), sw.Body.String(); got != want {
				t.Errorf("body\n got  %.300s\n want %.300s", got, want)
			}
		})
	}
}

// pb returns m in protobuf.
func pb(m proto.Message) string {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestFastPathContentLength: answers on the fast path carry a
// Content-Length and are never chunked over HTTP/1.1, both short ones
// (whose length net/http computes) and long ones (set by serveFast).
func TestFastPathContentLength(t *testing.T) {
	s, err := NewHandler(Config{Store: region.NewMemory(region.MemoryConfig{}), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	var batch strings.Builder
	batch.WriteString(`{"checks":[`)
	for i := range 40 {
		if i > 0 {
			batch.WriteByte(',')
		}
		fmt.Fprintf(&batch, `{"key":"k%d","limit":{"limit":"100","window":"60s"}}`, i)
	}
	batch.WriteString(`]}`)
	for _, c := range []struct {
		path, body string
		long       bool
	}{
		{pathCheck, `{"key":"alice","limit":{"limit":"2","window":"60s"}}`, false},
		{pathCheckBatch, batch.String(), true},
	} {
		resp, err := http.Post(srv.URL+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d, %v: %s", c.path, resp.StatusCode, err, b)
		}
		if resp.ContentLength != int64(len(b)) || len(resp.TransferEncoding) > 0 {
			t.Errorf("%s: Content-Length %d, transfer encoding %q for %d bytes, want the length and no chunking", c.path, resp.ContentLength, resp.TransferEncoding, len(b))
		}
		if long := len(b) > directContentLength; long != c.long {
			t.Errorf("%s: %d bytes, want them over %d: %v", c.path, len(b), directContentLength, c.long)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q, want application/json", c.path, ct)
		}
	}
}

// TestReadAtMost reads bodies shorter than, as long as and longer than
// the limit, whole and a byte at a time, into buffers too small for them.
func TestReadAtMost(t *testing.T) {
	const limit = 8
	for _, tc := range []struct {
		name, body, want string
	}{
		{"empty", "", ""},
		{"short", "abc", "abc"},
		{"at limit", "abcdefgh", "abcdefgh"},
		{"one over", "abcdefghi", "abcdefghi"},
		{"far over", "abcdefghijklmnop", "abcdefghi"}, // limit+1 bytes tell it is over
	} {
		for _, r := range []struct {
			name string
			r    func(string) io.Reader
		}{
			{"whole", func(s string) io.Reader { return strings.NewReader(s) }},
			{"bytewise", func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) }},
		} {
			t.Run(tc.name+"/"+r.name, func(t *testing.T) {
				got, err := readAtMost(make([]byte, 0, 2), r.r(tc.body), limit)
				if err != nil {
					t.Fatalf("readAtMost: %v", err)
				}
				if string(got) != tc.want {
					t.Errorf("readAtMost() = %q, want %q", got, tc.want)
				}
			})
		}
	}
	errBoom := errors.New("boom")
	if _, err := readAtMost(nil, iotest.ErrReader(errBoom), limit); !errors.Is(err, errBoom) {
		t.Errorf("readAtMost(failing reader) error = %v, want %v", err, errBoom)
	}
}

// TestCheckOutReuse builds answers in one checkOut, reset between them as
// serveFast's pool does, and wants each to equal the answer built afresh:
// nothing of one answer (regions, marks, estimate terms) shows in the next.
func TestCheckOutReuse(t *testing.T) {
	s, err := NewHandler(Config{Store: region.NewMemory(region.MemoryConfig{}), Registerer: prometheus.NewRegistry(), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	spec := window.Limit{Limit: 100, Window: time.Minute}
	trail := func(n int) window.Trail {
		var tr window.Trail
		for i := range n {
			tr.Add(int64(i)*1000, 60_000, 1, true)
		}
		return tr
	}
	outcome := func(regions ...region.RegionCount) decision.Outcome {
		o := decision.Outcome{Spec: spec}
		o.Allowed, o.Limit, o.Remaining, o.ElapsedMs = true, 100, 90, 30_000
		o.Regions = regions
		return o
	}
	outcomes := []struct {
		name string
		o    decision.Outcome
	}{
		{"two regions, long trails", outcome(
			region.RegionCount{Region: "local", Current: 3, Previous: 50, PreviousTrail: trail(50)},
			region.RegionCount{Region: "far", Current: 1, Previous: 40, PreviousTrail: trail(40)})},
		{"one region, short trail", outcome(region.RegionCount{Region: "local", Current: 1, Previous: 2, PreviousTrail: trail(2)})},
		{"one region, no trail", outcome(region.RegionCount{Region: "local", Current: 1})},
		{"no region", outcome()},
		{"one region, longer trail", outcome(region.RegionCount{Region: "local", Current: 1, Previous: 45, PreviousTrail: trail(45)})},
	}
	var out checkOut
	for _, tc := range outcomes {
		out.reset()
		got := s.response(&out.msgs, tc.o, nil)
		want := s.response(new(responseMsgs), tc.o, nil)
		if !proto.Equal(got, want) {
			t.Errorf("%s: reused answer = %v, want %v", tc.name, got, want)
		}
	}
}
