package deadline

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pipeListener is a net.Listener of in-memory connections (net.Pipe): in
// a synctest bubble its reads block durably and its deadlines run on the
// bubble's clock.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (p *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.closed:
		return nil, net.ErrClosed
	}
}

func (p *pipeListener) Close() error {
	p.once.Do(func() { close(p.closed) })
	return nil
}

func (p *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// dial returns a connection's two ends: the server's, accepted from l,
// and the client's.
func dial(t *testing.T, p *pipeListener, l *Listener) (*Conn, net.Conn) {
	t.Helper()
	srv, cli := net.Pipe()
	go func() { p.conns <- srv }()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept() error = %v", err)
	}
	return c.(*Conn), cli
}

// setup starts a Listener over a pipeListener in the bubble and accepts
// one connection; cleanup closes all of it and checks that the
// listener's goroutine has returned.
func setup(t *testing.T) (*Listener, *Conn, net.Conn) {
	t.Helper()
	p := newPipeListener()
	l := NewListener(p)
	c, cli := dial(t, p, l)
	t.Cleanup(func() {
		_ = cli.Close()
		_ = c.Close()
		_ = l.Close()
		synctest.Wait()
		select {
		case <-l.done:
		default:
			t.Error("listener's goroutine still running after it and its connections closed")
		}
	})
	return l, c, cli
}

// async runs op on c in a goroutine; the channel gets its error and how
// long after the start it returned.
func async(c net.Conn, op func(net.Conn) error) <-chan opResult {
	ch := make(chan opResult, 1)
	start := time.Now()
	go func() {
		err := op(c)
		ch <- opResult{err, time.Since(start)}
	}()
	return ch
}

// readAsync reads a byte from c in a goroutine (async).
func readAsync(c net.Conn) <-chan opResult { return async(c, read) }

func read(c net.Conn) error {
	_, err := c.Read(make([]byte, 1))
	return err
}

type opResult struct {
	err  error
	took time.Duration
}

// setRead sets c's read deadline, failing t on an error.
func setRead(t *testing.T, c net.Conn, d time.Time) {
	t.Helper()
	if err := c.SetReadDeadline(d); err != nil {
		t.Fatal(err)
	}
}

// readsData writes a byte on cli and fails t unless the read pending on
// ch returns it.
func readsData(t *testing.T, ch <-chan opResult, cli net.Conn) {
	t.Helper()
	go func() { _, _ = cli.Write([]byte("x")) }()
	synctest.Wait()
	if r := <-ch; r.err != nil {
		t.Errorf("read after the client wrote: %v, want nil", r.err)
	}
}

// pending fails t if ch has a result already.
func pending(t *testing.T, ch <-chan opResult, what string) {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-ch:
		t.Fatalf("%s: returned %v after %v, want it still blocked", what, r.err, r.took)
	default:
	}
}

// timedOut fails t unless ch has a timeout that came within [min, max].
func timedOut(t *testing.T, ch <-chan opResult, min, max time.Duration) {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-ch:
		if !errors.Is(r.err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %v, want a deadline exceeded", r.err)
		}
		if r.took < min || r.took > max {
			t.Errorf("timed out after %v, want within [%v, %v]", r.took, min, max)
		}
	default:
		t.Fatalf("still blocked, want a timeout within [%v, %v]", min, max)
	}
}

// TestFarDeadlineFiresWithinTick: a read or write deadline at least Near
// ahead fires after it, at most a Tick late.
func TestFarDeadlineFiresWithinTick(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ahead time.Duration
		set   func(net.Conn, time.Time) error
		op    func(net.Conn) error
	}{
		{"read", 5 * time.Second, net.Conn.SetReadDeadline, read},
		// Nobody reads the client's end: a write to a pipe blocks.
		{"write", 3 * time.Second, net.Conn.SetWriteDeadline, func(c net.Conn) error {
			_, err := c.Write([]byte("x"))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, c, _ := setup(t)
				if err := tc.set(c, time.Now().Add(tc.ahead)); err != nil {
					t.Fatal(err)
				}
				ch := async(c, tc.op)
				time.Sleep(tc.ahead - time.Millisecond)
				pending(t, ch, tc.name+" before its deadline")
				time.Sleep(Tick + time.Millisecond)
				timedOut(t, ch, tc.ahead, tc.ahead+Tick)
			})
		})
	}
}

