package api

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
)

// The Connect protocol's unary POST is the API's most common call and the
// simplest: a JSON body in, a JSON body out, or protobuf (connect-go's
// default codec, and so the Go client's). serveFast answers the plain ones
// of Check, CheckBatch and Peek without Connect's per-call machinery
// (connection wrappers, header maps, compression negotiation), through the
// same Server methods, codecs and error writer. Anything else (another
// protocol or codec, compressed bodies, timeouts, interceptors configured,
// a body over the limit, not in the plain JSON shape or not protobuf) goes
// to Connect.
// Responses are never compressed, which HTTP and the Connect protocol
// allow whatever the client accepts. BenchmarkJSONServing compares the
// three ways of serving a Check (docs/performance.md has the figures).

var fastBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// checkOuts holds the answers of Checks that serveFast served, for the
// next ones.
var checkOuts = sync.Pool{New: func() any { return new(checkOut) }}

const (
	pathCheck      = "/" + ratelimitv1connect.RateLimitServiceName + "/Check"
	pathCheckBatch = "/" + ratelimitv1connect.RateLimitServiceName + "/CheckBatch"
	pathPeek       = "/" + ratelimitv1connect.RateLimitServiceName + "/Peek"
)

// serveFast serves r when it is a plain Connect unary JSON or protobuf call
// and reports whether it did; when it did not, r is as it came (its body
// restored).
func (s *Server) serveFast(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost || s.errWriter == nil {
		return false
	}
	path := r.URL.Path
	if path != pathCheck && path != pathCheckBatch && path != pathPeek {
		return false
	}
	h := r.Header
	ct := header(h, "Content-Type")
	binary := ct == ctProto[0]
	if !binary && ct != "application/json" && ct != "application/json; charset=utf-8" {
		return false
	}
	if header(h, "Content-Encoding") != "" || header(h, "Connect-Timeout-Ms") != "" {
		return false
	}
	if v := header(h, "Connect-Protocol-Version"); v != "" && v != "1" {
		return false
	}
	limit := s.reads.check
	if path == pathCheckBatch {
		limit = s.reads.batch
	}
	if r.ContentLength > int64(limit) {
		return false
	}
	bp := fastBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 64<<10 { // big batches' buffers are not kept
			fastBufs.Put(bp)
		}
	}()
	if n := int(r.ContentLength); n > cap(*bp) {
		// One buffer of the declared size rather than doublings up to it.
		*bp = make([]byte, 0, n+1)
	}
	body, err := readAtMost((*bp)[:0], r.Body, limit)
	*bp = body[:0]
	if err != nil || len(body) > limit {
		// Let Connect read the rest and report what is wrong.
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(bytes.Clone(body)), r.Body))
		return false
	}
	// Read to its end: closed now, the body is one net/http's server need
	// not drain (an allocation and a read) after the handler returns.
	_ = r.Body.Close()
	ctx := r.Context()
	var msg any
	var callErr error
	// Each arm calls its method directly: through one generic helper that
	// takes the method as a func value, the request and its
	// connect.Request would escape to the heap.
	switch path {
	case pathCheck:
		in := &ratelimitv1.CheckRequest{}
		if !s.decodeBody(binary, body, in) {
			break
		}
		// The answer is written before serveFast returns, so its
		// messages go back to the pool then.
		out := checkOuts.Get().(*checkOut)
		defer func() {
			out.reset()
			checkOuts.Put(out)
		}()
		start := time.Now()
		if callErr = s.check(ctx, in, out); callErr == nil {
			msg = out.resp.Msg
		}
		s.dec.Observe("Check", start)
	case pathCheckBatch:
		in := &ratelimitv1.CheckBatchRequest{}
		// A protobuf batch past the limit keeps one check more, for
		// CheckBatch to refuse, as on Connect's path; the JSON decoder
		// stops at it.
		var ok, over bool
		if binary {
			ok = s.decodeBody(true, body, in)
		} else {
			ok, over = decodeFastMax(body, in, s.cfg.MaxBatch)
		}
		if over {
			callErr = tooManyChecks(s.cfg.MaxBatch)
			break
		}
		if !ok {
			break
		}
		resp, err := s.CheckBatch(ctx, connect.NewRequest(in))
		msg, callErr = respMsg(resp, err)
	case pathPeek:
		in := &ratelimitv1.PeekRequest{}
		if !s.decodeBody(binary, body, in) {
			break
		}
		resp, err := s.Peek(ctx, connect.NewRequest(in))
		msg, callErr = respMsg(resp, err)
	}
	if msg == nil && callErr == nil {
		r.Body = io.NopCloser(bytes.NewReader(bytes.Clone(body)))
		return false
	}
	if callErr != nil {
		_ = s.errWriter.Write(w, r, callErr)
		return true
	}
	var out []byte
	if binary {
		out, err = protoCodec{}.MarshalAppend(body[:0], msg)
	} else {
		out, err = jsonCodec{name: "json"}.MarshalAppend(body[:0], msg)
	}
	if err != nil {
		_ = s.errWriter.Write(w, r, connect.NewError(connect.CodeInternal, err))
		return true
	}
	*bp = out[:0]
	wh := w.Header()
	switch ct {
	case ctJSON[0]:
		wh["Content-Type"] = ctJSON // shared: net/http copies the header it writes
	case ctProto[0]:
		wh["Content-Type"] = ctProto
	default:
		wh["Content-Type"] = []string{ct}
	}
	if len(out) > directContentLength {
		wh["Content-Length"] = []string{strconv.Itoa(len(out))}
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	return true
}

// header returns h's first value of key, as h.Get does for a key in its
// canonical form, as key must be: the server's request headers are
// canonical already, and h.Get would check key's form on every call.
func header(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ctJSON and ctProto are the usual Content-Types' header values.
var (
	ctJSON  = []string{"application/json"}
	ctProto = []string{"application/proto"}
)

// decodeBody decodes body into m, a request message: protobuf when binary
// is set, with the same bounds as Connect's codec, else JSON in the plain
// shape decodeFast takes. It reports whether it did; a body it did not
// decode goes to Connect, which tells the caller what is wrong.
func (s *Server) decodeBody(binary bool, body []byte, m proto.Message) bool {
	if binary {
		return s.lim.unmarshalProto(body, m) == nil
	}
	return decodeFast(body, m)
}

// directContentLength is the longest body serveFast leaves net/http to
// give its Content-Length: a handler that returns having written at most
// its buffer's 2,048 bytes gets one computed, without an allocation. A
// longer body gets it set here, rather than be sent chunked.
const directContentLength = 2048

// respMsg returns a response's message, or the error.
func respMsg[T any](resp *connect.Response[T], err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// readAtMost appends r's contents to b, reading at most limit+1 bytes
// (bounding the reads itself: an io.LimitReader would be an allocation).
func readAtMost(b []byte, r io.Reader, limit int) ([]byte, error) {
	end := len(b) + limit + 1
	for len(b) < end {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):min(cap(b), end)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}
