package client

import (
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/rlcluster/rlcluster/internal/ratelimitheader"
)

// KeyFunc returns the key a request counts under, for example the user
// behind it or its client address. An empty key exempts the request.
type KeyFunc func(r *http.Request) string

// MiddlewareOption configures [Middleware].
type MiddlewareOption func(*middleware)

// WithLegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (seconds) to the draft's headers.
func WithLegacyHeaders() MiddlewareOption { return func(m *middleware) { m.legacy = true } }

// WithPolicyName names the policy in the RateLimit headers; default the
// rule's name, or "default" for an inline limit.
func WithPolicyName(name string) MiddlewareOption { return func(m *middleware) { m.name = name } }

// WithDeniedHandler serves denied requests instead of the default plain
// "rate limited" 429. The RateLimit and Retry-After headers are already set
// when it runs; it writes the status.
func WithDeniedHandler(h http.Handler) MiddlewareOption {
	return func(m *middleware) { m.denied = h }
}

// WithErrorHandler serves requests whose check failed with an error (with
// [FailError], or for bad input such as an over-long key), instead of the
// default: 503 when the node is unavailable, else 500.
func WithErrorHandler(f func(w http.ResponseWriter, r *http.Request, err error)) MiddlewareOption {
	return func(m *middleware) { m.onError = f }
}

type middleware struct {
	c       *Client
	key     KeyFunc
	p       Policy
	name    string
	legacy  bool
	denied  http.Handler
	onError func(http.ResponseWriter, *http.Request, error)
}

// Middleware returns net/http middleware that spends one hit of p for
// key(r) on every request. Allowed requests reach the next handler with
// RateLimit-Policy and RateLimit set on the response; denied ones get 429
// with RateLimit-Policy, RateLimit and Retry-After, the headers rlnode's
// /check endpoint sends (RateLimit-Policy omits w for a [Rule], whose window
// the client does not know). Its checks ask the node for the decision
// alone, without stats, whatever the client's options.
//
// When the node cannot decide, the client's [FailureMode] applies: FailOpen
// lets the request through without RateLimit headers, FailClosed answers
// 503 "rate limiter unavailable", and FailError calls the error handler.
func Middleware(c *Client, key KeyFunc, p Policy, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	m := &middleware{c: c, key: key, p: p, onError: defaultOnError}
	if p != nil {
		m.name = p.name()
	}
	m.denied = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintln(w, "rate limited")
	})
	for _, o := range opts {
		o(m)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k := m.key(r)
			if k == "" {
				next.ServeHTTP(w, r)
				return
			}
			// The headers need the decision alone: no stats.
			d, err := m.c.checkN(r.Context(), k, 1, m.p, true)
			switch {
			case err != nil:
				m.onError(w, r, err)
				return
			case d.Fallback && d.Allowed:
				next.ServeHTTP(w, r)
				return
			case d.Fallback:
				http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
				return
			}
			ratelimitheader.Set(w.Header(), ratelimitheader.Values{
				Policy:     m.name,
				Allowed:    d.Allowed,
				Limit:      d.Limit,
				Window:     m.p.window(),
				Remaining:  d.Remaining,
				ResetAfter: d.ResetAfter,
				RetryAfter: d.RetryAfter,
			}, m.legacy)
			if !d.Allowed {
				m.denied.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func defaultOnError(w http.ResponseWriter, _ *http.Request, err error) {
	if c := connect.CodeOf(err); c == connect.CodeUnavailable || c == connect.CodeDeadlineExceeded {
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		return
	}
	http.Error(w, "rate limit check failed", http.StatusInternalServerError)
}
