package region

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Coalesce configures how a [Redis] store gathers concurrent Check calls
// into shared pipelines. The zero value is on, with the defaults below.
//
// A Check that finds no round trip in flight leads a new batch: it yields
// the processor once (runtime.Gosched), again while yielding brings more
// calls, so that requests already read and ready to run join it, and then
// sends it. A lone request at low load is not delayed: its yield returns at
// once. Without the yield the leader would go alone, and the requests that
// came with it would wait a round trip for the next batch.
//
// While a round trip is in flight, later calls gather into the next batch,
// which is sent when the round trip in flight returns, when maxWait has
// passed since the batch's first call, or when it holds maxBatch requests,
// whichever comes first. Each batch is one
// round trip, its decisions one script call (see [Redis]); each call still
// gets its own results and its own error.
type Coalesce struct {
	// Disabled sends every Check as its own round trip.
	Disabled bool
}

const (
	// maxWait is the longest a call waits for others to join its batch
	// while a round trip is in flight. A batch normally goes when the
	// round trip in flight returns, well before; the bound only sends a
	// second round trip beside a slow one. A shorter bound splits batches
	// under load (docs/performance.md).
	maxWait = 2 * time.Millisecond
	// maxBatch is the most requests one gathered pipeline carries; a call
	// with at least this many requests is sent on its own.
	maxBatch = 64
)

// maxYields bounds how often a leading call yields for others to join its
// batch (see coalescer.check).
const maxYields = 8

// roundTripper is what a coalescer sends through: the [Redis] store, or a
// fake in tests.
type roundTripper interface {
	// checkDirect decides reqs in one round trip. Like go-redis, it may
	// outlast ctx's deadline (until the client's read timeout): a call
	// that must leave at a deadline does not run it inline.
	checkDirect(ctx context.Context, reqs []Request, res []Result) error
	// checkCalls decides the requests of every call in one round trip and
	// sends each call its own error on its done channel, after writing its
	// results.
	checkCalls(ctx context.Context, calls []*call)
}

// coalescer gathers Check calls into batches. No lock is held across I/O;
// each batch has at most two timers.
type coalescer struct {
	r        roundTripper
	gather   bool
	maxWait  time.Duration
	maxBatch int
	// timeout, when set, bounds each call's wait (see
	// [RedisConfig.CallTimeout]).
	timeout time.Duration

	// calls holds spare calls, per coalescer so that no call (and its
	// channel) outlives the coalescer's goroutines.
	calls sync.Pool

	mu       sync.Mutex
	inFlight int
	pending  *batch
	closed   bool
}

// batch is the calls gathered for one pipeline.
type batch struct {
	calls []*call
	n     int         // requests in calls
	timer *time.Timer // sends the batch at maxWait
	// expired is closed the coalescer's timeout after the batch opened;
	// nil without a timeout. One timer per batch bounds every call in it,
	// rather than a context (and its timer) per call.
	expired  chan struct{}
	deadline *time.Timer
}

// call is one Check waiting in a batch. The batch reads only the call's own
// copy of the requests and writes only its own results, which the caller
// copies out when the batch is done: a caller that leaves at its deadline
// shares nothing with the batch, which then owns the call.
type call struct {
	reqs []Request
	res  []Result
	done chan error
}

// newCoalescer returns a coalescer sending through r that bounds each
// call's wait at timeout (0: only the call's context bounds it); with
// cfg.Disabled it gathers nothing.
func newCoalescer(cfg Coalesce, timeout time.Duration, r roundTripper) *coalescer {
	c := &coalescer{r: r, gather: !cfg.Disabled, maxWait: maxWait, maxBatch: maxBatch, timeout: timeout}
	c.calls.New = func() any { return &call{done: make(chan error, 1)} }
	return c
}

// check decides reqs through a shared pipeline. When ctx ends, or the
// coalescer's timeout passes, first it returns at once (with ctx's error,
// or one wrapping [ErrTimeout]); the batch still runs the call (in doubt:
// its hits may count), and res is left alone.
func (c *coalescer) check(ctx context.Context, reqs []Request, res []Result) error {
	c.mu.Lock()
	if c.gather && !c.closed && len(reqs) < c.maxBatch && c.inFlight == 0 && c.pending == nil {
		// Lead a batch: open it and yield, so that the goroutines ready to
		// run reach it first (requests that arrived together then share
		// this round trip), again while yielding brings more; then send
		// it. On an idle node the first yield returns at once, with no one
		// joined, and the call goes alone.
		b := c.open()
		c.pending = b
		for range maxYields {
			n := len(b.calls)
			c.mu.Unlock()
			runtime.Gosched()
			c.mu.Lock()
			if c.pending != b || len(b.calls) == n {
				break
			}
		}
		if c.pending == b {
			if len(b.calls) == 0 && c.inline(ctx) {
				c.pending = nil
				c.inFlight++
				c.mu.Unlock()
				err := c.r.checkDirect(ctx, reqs, res)
				c.done()
				return err
			}
			cl := c.join(b, reqs)
			c.take()
			c.mu.Unlock()
			go c.send(b)
			return c.wait(ctx, b, cl, res)
		}
		// b went without this call (it filled up, or the coalescer closed).
	}
	if !c.gather || c.closed || len(reqs) >= c.maxBatch || (c.inFlight == 0 && c.pending == nil) {
		return c.alone(ctx, reqs, res)
	}
	b := c.pending
	if b == nil {
		b = c.open()
		c.pending = b
		b.timer = time.AfterFunc(c.maxWait, func() { c.fire(b) })
	}
	cl := c.join(b, reqs)
	var full *batch
	if b.n >= c.maxBatch {
		full = c.take()
	}
	c.mu.Unlock()
	if full != nil {
		go c.send(full)
	}
	return c.wait(ctx, b, cl, res)
}

