package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/region"
)

// TestHTTPServerBounds: the API's server cuts off a request whose body
// trickles in (a slow client holding a connection and a goroutine) and
// refuses huge headers, while a server-reflection stream outlives both
// deadlines. The deadlines are shortened here so that the test is quick;
// newHTTPServer's own values are checked first.
func TestHTTPServerBounds(t *testing.T) {
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(h, slog.New(slog.DiscardHandler))
	if srv.ReadTimeout != httpReadTimeout || srv.WriteTimeout != httpWriteTimeout || srv.MaxHeaderBytes != 64<<10 {
		t.Errorf("newHTTPServer: ReadTimeout %v WriteTimeout %v MaxHeaderBytes %d, want %v %v %d",
			srv.ReadTimeout, srv.WriteTimeout, srv.MaxHeaderBytes, httpReadTimeout, httpWriteTimeout, 64<<10)
	}
	const deadline = 300 * time.Millisecond
	srv.ReadTimeout, srv.WriteTimeout = deadline, deadline
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()

	// A body sent one byte at a time, slower than the read deadline.
	body := `{"key":"k","limit":{"limit":"3","window":"60s"}}`
	pr, pw := io.Pipe()
	go func() {
		for i := range body {
			if _, err := pw.Write([]byte(body[i : i+1])); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = pw.Close()
	}()
	t.Cleanup(func() { _ = pw.CloseWithError(io.ErrClosedPipe) })
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, base+"/ratelimit.v1.RateLimitService/Check", pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("trickled body: %d %s after %v, want it cut off at the read deadline", resp.StatusCode, b, time.Since(start))
		}
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("trickled body took %v to be cut off, want about %v", took, deadline)
	}

	// Headers over 64 KiB.
	req, _ = http.NewRequest(http.MethodGet, base+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 80<<10))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if got, want := resp.StatusCode, http.StatusRequestHeaderFieldsTooLarge; got != want {
			t.Errorf("80 KiB of headers: %d, want %d", got, want)
		}
	}

	// A reflection stream outlives both deadlines.
	stream := grpcreflect.NewClient(apitest.H2CClient(t), base, connect.WithGRPC()).NewStream(context.Background())
	t.Cleanup(func() { stream.Close() })
	if _, err := stream.ListServices(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * deadline) // the behaviour under test is a wall-clock deadline
	if _, err := stream.ListServices(); err != nil {
		t.Errorf("reflection stream after %v: %v, want it still open", 3*deadline, err)
	}
}
