// Package connlimit owns the cap on the connections a listener keeps open,
// in a form that idle and slow clients cannot hold: at the cap, a new
// connection takes the place of one that is doing nothing, instead of
// waiting in the listen backlog behind connections that may never close.
//
// A [Listener] knows, for each connection, whether a request is in
// flight on it (from http.Server's ConnState hook, or from RPC begin and
// end events for grpc-go), whether it has ever completed one, whether one
// of its requests carried a valid token, and when it was last active.
// When a connection arrives at the cap, the listener closes, in order of
// preference, among connections with no request in flight:
//
//  1. one that never completed a request in the second since it connected
//     (it sent nothing, or is trickling its first request's headers), the
//     oldest first;
//  2. one none of whose requests was authenticated (when authentication is
//     on), the longest idle first;
//  3. any other idle for a second or more, the longest idle first;
//  4. one that connected less than a second ago, the oldest first;
//
// and, failing those, a connection whose request has been in flight for
// longer than Config.SlowAfter (a stream, or a body trickling in). With
// none of these (every connection busy, or at work within the last
// second), the new connection is closed at once. Unauthenticated
// connections with no request in flight are held to Config.UnauthShare:
// past it, each new connection replaces the oldest of them. While the
// listener holds at least three quarters of its cap, connections idle
// longer than Config.ShortIdle are closed.
package connlimit

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// newGrace is how long a new connection has to complete its first request
// before it ranks with connections that never did, and how recently a
// connection must have been active to be kept over a new one.
const newGrace = time.Second

// Defaults for zero [Config] fields.
const (
	DefaultShortIdle = 5 * time.Second
	DefaultSlowAfter = 10 * time.Second
)

// Config configures a [Listener]. Max is required; other zero fields mean
// their default.
type Config struct {
	// Max is the most connections open at once.
	Max int
	// UnauthShare is the most connections with no request in flight and no
	// authenticated request yet that the listener keeps; 0: no share (all
	// connections count alike, as when authentication is off).
	UnauthShare int
	// ShortIdle is the idle timeout while the listener holds at least
	// three quarters of Max; default 5s.
	ShortIdle time.Duration
	// SlowAfter is how long a request may be in flight before its
	// connection may be closed to make room; default 10s.
	SlowAfter time.Duration
	// Now returns the current time; default time.Now.
	Now func() time.Time
}

// Stats are a listener's counters.
type Stats struct {
	Open      int    // connections open now
	Reclaimed uint64 // connections closed to make room or for idling near the cap
	Refused   uint64 // new connections closed at once, nothing to reclaim
}

// Listener is a net.Listener that caps the connections open at once (see
// the package doc). Safe for concurrent use.
type Listener struct {
	net.Listener
	cfg  Config
	stop chan struct{}
	once sync.Once

	mu        sync.Mutex
	conns     map[string]*conn // by remote address
	reclaimed uint64
	refused   uint64
}

// New wraps ln; call Close to stop it and its janitor.
func New(ln net.Listener, cfg Config) (*Listener, error) {
	if cfg.Max < 1 {
		return nil, errors.New("connlimit: Config.Max must be at least 1")
	}
	if cfg.ShortIdle <= 0 {
		cfg.ShortIdle = DefaultShortIdle
	}
	if cfg.SlowAfter <= 0 {
		cfg.SlowAfter = DefaultSlowAfter
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Listener{Listener: ln, cfg: cfg, stop: make(chan struct{}), conns: map[string]*conn{}}
	go l.janitor()
	return l, nil
}

// conn is one accepted connection.
type conn struct {
	net.Conn
	l    *Listener
	key  string
	once sync.Once

	// Guarded by l.mu.
	opened    time.Time
	last      time.Time // when it last started or finished a request
	busy      int       // requests (streams) in flight
	busySince time.Time
	proven    bool // completed a request
	authed    bool // a request carried a valid token
	closed    bool
}

// Close closes the connection and forgets it.
func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.conns[c.key] == c {
			delete(c.l.conns, c.key)
		}
		c.closed = true
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// Accept returns the next connection, closing another one to make room
// when the listener is at its cap (see the package doc), or closing the
// new one at once when nothing can be reclaimed.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		now := l.cfg.Now()
		c := &conn{Conn: nc, l: l, key: nc.RemoteAddr().String(), opened: now, last: now}
		var victims []*conn
		l.mu.Lock()
		if l.cfg.UnauthShare > 0 {
			if v := l.overShare(); v != nil {
				victims = append(victims, v)
			}
		}
		if len(l.conns)-len(victims) >= l.cfg.Max {
			if v := l.victim(now, victims); v != nil {
				victims = append(victims, v)
			}
		}
		full := len(l.conns)-len(victims) >= l.cfg.Max
		if full {
			l.refused++
		} else {
			l.conns[c.key] = c
		}
		for _, v := range victims {
			delete(l.conns, v.key)
			l.reclaimed++
		}
		l.mu.Unlock()
		for _, v := range victims {
			_ = v.Close()
		}
		if full {
			_ = nc.Close()
			continue
		}
		return c, nil
	}
}

