package api

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/semaphore"
)

// A request of up to a megabyte takes a few times its size while it is
// decoded and decided (its keys, their namespaced copies, the answer), so
// a few dozen large batches at once, over as many connections or streams,
// would take hundreds of megabytes. Requests larger than largeRequestBytes
// therefore share a budget of bytes in flight (Config.MaxRequestMemory):
// each takes its size from it before it is read and gives it back when it
// has been answered, waiting its turn (first come, first served) for at
// most budgetWait; one that cannot get it in time is refused with
// resource_exhausted. A request on an HTTP/2 connection does not wait: its
// unread body would hold back the connection's other streams (they share
// the connection's flow-control window), so it is refused at once when
// the budget is spent; a client that sends large batches over HTTP/2
// retries them. Smaller requests (a Check, Envoy's usual calls) do
// not wait: the bytes each endpoint reads bound them.

// largeRequestBytes is the size from which a request takes its size from
// the budget.
const largeRequestBytes = 64 << 10

// budgetWait is the longest a large request waits for the budget.
const budgetWait = 5 * time.Second

// requestBudget is the budget of bytes large requests hold in flight.
// Safe for concurrent use.
type requestBudget struct {
	sem     *semaphore.Weighted
	size    int64
	refused atomic.Uint64
}

func newRequestBudget(size int64) *requestBudget {
	return &requestBudget{sem: semaphore.NewWeighted(size), size: size}
}

var errBudget = connect.NewError(connect.CodeResourceExhausted,
	errors.New("too many large requests in flight on this node: retry later, or send smaller batches"))

// acquire takes n bytes (at most the whole budget) for a request of n
// bytes, waiting at most budgetWait or until ctx is done; the returned
// func gives them back. Requests under largeRequestBytes take nothing.
// With wait false, it does not wait: the budget is there or the request
// is refused.
func (b *requestBudget) acquire(ctx context.Context, n int64, wait bool) (release func(), err error) {
	if n < largeRequestBytes {
		return func() {}, nil
	}
	n = min(n, b.size)
	if !wait {
		if !b.sem.TryAcquire(n) {
			b.refused.Add(1)
			return nil, errBudget
		}
		return func() { b.sem.Release(n) }, nil
	}
	ctx, cancel := context.WithTimeout(ctx, budgetWait)
	defer cancel()
	if err := b.sem.Acquire(ctx, n); err != nil {
		b.refused.Add(1)
		return nil, errBudget
	}
	return func() { b.sem.Release(n) }, nil
}

// Refused returns how many large requests waited for the budget in vain.
func (b *requestBudget) Refused() uint64 { return b.refused.Load() }

// requestSize returns the size r's message declares, without reading more
// than a gRPC message's 5-byte prefix (which it puts back in r.Body), or
// limit when it declares none: a Connect unary request's Content-Length,
// a gRPC or gRPC-Web message's length prefix (limit when compressed).
func requestSize(r *http.Request, limit int64) int64 {
	ct := r.Header.Get("Content-Type")
	if !strings.HasPrefix(ct, "application/grpc") {
		if r.ContentLength >= 0 {
			return min(r.ContentLength, limit)
		}
		return limit
	}
	if strings.HasPrefix(ct, "application/grpc-web-text") {
		return limit // base64: not worth decoding here
	}
	var prefix [5]byte
	n, err := io.ReadFull(r.Body, prefix[:])
	r.Body = prefixedBody{io.MultiReader(bytes.NewReader(prefix[:n:n]), r.Body), r.Body}
	if err != nil || prefix[0]&1 != 0 { // short or compressed
		return limit
	}
	return min(int64(binary.BigEndian.Uint32(prefix[1:])), limit)
}

type prefixedBody struct {
	io.Reader
	io.Closer
}
