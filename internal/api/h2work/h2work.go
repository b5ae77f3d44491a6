// Package h2work runs the handlers of HTTP/2 requests on goroutines that
// it reuses from request to request.
//
// net/http's HTTP/2 server starts a new goroutine for every stream, and a
// new goroutine starts with a small stack: a decision's call path grows
// it, copying it each time it doubles, on every request
// (docs/performance.md, "Reused goroutines for HTTP/2", has what that
// cost). HTTP/1.1 serves a
// connection's requests on one goroutine, whose stack stays grown, and is
// left alone. grpc-go's server does the same with its stream workers.
package h2work

import (
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [New].
const (
	// DefaultIdle is how long a worker waits for a request before it ends.
	DefaultIdle = 10 * time.Second
)

// Handler serves HTTP/2 requests with its handler on reused goroutines,
// at most Max at once; a request that finds none idle and Max busy runs
// on its own stream's goroutine, as without the Handler. Other requests
// run on their own goroutine. It is safe for concurrent use.
type Handler struct {
	h    http.Handler
	max  int32
	idle time.Duration
	work chan *task
	n    atomic.Int32 // workers running
}

// task is one request handed to a worker.
type task struct {
	w     http.ResponseWriter
	r     *http.Request
	panic any           // what the handler panicked with, if it did (never nil then: see recover)
	done  chan struct{} // signalled when the handler returns
}

var tasks = sync.Pool{New: func() any { return &task{done: make(chan struct{}, 1)} }}

// New returns a Handler serving h on at most max reused goroutines, each
// ending after idle without a request (0: DefaultIdle).
func New(h http.Handler, max int, idle time.Duration) *Handler {
	if idle <= 0 {
		idle = DefaultIdle
	}
	return &Handler{h: h, max: int32(max), idle: idle, work: make(chan *task)}
}

// Workers returns the number of worker goroutines running.
func (p *Handler) Workers() int { return int(p.n.Load()) }

// ServeHTTP serves r with the handler, on a worker when r is HTTP/2. A
// panic in the handler is raised again on r's own goroutine, where
// net/http recovers it as it would without the Handler: the same value
// for [http.ErrAbortHandler], else its text with the handler's stack.
func (p *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor < 2 {
		p.h.ServeHTTP(w, r)
		return
	}
	t := tasks.Get().(*task)
	t.w, t.r = w, r
	select {
	case p.work <- t: // an idle worker took it
	default:
		if p.n.Add(1) > p.max {
			p.n.Add(-1)
			t.w, t.r = nil, nil
			tasks.Put(t)
			p.h.ServeHTTP(w, r)
			return
		}
		go p.worker(t)
	}
	<-t.done
	v := t.panic
	*t = task{done: t.done}
	tasks.Put(t)
	if v != nil {
		panic(v)
	}
}

// worker serves t and then every task it receives, until it has waited
// idle for one.
func (p *Handler) worker(t *task) {
	defer p.n.Add(-1)
	timer := time.NewTimer(p.idle)
	defer timer.Stop()
	for {
		p.serve(t)
		timer.Reset(p.idle)
		select {
		case t = <-p.work:
		case <-timer.C:
			return
		}
	}
}

// serve runs the handler for t and signals its end, recording a panic.
func (p *Handler) serve(t *task) {
	defer func() {
		if v := recover(); v != nil {
			t.panic = v
			if v != http.ErrAbortHandler { // which net/http does not log
				// net/http logs the stack of the goroutine it recovers
				// the panic on: keep the handler's.
				t.panic = fmt.Sprintf("%v\n\nthe handler's goroutine (h2work worker):\n%s", v, debug.Stack())
			}
		}
		t.done <- struct{}{}
	}()
	p.h.ServeHTTP(t.w, t.r)
}