// overShare returns the oldest unauthenticated connection with nothing in
// flight when there are UnauthShare of them or more (a new connection,
// unauthenticated until its first request, is about to join them).
func (l *Listener) overShare() *conn {
	n := 0
	var oldest *conn
	for _, c := range l.conns {
		if c.busy > 0 || c.authed {
			continue
		}
		n++
		if oldest == nil || c.last.Before(oldest.last) {
			oldest = c
		}
	}
	if n >= l.cfg.UnauthShare {
		return oldest
	}
	return nil
}

// victim returns the connection to close to make room, or nil; skip holds
// connections already chosen.
func (l *Listener) victim(now time.Time, skip []*conn) *conn {
	var best *conn
	bestRank := 5
	for _, c := range l.conns {
		if contains(skip, c) {
			continue
		}
		var rank int
		switch {
		case c.busy > 0 && now.Sub(c.busySince) >= l.cfg.SlowAfter:
			rank = 4
		case c.busy > 0:
			continue
		case !c.proven && now.Sub(c.opened) >= newGrace:
			rank = 0
		case !c.proven:
			rank = 3 // just connected: its first request may be on its way
		case l.cfg.UnauthShare > 0 && !c.authed:
			rank = 1
		case now.Sub(c.last) >= newGrace:
			rank = 2
		default:
			continue // active within the second: a client at work
		}
		older := best != nil && rank == bestRank && l.since(c).Before(l.since(best))
		if rank < bestRank || older {
			best, bestRank = c, rank
		}
	}
	return best
}

// since is the instant a connection's rank is ordered by: when it
// connected (never completed a request), started its request (busy) or
// was last active.
func (l *Listener) since(c *conn) time.Time {
	switch {
	case c.busy > 0:
		return c.busySince
	case !c.proven:
		return c.opened
	}
	return c.last
}

func contains(cs []*conn, c *conn) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// janitor closes connections idle longer than ShortIdle while the
// listener is near its cap, checking every ShortIdle/4.
func (l *Listener) janitor() {
	t := time.NewTicker(l.cfg.ShortIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.reap()
		}
	}
}

// reap closes connections idle longer than ShortIdle when the listener
// holds at least three quarters of Max.
func (l *Listener) reap() {
	now := l.cfg.Now()
	var idle []*conn
	l.mu.Lock()
	if 4*len(l.conns) >= 3*l.cfg.Max {
		for _, c := range l.conns {
			if c.busy == 0 && now.Sub(l.since(c)) >= l.cfg.ShortIdle {
				idle = append(idle, c)
			}
		}
		for _, c := range idle {
			delete(l.conns, c.key)
			l.reclaimed++
		}
	}
	l.mu.Unlock()
	for _, c := range idle {
		_ = c.Close()
	}
}

// Close stops accepting and stops the janitor.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.stop) })
	return l.Listener.Close()
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: len(l.conns), Reclaimed: l.reclaimed, Refused: l.refused}
}

// ConnState is an http.Server's ConnState hook: it tells the listener
// when a connection's requests start and finish (for HTTP/2, when its
// first stream opens and its last one closes).
func (l *Listener) ConnState(nc net.Conn, st http.ConnState) {
	switch st {
	case http.StateActive:
		l.Begin(nc.RemoteAddr().String())
	case http.StateIdle:
		l.End(nc.RemoteAddr().String())
	}
}

// Begin records that a request (or a stream) started on the connection
// from addr.
func (l *Listener) Begin(addr string) {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.conns[addr]; c != nil {
		if c.busy == 0 {
			c.busySince = now
		}
		c.busy++
		c.last = now
	}
}

// End records that a request (or a stream) finished on the connection
// from addr.
func (l *Listener) End(addr string) {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.conns[addr]; c != nil && c.busy > 0 {
		c.busy--
		c.proven = true
		c.last = now
	}
}

// Authenticated records that a request on the connection from addr
// carried a valid token.
func (l *Listener) Authenticated(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.conns[addr]; c != nil {
		c.authed = true
	}
}
