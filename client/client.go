// Package client is rlcluster's Go client: typed Check and Peek calls to an
// rlnode over its Connect API, with retries, a timeout and a choice of what
// to answer when the node cannot be reached; net/http middleware that
// rate-limits a handler with the same response headers as rlnode's /check
// endpoint; and limiters that admit a leasable rule's key in the process,
// on quota leases from the node ([Client.Limiter]).
//
//	c, err := client.New("http://rlnode:8080", client.WithFailureMode(client.FailOpen))
//	d, err := c.Check(ctx, "alice", client.Rule("api-per-user"))
//	if err == nil && !d.Allowed { /* wait d.RetryAfter, or use c.Wait */ }
//
// A denial is a decision, not an error. Errors carry Connect codes
// (connect.CodeOf(err)): invalid_argument for bad input such as an empty
// key or an unknown rule, unavailable when the node or its store is down.
package client

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
)

// Defaults for the options.
const (
	DefaultTimeout = time.Second
	DefaultBackoff = 10 * time.Millisecond
	// maxBackoffFactor caps a retry's backoff at 32 times the first.
	maxBackoffFactor = 32
)

// FailureMode says what Check and Peek answer when the node cannot be
// reached or cannot decide (a dial error, the node's store down, or the
// client's timeout), after retries.
type FailureMode int

const (
	// FailError returns the error (the default).
	FailError FailureMode = iota
	// FailOpen answers allowed, with Decision.Fallback set and a nil error.
	FailOpen
	// FailClosed answers denied, with Decision.Fallback set and a nil
	// error.
	FailClosed
)

// Algorithm selects how an inline [Limit] counts hits.
type Algorithm int

// Algorithms, as in ratelimit.v1.Algorithm.
const (
	SlidingWindow          Algorithm = iota // the default: half-buckets weighted over their hits' span
	FixedWindow                             // cur + hits <= limit per epoch-aligned window
	TokenBucket                             // GCRA, limit tokens per window; region-local
	SlidingLog                              // exact, one timestamp per hit; region-local
	SlidingWindowTwoBucket                  // the classic cur + floor(prev * (W-e)/W)
)

// Scope says whose hits an inline [Limit] counts.
type Scope int

// Scopes, as in ratelimit.v1.Scope.
const (
	// ScopeGlobal, the default, is one limit for the whole cluster: every
	// region's hits count. Only SlidingWindow and FixedWindow replicate, so
	// in a cluster of more than one region the node refuses TokenBucket
	// and SlidingLog with ScopeGlobal (invalid_argument naming
	// limit.scope).
	ScopeGlobal Scope = iota
	// ScopeRegion is one limit per region: only the deciding region's hits
	// count, and nothing is replicated. Any algorithm may be region-scoped.
	ScopeRegion
)

// Policy is what a check counts against: a named [Rule] from the node's
// rules file, or an inline [Limit].
type Policy interface {
	// policy fills the request's rule or limit.
	policy() (rule string, limit *ratelimitv1.Limit)
	// name is the policy's name in the RateLimit headers.
	name() string
	// window is the limit's window, 0 when the client does not know it.
	window() time.Duration
}

// Rule names a rule configured on the node.
type Rule string

func (r Rule) policy() (string, *ratelimitv1.Limit) { return string(r), nil }
func (r Rule) name() string                         { return string(r) }
func (r Rule) window() time.Duration                { return 0 }

// Limit is an inline limit: at most Limit hits per Window. The node
// validates it (Limit from 1 to 2^53, Window from 1s to 7 days in whole
// milliseconds).
type Limit struct {
	Limit     uint64
	Window    time.Duration
	Algorithm Algorithm
	Scope     Scope
	// Strict, with SlidingWindow, never admits more than the limit in any
	// trailing window in one region, at the price of capacity left unused
	// after bursts.
	Strict bool
	// Burst, with TokenBucket, is the bucket's capacity: the most hits it
	// admits at once (0: Limit; at most 1000 times Limit).
	Burst uint64
}

func (l Limit) policy() (string, *ratelimitv1.Limit) {
	return "", &ratelimitv1.Limit{
		Limit:     l.Limit,
		Window:    durationpb.New(l.Window),
		Algorithm: ratelimitv1.Algorithm(l.Algorithm + 1),
		Scope:     ratelimitv1.Scope(l.Scope + 1),
		Strict:    l.Strict,
		Burst:     l.Burst,
	}
}
func (l Limit) name() string          { return "default" }
func (l Limit) window() time.Duration { return l.Window }

