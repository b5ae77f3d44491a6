package connlimit_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/connlimit"
)

// serve runs an HTTP server on a capped loopback listener until t ends.
func serve(t *testing.T, cfg connlimit.Config) (*connlimit.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := connlimit.New(ln, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), ConnState: cl.ConnState}
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return cl, ln.Addr().String()
}

// dial opens a connection that sends nothing; its channel is closed when
// the server closes it.
func dial(t *testing.T, addr string) <-chan struct{} {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, c)
		close(closed)
	}()
	return closed
}

func isClosed(ch <-chan struct{}, within time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(within):
		return false
	}
}

// TestReclaimAtCap: at the cap, a new connection replaces one that has
// not completed a request in the second since it connected, and a
// connection at work within the last second is kept over a silent one,
// however new.
func TestReclaimAtCap(t *testing.T) {
	cl, addr := serve(t, connlimit.Config{Max: 2, ShortIdle: time.Hour})
	// A client that completed a request, kept alive.
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	get := func() {
		t.Helper()
		resp, err := client.Get("http://" + addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get()
	silent := dial(t, addr)
	time.Sleep(1100 * time.Millisecond) // past the grace of a new connection
	newer := dial(t, addr)
	if !isClosed(silent, 2*time.Second) {
		t.Fatal("the silent connection was not reclaimed at the cap")
	}
	if isClosed(newer, 200*time.Millisecond) {
		t.Error("the newer silent connection was closed, want the older one")
	}
	get() // the kept-alive connection still serves
	if st := cl.Stats(); st.Reclaimed != 1 || st.Open != 2 {
		t.Errorf("Stats = %+v, want 1 reclaimed, 2 open", st)
	}
	// The kept-alive connection was at work within the second: the
	// silent newer one goes in its place.
	time.Sleep(100 * time.Millisecond)
	_ = dial(t, addr)
	if !isClosed(newer, 2*time.Second) {
		t.Error("a silent connection was kept over one at work within the second")
	}
	get()
}

// TestShortIdleNearCap: with three quarters of the cap open, connections
// idle longer than ShortIdle are closed, until fewer are open; below it,
// they stay.
func TestShortIdleNearCap(t *testing.T) {
	_, addr := serve(t, connlimit.Config{Max: 4, ShortIdle: 200 * time.Millisecond})
	a, b := dial(t, addr), dial(t, addr)
	if isClosed(a, time.Second) || isClosed(b, 10*time.Millisecond) {
		t.Fatal("idle connections closed at half the cap, want them kept")
	}
	c := dial(t, addr)
	for _, ch := range []<-chan struct{}{a, b} {
		if !isClosed(ch, 2*time.Second) {
			t.Fatal("a connection idle past ShortIdle stayed open at three quarters of the cap")
		}
	}
	// One connection open: below three quarters again, it may idle.
	if isClosed(c, time.Second) {
		t.Error("the last connection was closed below three quarters of the cap")
	}
}

// TestUnauthShare: past UnauthShare connections without a valid token, a
// new one replaces the oldest of them, below the cap too; an
// authenticated one is kept.
func TestUnauthShare(t *testing.T) {
	cl, addr := serve(t, connlimit.Config{Max: 10, UnauthShare: 2, ShortIdle: time.Hour})
	a := dial(t, addr)
	time.Sleep(20 * time.Millisecond)
	b := dial(t, addr)
	time.Sleep(20 * time.Millisecond)
	c := dial(t, addr)
	if !isClosed(a, 2*time.Second) {
		t.Fatal("the oldest unauthenticated connection was kept past the share")
	}
	if isClosed(b, 100*time.Millisecond) || isClosed(c, 10*time.Millisecond) {
		t.Error("a newer unauthenticated connection was closed")
	}
	if got := cl.Stats().Open; got != 2 {
		t.Errorf("open = %d, want 2", got)
	}
}
