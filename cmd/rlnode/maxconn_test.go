package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMaxConnections: with --max-connections 1, a client that holds the
// one connection keeps the next one waiting until it lets go.
func TestMaxConnections(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	base, done, logs := start(t, ctx, []string{"--listen", "127.0.0.1:0", "--max-connections", "1"}, env(nil))
	t.Cleanup(func() { cancel(); wait(t, done, logs) })
	hold, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	// The held connection is served: the node answers on it.
	if _, err := hold.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	if _, err := hold.Read(buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Fatalf("held connection: %q, %v", buf, err)
	}
	c := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := c.Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("second connection answered %d while the first is held, want it to wait", resp.StatusCode)
	}
	hold.Close()
	c.Timeout = 5 * time.Second
	resp, err := c.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("after the first connection closed: %v", err)
	}
	resp.Body.Close()
}