// Decision is the node's answer to a check.
type Decision struct {
	// Allowed reports whether the hits were admitted (and, for Check,
	// consumed).
	Allowed bool
	// Limit is the limit that applied.
	Limit uint64
	// Remaining is how many more hits would be admitted now.
	Remaining uint64
	// ResetAfter is how long until the full limit is available again with
	// no further traffic.
	ResetAfter time.Duration
	// RetryAfter is how long until the same request would be admitted with
	// no other traffic; 0 when allowed.
	RetryAfter time.Duration
	// Shadow reports that the request would have been denied but shadow
	// mode answered allowed; nothing was consumed and RetryAfter says when
	// it would have been allowed.
	Shadow bool
	// Scope is the scope that applied: ScopeRegion when only this region's
	// hits counted (ScopeGlobal for a fallback decision).
	Scope Scope
	// Stats are the numbers behind the decision, as the node reported
	// them; zero for a fallback decision.
	Stats Stats
	// Fallback reports that the node could not decide and Allowed is the
	// [FailureMode]'s answer; the other numbers are zero and Err says why.
	Fallback bool
	// Err is the failure behind a fallback decision.
	Err error
}

// Stats are the numbers behind a decision. For the counter algorithms the
// node decided on
//
//	Estimate = Whole + sum over Terms of floor(N * Num / Den)
//
// and allowed the request iff Estimate + hits <= Limit; [Stats.Recompute]
// does the sum. Estimate is the count before the request and Current the
// count after it, so a first admitted hit shows Estimate 0 and Current 1.
// A Peek consumes nothing: its Current is the count already spent. What
// Whole and the terms are per algorithm is documented on the proto's
// WindowStats: for the sliding window, Whole is the current bucket's count
// before the request, and each region gives one term, the hits of its
// previous bucket's marks still in the window (RegionCount.PreviousMarks),
// with a weight of 1. Token bucket and sliding log fill what applies to
// them.
type Stats struct {
	// Bucket is the current bucket's index, floor(unix time / window).
	Bucket int64
	// ElapsedMs is the time elapsed in the current bucket, in ms.
	ElapsedMs int64
	// Current is the sum over regions of the current bucket's counts,
	// after this request (for Peek, the count already spent).
	Current uint64
	// Previous is the sum over regions of the previous bucket's counts.
	Previous uint64
	// PreviousWeight is, for display, the share of the weighted hits still
	// counted: the terms' sum over their counts ((W - e) / W for the
	// two-bucket counter).
	PreviousWeight float64
	// Estimate is the count the decision was made on, before this request.
	Estimate uint64
	// Whole is the part of Estimate counted whole.
	Whole uint64
	// Terms are the weighted parts of Estimate.
	Terms []Term
	// Regions are the counts per region, in the node's order.
	Regions []RegionCount
}

// Term is a weighted part of an estimate: floor(N * Num / Den) of N hits.
type Term struct {
	N, Num, Den uint64
}

// Recompute returns Whole plus the sum of the terms, computed exactly: the
// node's Estimate for a counter algorithm. It saturates at the maximum
// uint64.
func (s Stats) Recompute() uint64 {
	est := s.Whole
	for _, t := range s.Terms {
		if t.Den == 0 || t.Num == 0 {
			continue
		}
		hi, lo := bits.Mul64(t.N, t.Num)
		if hi >= t.Den {
			return ^uint64(0)
		}
		q, _ := bits.Div64(hi, lo, t.Den)
		if est+q < est {
			return ^uint64(0)
		}
		est += q
	}
	return est
}

// Mark is some of one region's hits in one bucket, for the sliding window:
// Count hits, the last of them at AtMs, ms from the start of the bucket.
type Mark struct {
	AtMs  int64
	Count uint64
}

// RegionCount is one region's share of a decision's counts.
type RegionCount struct {
	// Region is the region's name; a node deciding from its in-memory
	// fallback while Redis is down counts under "<region>~<id>".
	Region string
	// Current and Previous are the region's counts in the current and the
	// previous bucket.
	Current, Previous uint64
	// Age is how old the newest total merged from this region is, by the
	// sender's clock: it grows while the region sends nothing new. Zero for
	// the local region and for regions never heard from (HasAge false).
	Age time.Duration
	// HasAge reports whether the node reported an age for this region.
	HasAge bool
	// PreviousMarks are the marks of the region's trail of the previous
	// bucket that still count, those after ElapsedMs, as the sliding
	// window decided on them (empty for the other algorithms): a mark's
	// hits count while its last one is in the window.
	PreviousMarks []Mark
}

