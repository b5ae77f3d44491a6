package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/envoyrls"
	"github.com/rlcluster/rlcluster/internal/api/grpcserve"
)

// TestBoundsBeforeDecoding: a batch of one check over --max-batch, an
// Envoy request of one descriptor over it and a descriptor of one entry
// over envoyrls.MaxEntries are refused as invalid_argument naming the
// bound, in every encoding and over every transport (the JSON fast path,
// JSON through Connect, protobuf through Connect, gRPC on the API port and
// on a grpc-go server), while the bound itself is accepted; a Check of
// more bytes than its longest key and rule name take is refused
// (resource_exhausted) though it is well under MaxRequestBytes.
func TestBoundsBeforeDecoding(t *testing.T) {
	s := newServer(t, api.Config{MaxBatch: 5})
	ctx := context.Background()
	checks := func(n int) []*ratelimitv1.CheckRequest {
		out := make([]*ratelimitv1.CheckRequest, n)
		for i := range out {
			out[i] = &ratelimitv1.CheckRequest{Key: fmt.Sprint("k", i), Limit: inline(10, time.Minute)}
		}
		return out
	}
	const tooMany = "checks: more than the maximum of 5 checks"
	for _, pr := range protocols {
		c := s.client(t, pr.h2c, pr.opts...)
		if resp, err := c.CheckBatch(ctx, connect.NewRequest(&ratelimitv1.CheckBatchRequest{Checks: checks(5)})); err != nil || len(resp.Msg.Results) != 5 {
			t.Errorf("%s: CheckBatch of 5 = %v, %v; want 5 results", pr.name, resp, err)
		}
		_, err := c.CheckBatch(ctx, connect.NewRequest(&ratelimitv1.CheckBatchRequest{Checks: checks(6)}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tooMany) {
			t.Errorf("%s: CheckBatch of 6 = %v, want invalid_argument %q", pr.name, err, tooMany)
		}
	}
	// The protobuf encoding through Connect's own protocol.
	pc := s.client(t, false)
	if _, err := pc.CheckBatch(ctx, connect.NewRequest(&ratelimitv1.CheckBatchRequest{Checks: checks(6)})); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tooMany) {
		t.Errorf("connect-proto: CheckBatch of 6 = %v, want invalid_argument %q", err, tooMany)
	}
	// JSON the fast path does not take (an escaped key), and JSON whose
	// array is named with escapes, go through the counting codec.
	for _, body := range []string{
		`{"checks":[{"key":"\u0061"},{},{},{},{},{}]}`,
		`{"\u0063hecks":[{},{},{},{},{},{}]}`,
		`{"checks":[{},{},{},{},{},{},` + strings.Repeat(`{"key":`, 40) + `]}`,
	} {
		code, got := postJSON(t, s.URL+"/ratelimit.v1.RateLimitService/CheckBatch", body)
		if code != http.StatusBadRequest || !strings.Contains(got, tooMany) {
			t.Errorf("POST CheckBatch %.60s = %d %s, want 400 %q", body, code, got, tooMany)
		}
	}

	// Envoy: descriptors and entries, on the API port and on grpc-go.
	desc := func(entries int) *commonv3.RateLimitDescriptor {
		d := &commonv3.RateLimitDescriptor{}
		for i := range entries {
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: fmt.Sprint("k", i), Value: "v"})
		}
		return d
	}
	descs := func(n, entries int) []*commonv3.RateLimitDescriptor {
		out := make([]*commonv3.RateLimitDescriptor, n)
		for i := range out {
			out[i] = desc(entries)
		}
		return out
	}
	gs, err := grpcserve.New(grpcserve.Config{API: s.API})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(func() { gs.Stop(context.Background()) })
	for _, addr := range []string{strings.TrimPrefix(s.URL, "http://"), ln.Addr().String()} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		rls := rlsv3.NewRateLimitServiceClient(conn)
		for _, tc := range []struct {
			name string
			req  *rlsv3.RateLimitRequest
			want string // "" : answered
		}{
			{"5 descriptors", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs(5, 1)}, ""},
			{"6 descriptors", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs(6, 1)}, "descriptors: more than the maximum of 5 descriptors"},
			{"6 descriptors, domain last", &rlsv3.RateLimitRequest{Descriptors: descs(6, 1), Domain: "d"}, "descriptors: more than the maximum of 5 descriptors"},
			{"64 entries", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc(1), desc(envoyrls.MaxEntries)}}, ""},
			{"65 entries", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc(1), desc(envoyrls.MaxEntries + 1)}},
				fmt.Sprintf("descriptors[1].entries: more than the maximum of %d entries", envoyrls.MaxEntries)},
		} {
			_, err := rls.ShouldRateLimit(ctx, tc.req)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s: ShouldRateLimit(%s) = %v, want an answer", addr, tc.name, err)
			case tc.want != "" && (status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.want):
				t.Errorf("%s: ShouldRateLimit(%s) = %v, want InvalidArgument %q", addr, tc.name, err, tc.want)
			}
		}
	}

	// A Check reads what its longest key and rule name can take, no more.
	long := `{"key":"a","limit":{"limit":"5","window":"60s"}}` + strings.Repeat(" ", 64<<10)
	resp, err := http.Post(s.URL+"/ratelimit.v1.RateLimitService/Check", "application/json", strings.NewReader(long))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !bytes.Contains(b, []byte(`"code":"resource_exhausted"`)) {
		t.Errorf("Check of 64 KiB = %d %s, want 429 resource_exhausted", resp.StatusCode, b)
	}
	// A batch may be that large.
	code, got := postJSON(t, s.URL+"/ratelimit.v1.RateLimitService/CheckBatch", `{"checks":[{"key":"a","limit":{"limit":"5","window":"60s"}}]}`+strings.Repeat(" ", 64<<10))
	if code != http.StatusOK {
		t.Errorf("CheckBatch of 64 KiB = %d %.200s, want 200", code, got)
	}
}

