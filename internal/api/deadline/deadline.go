// Package deadline owns the read and write deadlines of a listener's
// connections: those far ahead are held by one goroutine per listener,
// not by a runtime timer that every call sets and resets.
//
// An http.Server with ReadHeaderTimeout, ReadTimeout, WriteTimeout and
// IdleTimeout sets an HTTP/1.1 connection's deadlines several times per
// request, each call a change to the socket's runtime timer. A [Conn]
// from a [Listener] passes a deadline less than [Near] ahead, a past one
// (how net/http aborts a read) and the first zero one after either
// straight to the socket. A deadline at least Near ahead it only
// records; the listener's one goroutine wakes every [Tick] and sets the
// socket of each connection whose recorded deadline has passed to that
// deadline, so the blocked Read or Write returns a timeout as it would
// have from the socket. Such a timeout fires after its deadline, up to
// Tick late, never early: with Near twice Tick, at most half the time
// the deadline gave.
//
// The goroutine runs from [NewListener] until the listener is closed and
// every connection it accepted is closed.
package deadline

import (
	"net"
	"sync"
	"time"
)

const (
	// Tick is how often a listener enforces its connections' recorded
	// deadlines: how late such a deadline may fire.
	Tick = time.Second
	// Near is how far ahead a deadline must be to be recorded rather
	// than set on the socket at once.
	Near = 2 * time.Second
)

// Listener wraps a net.Listener: its connections are [Conn]s, whose far
// deadlines its goroutine enforces. It is safe for concurrent use.
type Listener struct {
	net.Listener
	stop chan struct{} // closed when closed and no connection is left
	done chan struct{} // closed when the goroutine has returned

	mu     sync.Mutex
	conns  map[*Conn]struct{}
	closed bool
}

// NewListener wraps ln and starts the goroutine that enforces its
// connections' far deadlines. The goroutine returns once the listener is
// closed and so is the last connection it accepted.
func NewListener(ln net.Listener) *Listener {
	l := &Listener{Listener: ln, stop: make(chan struct{}), done: make(chan struct{}), conns: map[*Conn]struct{}{}}
	go l.run()
	return l
}

// Accept waits for the next connection and returns it as a *Conn.
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &Conn{Conn: nc, l: l}
	l.mu.Lock()
	closed := l.closed
	if !closed {
		l.conns[c] = struct{}{}
	}
	l.mu.Unlock()
	if closed {
		// Accepted as the listener closed: nothing would enforce its
		// deadlines.
		_ = nc.Close()
		return nil, net.ErrClosed
	}
	return c, nil
}

// Close closes the listener. Its goroutine keeps enforcing the deadlines
// of the connections still open, and returns when the last one closes.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	l.stopIfDone()
	l.mu.Unlock()
	return err
}

// stopIfDone stops the goroutine once the listener is closed and holds no
// connection. l.mu must be held.
func (l *Listener) stopIfDone() {
	if l.closed && len(l.conns) == 0 {
		select {
		case <-l.stop:
		default:
			close(l.stop)
		}
	}
}

// forget drops c, closed.
func (l *Listener) forget(c *Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.stopIfDone()
	l.mu.Unlock()
}

func (l *Listener) run() {
	defer close(l.done)
	t := time.NewTicker(Tick)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.enforce(time.Now())
		}
	}
}

// enforce sets on the socket every recorded deadline that has passed by
// now.
func (l *Listener) enforce(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		c.expire(now)
	}
}

// Conn is a connection accepted by a [Listener]. Its SetDeadline,
// SetReadDeadline and SetWriteDeadline hold a deadline at least [Near]
// ahead for the listener to enforce, up to [Tick] late; others go to the
// socket. It is safe for concurrent use as net.Conn is.
type Conn struct {
	net.Conn
	l    *Listener
	once sync.Once

	mu     sync.Mutex
	rd, wd side
}

// side is one direction's deadline.
type side struct {
	due    time.Time // recorded, for the listener to enforce; zero: none
	onSock bool      // the socket holds a deadline set through this side
}

// SetDeadline sets the read and write deadlines, as net.Conn's does.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline, as net.Conn's does; a deadline
// at least Near ahead may fire up to Tick late.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.set(&c.rd, false, t) }

// SetWriteDeadline sets the write deadline, as net.Conn's does; a
// deadline at least Near ahead may fire up to Tick late.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.set(&c.wd, true, t) }

func (c *Conn) set(s *side, write bool, t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.IsZero() && time.Until(t) >= Near {
		s.due = t
		if !s.onSock {
			return nil
		}
		// Lift what the socket holds: the listener holds t now.
		s.onSock = false
		return c.sock(write, time.Time{})
	}
	s.due = time.Time{}
	if t.IsZero() && !s.onSock {
		return nil
	}
	s.onSock = !t.IsZero()
	return c.sock(write, t)
}

// expire sets on the socket each recorded deadline of c that has passed
// by now.
func (c *Conn) expire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireSide(&c.rd, false, now)
	c.expireSide(&c.wd, true, now)
}

func (c *Conn) expireSide(s *side, write bool, now time.Time) {
	if s.due.IsZero() || now.Before(s.due) {
		return
	}
	// A past deadline makes the blocked call return a timeout now.
	_ = c.sock(write, s.due)
	s.due, s.onSock = time.Time{}, true
}

func (c *Conn) sock(write bool, t time.Time) error {
	if write {
		return c.Conn.SetWriteDeadline(t)
	}
	return c.Conn.SetReadDeadline(t)
}

// Close closes the connection; the listener forgets it.
func (c *Conn) Close() error {
	c.once.Do(func() { c.l.forget(c) })
	return c.Conn.Close()
}

// CloseWrite shuts down the writing side of a TCP connection (net/http
// does before closing on an error, so the client reads the answer).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