// inline reports whether a call may run its own round trip inline: only
// when nothing bounds its wait, for the round trip may outlast ctx (see
// [roundTripper]).
func (c *coalescer) inline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return c.timeout == 0 && !ok
}

// alone sends reqs as a round trip of their own: inline when nothing
// bounds the call's wait, else as a batch of one on a goroutine. c.mu is
// held, and alone unlocks it.
func (c *coalescer) alone(ctx context.Context, reqs []Request, res []Result) error {
	c.inFlight++
	if c.inline(ctx) {
		c.mu.Unlock()
		err := c.r.checkDirect(ctx, reqs, res)
		c.done()
		return err
	}
	b := c.open()
	cl := c.join(b, reqs)
	c.mu.Unlock()
	go c.send(b)
	return c.wait(ctx, b, cl, res)
}

// open returns a new batch, whose timeout (if any) starts now.
func (c *coalescer) open() *batch {
	b := &batch{}
	if c.timeout > 0 {
		b.expired = make(chan struct{})
		b.deadline = time.AfterFunc(c.timeout, func() { close(b.expired) })
	}
	return b
}

// join adds a call for reqs to b. c.mu is held.
func (c *coalescer) join(b *batch, reqs []Request) *call {
	cl := c.calls.Get().(*call)
	cl.reqs = append(cl.reqs[:0], reqs...)
	cl.res = slices.Grow(cl.res[:0], len(reqs))[:len(reqs)]
	b.calls = append(b.calls, cl)
	b.n += len(reqs)
	return cl
}

// wait waits for cl's batch b to hand it its results, for ctx to end, or
// for b's timeout; an answer that is ready wins.
func (c *coalescer) wait(ctx context.Context, b *batch, cl *call, res []Result) error {
	var err error
	select {
	case err = <-cl.done:
	case <-ctx.Done():
		select {
		case err = <-cl.done:
		default:
			return fmt.Errorf("region: check: %w", ctx.Err())
		}
	case <-b.expired:
		select {
		case err = <-cl.done:
		default:
			return fmt.Errorf("region: check: %w after %v", ErrTimeout, c.timeout)
		}
	}
	if err == nil {
		copy(res, cl.res)
	}
	clear(cl.reqs) // drop the keys for the GC; the buffers are reused
	c.calls.Put(cl)
	return err
}

// take removes the pending batch and counts it in flight. c.mu is held.
func (c *coalescer) take() *batch {
	b := c.pending
	c.pending = nil
	if b.timer != nil {
		b.timer.Stop()
	}
	c.inFlight++
	return b
}

// fire sends b when its timer expires, unless it was sent already.
func (c *coalescer) fire(b *batch) {
	c.mu.Lock()
	if c.pending != b {
		c.mu.Unlock()
		return
	}
	c.take()
	c.mu.Unlock()
	c.send(b)
}

// done ends a round trip; when none is left in flight, the gathered batch
// goes at once rather than waiting for its timer.
func (c *coalescer) done() {
	c.mu.Lock()
	c.inFlight--
	var next *batch
	if c.inFlight == 0 && c.pending != nil {
		next = c.take()
	}
	c.mu.Unlock()
	if next != nil {
		go c.send(next)
	}
}

// send runs b as one round trip and hands each call its results. A caller
// that sends a batch does so on a goroutine of its own and then waits like
// the batch's other calls, so that it too leaves at its deadline.
func (c *coalescer) send(b *batch) {
	c.r.checkCalls(context.Background(), b.calls)
	if b.deadline != nil {
		b.deadline.Stop()
	}
	c.done()
}

// close makes later calls go directly; batches already gathered still go.
func (c *coalescer) close() {
	c.mu.Lock()
	c.closed = true
	var next *batch
	if c.pending != nil {
		next = c.take()
	}
	c.mu.Unlock()
	if next != nil {
		c.send(next)
	}
}
