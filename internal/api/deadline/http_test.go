package deadline

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestHTTPServerOverRealSockets serves net/http on a Listener over TCP
// with timeouts far enough ahead to be held by the listener: a client
// that trickles its headers and one that idles after a request are cut
// off after the timeout and at most a Tick (and some scheduling) later; a
// client that keeps sending requests on its connection for longer than
// both timeouts is never cut off. Closing the server stops the
// listener's goroutine. The sockets and the clock are real.
func TestHTTPServerOverRealSockets(t *testing.T) {
	const (
		timeout = Near + 500*time.Millisecond // recorded, not set on the socket
		slack   = 500 * time.Millisecond      // for a loaded machine
	)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(tcp)
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ReadHeaderTimeout: timeout,
		ReadTimeout:       timeout,
		WriteTimeout:      timeout,
		IdleTimeout:       timeout,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	addr := tcp.Addr().String()

	t.Run("group", func(t *testing.T) {
		t.Run("trickled headers", func(t *testing.T) {
			t.Parallel()
			c := dialTCP(t, addr)
			start := time.Now()
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil {
				t.Fatal(err)
			}
			waitRecorded(t, l)
			cutOff(t, c, start, timeout, timeout+Tick+slack)
		})
		t.Run("idle after a request", func(t *testing.T) {
			t.Parallel()
			c := dialTCP(t, addr)
			br := bufio.NewReader(c)
			get(t, c, br)
			cutOff(t, br, time.Now(), timeout, timeout+Tick+slack)
		})
		t.Run("busy client", func(t *testing.T) {
			t.Parallel()
			c := dialTCP(t, addr)
			br := bufio.NewReader(c)
			for end := time.Now().Add(timeout + 2*Tick); time.Now().Before(end); {
				get(t, c, br) // on the same connection each time
				time.Sleep(200 * time.Millisecond)
			}
		})
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown() error = %v", err)
	}
	if err := <-served; err != http.ErrServerClosed {
		t.Errorf("Serve() = %v, want http.ErrServerClosed", err)
	}
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		t.Error("listener's goroutine still running 5s after the server shut down")
	}
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// get sends a GET on c and reads its answer from br.
func get(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatalf("send a request: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read an answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "ok" {
		t.Fatalf("answer %q, %v, want ok", b, err)
	}
}

// waitRecorded waits until a connection of l has a read deadline
// recorded, not set on its socket.
func waitRecorded(t *testing.T, l *Listener) {
	t.Helper()
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		l.mu.Lock()
		recorded := false
		for c := range l.conns {
			c.mu.Lock()
			recorded = recorded || !c.rd.due.IsZero()
			c.mu.Unlock()
		}
		l.mu.Unlock()
		if recorded {
			return
		}
	}
	t.Fatal("no read deadline recorded by the listener")
}

// cutOff reads r until the server closes the connection, and fails t
// unless that came between min and max after start.
func cutOff(t *testing.T, r io.Reader, start time.Time, min, max time.Duration) {
	t.Helper()
	_, err := io.Copy(io.Discard, r)
	took := time.Since(start)
	if err != nil {
		t.Logf("read: %v", err)
	}
	if took < min || took > max {
		t.Errorf("cut off after %v, want within [%v, %v]", took, min, max)
	}
}
