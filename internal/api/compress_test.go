package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
)

// encodings records the encoding of every response a transport carries.
type encodings struct {
	base http.RoundTripper
	mu   sync.Mutex
	got  []string
}

func (e *encodings) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := e.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	if resp.Header.Get("Content-Type") != "application/grpc" {
		// Connect's unary protocol names it in Content-Encoding.
		e.add(resp.Header.Get("Content-Encoding"))
		return resp, nil
	}
	// gRPC negotiates an encoding per call (Grpc-Encoding) and marks each
	// message compressed or not in its envelope's first byte.
	body := bufio.NewReader(resp.Body)
	flags, err := body.Peek(1)
	if err != nil {
		return nil, fmt.Errorf("read gRPC envelope: %w", err)
	}
	if flags[0]&1 == 0 {
		e.add("")
	} else {
		e.add(resp.Header.Get("Grpc-Encoding"))
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{body, resp.Body}
	return resp, nil
}

func (e *encodings) add(enc string) {
	e.mu.Lock()
	e.got = append(e.got, enc)
	e.mu.Unlock()
}

func (e *encodings) last() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got[len(e.got)-1]
}

// TestSmallResponsesUncompressed checks that a client accepting gzip, as
// connect-go's clients (and so rlcluster's Go client) do by default, gets
// a Check's answer uncompressed, where gzip only costs CPU and bytes, and
// a large CheckBatch's compressed over gRPC.
func TestSmallResponsesUncompressed(t *testing.T) {
	srv := newServer(t, api.Config{Region: "eu"})
	for _, p := range []struct {
		name string
		opts []connect.ClientOption
		// The encoding of a large CheckBatch's answer: the Connect
		// protocol's plain unary calls are served without Connect's
		// machinery (fastpath.go), never compressed.
		batch string
	}{
		{"connect-proto", nil, ""},
		{"grpc", []connect.ClientOption{connect.WithGRPC()}, "gzip"},
	} {
		t.Run(p.name, func(t *testing.T) {
			rec := &encodings{base: apitest.H2CClient(t).Transport}
			c := ratelimitv1connect.NewRateLimitServiceClient(&http.Client{Transport: rec}, srv.URL, p.opts...)
			ctx := context.Background()
			if _, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: p.name, Hits: 1, Limit: inline(10, time.Minute)})); err != nil {
				t.Fatalf("Check: %v", err)
			}
			if enc := rec.last(); enc != "" {
				t.Errorf("Check answered with encoding %q, want none", enc)
			}
			batch := &ratelimitv1.CheckBatchRequest{}
			for i := range 500 {
				batch.Checks = append(batch.Checks, &ratelimitv1.CheckRequest{Key: fmt.Sprintf("%s-%d", p.name, i), Hits: 1, Limit: inline(10, time.Minute)})
			}
			resp, err := c.CheckBatch(ctx, connect.NewRequest(batch))
			if err != nil {
				t.Fatalf("CheckBatch: %v", err)
			}
			if n := len(resp.Msg.GetResults()); n != len(batch.Checks) {
				t.Fatalf("CheckBatch answered %d results, want %d", n, len(batch.Checks))
			}
			if enc := rec.last(); enc != p.batch {
				t.Errorf("CheckBatch of %d checks answered with encoding %q, want %q", len(batch.Checks), enc, p.batch)
			}
		})
	}
}