// TestRequestMemoryBudget: with room for one large request in flight, a
// second one on HTTP/1.1 waits for the first to be answered and is then
// served, and one on an HTTP/2 connection is refused at once
// (resource_exhausted), since its unread body would hold back the
// connection's other streams; small requests never wait.
func TestRequestMemoryBudget(t *testing.T) {
	s := newServer(t, api.Config{MaxRequestBytes: 128 << 10, MaxRequestMemory: 128 << 10})
	big := []byte(`{"checks":[{"key":"a","limit":{"limit":"5","window":"60s"}}]}` + strings.Repeat(" ", 100<<10))
	url := s.URL + "/ratelimit.v1.RateLimitService/CheckBatch"

	// The first large request: its body stops half way until released.
	pr, pw := io.Pipe()
	firstDone := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url, pr)
		req.ContentLength = int64(len(big))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			firstDone <- 0
			return
		}
		resp.Body.Close()
		firstDone <- resp.StatusCode
	}()
	if _, err := pw.Write(big[:len(big)/2]); err != nil {
		t.Fatal(err)
	}

	// A small request is not held up.
	if code, body := postJSON(t, s.URL+"/ratelimit.v1.RateLimitService/Check", `{"key":"b","limit":{"limit":"5","window":"60s"}}`); code != http.StatusOK {
		t.Errorf("small Check while the budget is spent = %d %s, want 200", code, body)
	}
	// On HTTP/2, refused at once, once the first request's handler holds
	// the budget: until it does, a large request that is not JSON is
	// answered invalid_argument and spends nothing.
	h2 := apitest.H2CClient(t)
	junk := bytes.Repeat([]byte("x"), 100<<10)
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := h2.Post(url, "application/json", bytes.NewReader(junk))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first large request never held the budget (last probe: %d)", resp.StatusCode)
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	resp, err := h2.Post(url, "application/json", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !bytes.Contains(b, []byte("too many large requests in flight")) || time.Since(start) > 2*time.Second {
		t.Errorf("large CheckBatch over HTTP/2 while the budget is spent = %d %s after %v, want 429 resource_exhausted at once", resp.StatusCode, b, time.Since(start))
	}
	// On HTTP/1.1, it waits for the first.
	second := make(chan int, 1)
	go func() {
		resp, err := http.Post(url, "application/json", bytes.NewReader(big))
		if err != nil {
			second <- 0
			return
		}
		resp.Body.Close()
		second <- resp.StatusCode
	}()
	select {
	case code := <-second:
		t.Fatalf("second large request over HTTP/1.1 answered %d before the first finished, want it to wait", code)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := pw.Write(big[len(big)/2:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if code := <-firstDone; code != http.StatusOK {
		t.Errorf("first large request = %d, want 200", code)
	}
	if code := <-second; code != http.StatusOK {
		t.Errorf("second large request over HTTP/1.1 = %d, want 200 once the first was answered", code)
	}
}
