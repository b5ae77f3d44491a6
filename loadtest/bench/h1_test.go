package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

// h1Server answers Check and CheckBatch in the request's encoding: a key
// containing "ok" allowed, any other denied. A key "chunked" is answered
// in chunks, "close" with the connection closed after it, "fail" with a
// 500. It counts the connections it accepted.
func h1Server(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		binary := r.Header.Get("Content-Type") == "application/proto"
		unmarshal := protojson.Unmarshal
		marshal := protojson.Marshal
		if binary {
			unmarshal, marshal = proto.Unmarshal, proto.Marshal
		}
		answer := func(key string) *ratelimitv1.CheckResponse {
			return &ratelimitv1.CheckResponse{Allowed: strings.Contains(key, "ok"), Limit: 10}
		}
		var out proto.Message
		var key string
		switch r.URL.Path {
		case checkPath:
			in := &ratelimitv1.CheckRequest{}
			if err := unmarshal(body, in); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			key, out = in.GetKey(), answer(in.GetKey())
		case batchPath:
			in := &ratelimitv1.CheckBatchRequest{}
			if err := unmarshal(body, in); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			b := &ratelimitv1.CheckBatchResponse{}
			for _, c := range in.GetChecks() {
				b.Results = append(b.Results, &ratelimitv1.CheckResult{Result: &ratelimitv1.CheckResult_Response{Response: answer(c.GetKey())}})
			}
			out = b
		default:
			http.NotFound(w, r)
			return
		}
		switch key {
		case "fail":
			http.Error(w, "scripted failure", http.StatusInternalServerError)
			return
		case "close":
			w.Header().Set("Connection", "close")
		}
		b, _ := marshal(out)
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		if key == "chunked" {
			_, _ = w.Write(b[:len(b)/2])
			w.(http.Flusher).Flush()
			_, _ = w.Write(b[len(b)/2:])
			return
		}
		_, _ = w.Write(b)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, &conns
}

// TestH1Client drives a net/http server with the hand-written HTTP/1.1
// client, in JSON and protobuf: every answer is counted right, chunked
// answers and closed connections are read, a failed call is an error and
// the next call dials again, and many calls at once share at most the
// client's connections.
func TestH1Client(t *testing.T) {
	s, conns := h1Server(t)
	ctx := context.Background()
	for _, protocol := range []string{protoJSON, protoBinary} {
		t.Run(protocol, func(t *testing.T) {
			c, err := NewH1Client(s.URL, protocol, 4)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			one := func(key string) *Workload {
				w := &Workload{Name: key, PerCall: 1, single: []*ratelimitv1.CheckRequest{{Key: key, Hits: 1, Limit: limit(10)}}}
				w.encode()
				return w
			}
			var buf bytes.Buffer
			for _, tc := range []struct {
				key     string
				allowed int
			}{{"ok", 1}, {"no", 0}, {"chunked-ok", 1}, {"close", 0}, {"ok-again", 1}} {
				a, d, err := c.Do(ctx, one(tc.key), 0, &buf)
				if err != nil || a != tc.allowed || a+d != 1 {
					t.Errorf("Do(%s) = %d allowed, %d denied, %v; want %d allowed of 1", tc.key, a, d, err, tc.allowed)
				}
			}
			if _, _, err := c.Do(ctx, one("fail"), 0, &buf); err == nil || !strings.Contains(err.Error(), "status 500") {
				t.Errorf("Do(fail) error = %v, want status 500", err)
			}
			if a, _, err := c.Do(ctx, one("ok"), 0, &buf); err != nil || a != 1 {
				t.Errorf("Do(ok) after a failure = %d allowed, %v", a, err)
			}

			b := &Workload{Name: "batch", PerCall: 3, batch: []*ratelimitv1.CheckBatchRequest{{Checks: []*ratelimitv1.CheckRequest{
				{Key: "ok1", Hits: 1, Limit: limit(10)}, {Key: "no", Hits: 1, Limit: limit(10)}, {Key: "ok2", Hits: 1, Limit: limit(10)}}}}}
			b.encode()
			if a, d, err := c.Do(ctx, b, 0, &buf); err != nil || a != 2 || d != 1 {
				t.Errorf("Do(batch) = %d allowed, %d denied, %v; want 2 and 1", a, d, err)
			}

			before := conns.Load()
			w := one("ok")
			var wg sync.WaitGroup
			var failed atomic.Int64
			for range 16 {
				wg.Go(func() {
					var buf bytes.Buffer
					for range 50 {
						if a, _, err := c.Do(ctx, w, 0, &buf); err != nil || a != 1 {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Errorf("%d of 800 concurrent calls failed", n)
			}
			if n := conns.Load() - before; n > 4 {
				t.Errorf("800 calls on a client of 4 connections opened %d more", n)
			}
		})
	}
}

// readH1Response reads what a server may send and refuses what it may
// not.
func TestReadH1Response(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		status   int
		body     string
		keep     bool
		err      bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, "hello", true, false},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\nX-T: 1\r\n\r\n", 200, "hello", true, false},
		{"close", "HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno", 429, "no", false, false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false, false},
		{"to the end", "HTTP/1.1 200 OK\r\n\r\nall of it", 200, "all of it", false, false},
		{"bad status", "HTTP/1.1 2x0 OK\r\n\r\n", 0, "", false, true},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", 0, "", false, true},
		{"bad header", "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", 0, "", false, true},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, "", false, true},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhalf", 0, "", false, true},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			status, body, keep, err := readH1Response(bufio.NewReader(strings.NewReader(tc.in)), &buf)
			if (err != nil) != tc.err {
				t.Fatalf("error = %v, want error %v", err, tc.err)
			}
			if tc.err {
				return
			}
			if status != tc.status || string(body) != tc.body || keep != tc.keep {
				t.Errorf("= %d %q keep %v, want %d %q keep %v", status, body, keep, tc.status, tc.body, tc.keep)
			}
		})
	}
	// Bodies past maxH1Body are refused as such, before any is read.
	for name, in := range map[string]string{
		"length too large": "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
		"chunk too large":  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffff\r\n",
		"endless body":     "HTTP/1.1 200 OK\r\n\r\n" + strings.Repeat("x", maxH1Body+1),
	} {
		var buf bytes.Buffer
		if _, _, _, err := readH1Response(bufio.NewReader(strings.NewReader(in)), &buf); !errors.Is(err, errH1) {
			t.Errorf("%s: error = %v, want %v", name, err, errH1)
		}
	}
	if _, err := NewH1Client("https://x:1", protoJSON, 1); err == nil {
		t.Error("NewH1Client accepted https")
	}
	var buf bytes.Buffer
	c, err := NewH1Client("http://127.0.0.1:1", protoJSON, 1)
	if err != nil {
		t.Fatal(err)
	}
	w := &Workload{PerCall: 1, single: []*ratelimitv1.CheckRequest{{Key: "k"}}}
	w.encode()
	if _, _, err := c.Do(context.Background(), w, 0, &buf); err == nil {
		t.Error("Do to a closed port succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	hc := <-c.idle // every connection in use: Do waits, and its context ends
	if _, _, err := c.Do(ctx, w, 0, &buf); !errors.Is(err, context.Canceled) {
		t.Errorf("Do with no free connection and an ended context: error = %v, want %v", err, context.Canceled)
	}
	c.idle <- hc
}