func TestNearDeadlineGoesToTheSocket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c, _ := setup(t)
		const ahead = Near - time.Millisecond
		setRead(t, c, time.Now().Add(ahead))
		ch := readAsync(c)
		time.Sleep(ahead)
		timedOut(t, ch, ahead, ahead)
	})
}

// TestDeadlineMovedOrLifted: a recorded deadline moved later, or lifted
// with the zero time, before it passes does not fire.
func TestDeadlineMovedOrLifted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c, cli := setup(t)
		setRead(t, c, time.Now().Add(3*time.Second))
		ch := readAsync(c)
		time.Sleep(2 * time.Second)
		setRead(t, c, time.Now().Add(10*time.Second))
		time.Sleep(5 * time.Second)
		pending(t, ch, "read with its deadline moved 7s later")
		setRead(t, c, time.Time{})
		time.Sleep(time.Minute)
		pending(t, ch, "read with its deadline lifted")
		readsData(t, ch, cli)
	})
}

// TestAbortThenFarDeadline runs net/http's abort of a background read (a
// past deadline, then none) and an expired recorded deadline, each
// followed by a far deadline: reads after them block again until data
// comes, so nothing the socket held outlives what replaced it.
func TestAbortThenFarDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c, cli := setup(t)
		ch := readAsync(c)
		synctest.Wait()
		setRead(t, c, time.Unix(1, 0))
		timedOut(t, ch, 0, 0)
		setRead(t, c, time.Time{})
		setRead(t, c, time.Now().Add(Near))
		ch = readAsync(c)
		time.Sleep(Near - time.Millisecond)
		pending(t, ch, "read after an abort, under a far deadline")
		time.Sleep(Tick + time.Millisecond)
		timedOut(t, ch, Near, Near+Tick)

		// The socket holds the expired deadline: a far one replaces it.
		setRead(t, c, time.Now().Add(time.Hour))
		ch = readAsync(c)
		time.Sleep(time.Minute)
		pending(t, ch, "read after an expired deadline, under a far one")
		readsData(t, ch, cli)
	})
}

// TestListenerLifecycle: the goroutine outlives a closed listener while a
// connection is open, still enforcing its deadline, and returns when the
// last connection closes; a connection accepted after Close is refused.
func TestListenerLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeListener()
		l := NewListener(p)
		c1, cli1 := dial(t, p, l)
		c2, cli2 := dial(t, p, l)
		defer cli1.Close()
		defer cli2.Close()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept() after Close = %v, want net.ErrClosed", err)
		}
		if err := c1.SetReadDeadline(time.Now().Add(Near)); err != nil {
			t.Fatal(err)
		}
		ch := readAsync(c1)
		time.Sleep(Near + Tick)
		timedOut(t, ch, Near, Near+Tick)
		_ = c1.Close()
		synctest.Wait()
		select {
		case <-l.done:
			t.Fatal("goroutine returned with a connection still open")
		default:
		}
		_ = c2.Close()
		_ = c2.Close() // twice: forgotten once
		synctest.Wait()
		select {
		case <-l.done:
		default:
			t.Fatal("goroutine still running after the listener and its connections closed")
		}
	})
}

// TestAcceptRacingClose: a connection the inner listener hands over after
// Close is closed, not served without its deadlines enforced.
func TestAcceptRacingClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeListener()
		l := NewListener(p)
		l.mu.Lock()
		l.closed = true // as if Close ran while Accept waited
		l.mu.Unlock()
		srv, cli := net.Pipe()
		defer cli.Close()
		go func() { p.conns <- srv }()
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept() = %v, want net.ErrClosed", err)
		}
		if _, err := cli.Read(make([]byte, 1)); err == nil {
			t.Error("client read = nil, want its connection closed")
		}
		_ = l.Close()
	})
}