// decision converts the node's answer.
func decision(resp *ratelimitv1.CheckResponse) Decision {
	d := Decision{
		Allowed:    resp.GetAllowed(),
		Limit:      resp.GetLimit(),
		Remaining:  resp.GetRemaining(),
		ResetAfter: resp.GetResetAfter().AsDuration(),
		RetryAfter: resp.GetRetryAfter().AsDuration(),
		Shadow:     resp.GetShadow(),
	}
	if resp.GetScope() == ratelimitv1.Scope_SCOPE_REGION {
		d.Scope = ScopeRegion
	}
	if st := resp.GetStats(); st != nil {
		d.Stats = Stats{
			Bucket:         st.GetBucket(),
			ElapsedMs:      st.GetElapsedMs(),
			Current:        st.GetCurrent(),
			Previous:       st.GetPrevious(),
			PreviousWeight: st.GetPreviousWeight(),
			Estimate:       st.GetEstimate(),
			Whole:          st.GetWhole(),
		}
		for _, t := range st.GetTerms() {
			d.Stats.Terms = append(d.Stats.Terms, Term{N: t.GetCount(), Num: t.GetNumerator(), Den: t.GetDenominator()})
		}
		if rs := st.GetRegions(); len(rs) > 0 {
			d.Stats.Regions = make([]RegionCount, len(rs))
			for i, r := range rs {
				d.Stats.Regions[i] = RegionCount{
					Region:        r.GetRegion(),
					Current:       r.GetCurrent(),
					Previous:      r.GetPrevious(),
					Age:           r.GetAge().AsDuration(),
					HasAge:        r.GetAge() != nil,
					PreviousMarks: marks(r.GetPreviousMarks()),
				}
			}
		}
	}
	return d
}

func marks(ms []*ratelimitv1.Mark) []Mark {
	if len(ms) == 0 {
		return nil
	}
	out := make([]Mark, len(ms))
	for i, m := range ms {
		out[i] = Mark{AtMs: m.GetAtMs(), Count: m.GetCount()}
	}
	return out
}

// Option configures a [Client].
type Option func(*options)

type options struct {
	httpClient    connect.HTTPClient
	timeout       time.Duration
	retries       int
	backoff       time.Duration
	mode          FailureMode
	connectOpts   []connect.ClientOption
	noStats       bool
	leaseInterval time.Duration
}

// WithHTTPClient sets the HTTP client; default http.DefaultClient. gRPC
// ([WithGRPC]) over plaintext needs one whose transport speaks h2c.
func WithHTTPClient(c connect.HTTPClient) Option { return func(o *options) { o.httpClient = c } }

// WithTimeout bounds each Check or Peek, retries included; default 1s.
// Zero or less means only the caller's context bounds it.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithRetries sets how many times a call is retried (default 0) and the
// first backoff (default 10ms; it doubles on each retry, up to 32 times the
// first, with full jitter).
//
// Check consumes hits, so it is retried only when the request surely never
// reached the node: a failure to connect (dial error). Peek has no side
// effects and is also retried when the node answers unavailable.
func WithRetries(n int, backoff time.Duration) Option {
	return func(o *options) { o.retries, o.backoff = n, backoff }
}

// WithFailureMode sets what a call answers when the node cannot decide;
// default [FailError].
func WithFailureMode(m FailureMode) Option { return func(o *options) { o.mode = m } }

// WithoutStats asks the node to leave the stats out of every answer, so
// that [Decision.Stats] is zero: a key in steady use answers with every
// region's marks that still count, kilobytes a decision that a caller
// reading only Allowed and the durations has no use for.
func WithoutStats() Option { return func(o *options) { o.noStats = true } }

// WithGRPC speaks gRPC instead of the Connect protocol.
func WithGRPC() Option {
	return func(o *options) { o.connectOpts = append(o.connectOpts, connect.WithGRPC()) }
}

// WithConnectOptions adds Connect client options, for example interceptors
// that add credentials.
func WithConnectOptions(opts ...connect.ClientOption) Option {
	return func(o *options) { o.connectOpts = append(o.connectOpts, opts...) }
}

// Client calls one rlnode (or a load balancer in front of a region's
// rlnodes). It is safe for concurrent use.
type Client struct {
	rpc     ratelimitv1connect.RateLimitServiceClient
	opts    options
	baseURL string
	leases  leases
}

// New returns a client for the node at baseURL (for example
// "http://127.0.0.1:8080").
func New(baseURL string, opts ...Option) (*Client, error) {
	o := options{httpClient: http.DefaultClient, timeout: DefaultTimeout, backoff: DefaultBackoff, leaseInterval: DefaultLeaseInterval}
	for _, opt := range opts {
		opt(&o)
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http:// or https:// and a host", baseURL)
	}
	switch {
	case o.httpClient == nil:
		return nil, errors.New("client: WithHTTPClient: nil client")
	case o.retries < 0:
		return nil, fmt.Errorf("client: WithRetries: %d retries, want 0 or more", o.retries)
	case o.retries > 0 && o.backoff <= 0:
		return nil, fmt.Errorf("client: WithRetries: backoff %v, want more than 0", o.backoff)
	case o.mode < FailError || o.mode > FailClosed:
		return nil, fmt.Errorf("client: WithFailureMode: unknown mode %d", o.mode)
	case o.leaseInterval < 10*time.Millisecond || o.leaseInterval > time.Minute:
		return nil, fmt.Errorf("client: WithLeaseInterval: %v, want 10ms to 1m", o.leaseInterval)
	}
	return &Client{rpc: ratelimitv1connect.NewRateLimitServiceClient(o.httpClient, baseURL, o.connectOpts...), opts: o, baseURL: baseURL}, nil
}

// Check spends one hit of p for key; see [Client.CheckN].
func (c *Client) Check(ctx context.Context, key string, p Policy) (Decision, error) {
	return c.CheckN(ctx, key, 1, p)
}

// CheckN decides whether key may spend hits of p now and, when allowed,
// consumes them. A denial is a Decision with Allowed false, not an error.
// When the node cannot decide, the answer follows the [FailureMode].
func (c *Client) CheckN(ctx context.Context, key string, hits uint64, p Policy) (Decision, error) {
	return c.checkN(ctx, key, hits, p, c.opts.noStats)
}

// checkN is CheckN, asking for no stats when omit is set.
func (c *Client) checkN(ctx context.Context, key string, hits uint64, p Policy, omit bool) (Decision, error) {
	if p == nil {
		return Decision{}, errors.New("client: check: nil Policy")
	}
	rule, lim := p.policy()
	req := &ratelimitv1.CheckRequest{Key: key, Hits: hits, Rule: rule, Limit: lim, OmitStats: omit}
	return c.call(ctx, "check", false, func(ctx context.Context) (*ratelimitv1.CheckResponse, error) {
		resp, err := c.rpc.Check(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	})
}

// Peek answers as Check would for one hit, consuming nothing.
func (c *Client) Peek(ctx context.Context, key string, p Policy) (Decision, error) {
	if p == nil {
		return Decision{}, errors.New("client: peek: nil Policy")
	}
	rule, lim := p.policy()
	req := &ratelimitv1.PeekRequest{Key: key, Rule: rule, Limit: lim, OmitStats: c.opts.noStats}
	return c.call(ctx, "peek", true, func(ctx context.Context) (*ratelimitv1.CheckResponse, error) {
		resp, err := c.rpc.Peek(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetResponse(), nil
	})
}

// call runs do with the timeout, retries and failure mode. sideEffectFree
// calls are also retried when the node answers unavailable.
func (c *Client) call(ctx context.Context, what string, sideEffectFree bool, do func(context.Context) (*ratelimitv1.CheckResponse, error)) (Decision, error) {
	callCtx := ctx
	if c.opts.timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, c.opts.timeout)
		defer cancel()
	}
	var err error
	for attempt := 0; ; attempt++ {
		var resp *ratelimitv1.CheckResponse
		if resp, err = do(callCtx); err == nil {
			return decision(resp), nil
		}
		if attempt >= c.opts.retries || !(notSent(err) || (sideEffectFree && connect.CodeOf(err) == connect.CodeUnavailable)) {
			break
		}
		if !sleep(callCtx, c.backoff(attempt)) {
			break
		}
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The caller gave up: no fallback.
		return Decision{}, fmt.Errorf("client: %s: %w", what, err)
	}
	if c.opts.mode != FailError && (notSent(err) || callCtx.Err() != nil || connect.CodeOf(err) == connect.CodeUnavailable) {
		return Decision{Allowed: c.opts.mode == FailOpen, Fallback: true, Err: err}, nil
	}
	return Decision{}, fmt.Errorf("client: %s: %w", what, err)
}

// backoff returns the wait before retry attempt+1: full jitter over
// backoff * 2^attempt, capped.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.opts.backoff << min(attempt, 5)
	d = min(d, c.opts.backoff*maxBackoffFactor)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// sleep waits d or until ctx is done, and reports whether it waited d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// notSent reports whether err shows that the request never reached the
// node: it failed while connecting.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
