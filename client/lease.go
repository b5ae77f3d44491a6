package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/api/rlqs/rlqsfilter"
)

// DefaultLeaseInterval is how often a client's leases report their use,
// unless [WithLeaseInterval] says otherwise.
const DefaultLeaseInterval = time.Second

// WithLeaseInterval sets how often the client's quota leases report
// their keys' use to the node (default [DefaultLeaseInterval]): the
// node sizes each key's next grant from it, and a grant lives about one
// interval and a half. Shorter intervals track demand faster and keep
// the admitted count closer to the limit, at a report each.
func WithLeaseInterval(d time.Duration) Option { return func(o *options) { o.leaseInterval = d } }

// Limiter admits requests of one key of a leasable rule in the process,
// against quota leases from the node: a token bucket the node grants for
// the key, sized to what the key is asked for and counted on the rule's
// counter before it is granted. Allow, Wait and Reserve cost no round
// trip while a grant holds; before the first grant, after one runs out,
// or for a rule the node will not lease, Allow and Wait decide with
// [Client.Check] instead. They behave as golang.org/x/time/rate's
// methods of the same names, for one event at a time.
//
// The node counts a lease's tokens before the client takes them, so the
// requests admitted in a window may pass the limit by up to about what
// the key's grants hand out in a reporting interval (see the README's
// quota leases).
type Limiter struct {
	c         *Client
	rule, key string
	h         *rlqsfilter.Bucket
	// unleased is when the key was first found without a grant since it
	// last had one (Unix ns, 0 while it has one), checkOnly until when
	// Allow decides with Check alone: a key the node will not lease
	// (abandoned) would otherwise subscribe again with every request.
	unleased, checkOnly atomic.Int64
}

// leases is a client's one stream of leases, started by its first
// Limiter.
type leases struct {
	once   sync.Once
	f      *rlqsfilter.Filter
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

// Limiter returns the limiter of key under rule, which must be a rule of
// the node's marked leasable (else the limiter decides every request
// with Check). Limiters of one client share one stream to the node,
// opened by the first.
func (c *Client) Limiter(rule, key string) (*Limiter, error) {
	if rule == "" || key == "" {
		return nil, errors.New("client: Limiter: rule and key are required")
	}
	l := &c.leases
	l.once.Do(func() {
		var f *rlqsfilter.Filter
		f, l.err = rlqsfilter.New(rlqsfilter.Config{
			ReportingInterval: c.opts.leaseInterval,
			// Without a grant, the filter denies and the limiter asks
			// Check (see Allow).
			NoAssignment: rlqsfilter.DenyAll(),
		})
		if l.err != nil {
			return
		}
		var rpc ratelimitv1connect.RateLimitServiceClient
		if rpc, l.err = c.streamRPC(); l.err != nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		l.f, l.cancel, l.done = f, cancel, make(chan struct{})
		go func() {
			defer close(l.done)
			_ = f.Run(ctx, leaseConn{rpc})
		}()
	})
	if l.err != nil {
		return nil, fmt.Errorf("client: Limiter: %w", l.err)
	}
	return &Limiter{c: c, rule: rule, key: key, h: l.f.Bucket(map[string]string{"rule": rule, "key": key})}, nil
}

// Close ends the client's lease stream, if a Limiter opened one; its
// limiters then decide with Check.
func (c *Client) Close() error {
	if l := &c.leases; l.cancel != nil {
		l.cancel()
		<-l.done
	}
	return nil
}

// streamRPC returns the client of the Lease stream: the client's own
// when it was given an HTTP client, else one over HTTP/2 (h2c for
// http://), which a bidirectional stream needs.
func (c *Client) streamRPC() (ratelimitv1connect.RateLimitServiceClient, error) {
	if c.opts.httpClient != http.DefaultClient {
		return c.rpc, nil
	}
	u, err := url.Parse(c.baseURL)
	if err != nil {
		return nil, err
	}
	var p http.Protocols
	if u.Scheme == "http" {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP2(true)
	}
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	return ratelimitv1connect.NewRateLimitServiceClient(hc, c.baseURL, c.opts.connectOpts...), nil
}

// leased reports whether the key's grant holds now (a token bucket or
// deny-all, unexpired): a refusal of the filter is then the grant's.
func (l *Limiter) leased() bool {
	st, ok := l.c.leases.f.State(map[string]string{"rule": l.rule, "key": l.key})
	return ok && st.Phase == rlqsfilter.PhaseActive
}

// Allow reports whether one request may happen now: from the key's grant
// when one holds, else from [Client.Check] (a round trip, bounded by the
// client's timeout; a failure answers as the client's failure mode
// does, denied for FailError). A key without a grant for three reporting
// intervals (a rule the node will not lease) is decided with Check alone
// for a minute before it asks for a grant again.
func (l *Limiter) Allow() bool {
	now := time.Now().UnixNano()
	if now >= l.checkOnly.Load() {
		if l.h.Allow() {
			l.unleased.Store(0)
			return true
		}
		if l.leased() {
			l.unleased.Store(0)
			return false
		}
		if first := l.unleased.Load(); first == 0 {
			l.unleased.CompareAndSwap(0, now)
		} else if now-first > 3*int64(l.c.opts.leaseInterval) {
			l.checkOnly.Store(now + int64(time.Minute))
			l.unleased.Store(0)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(l.c.opts.timeout, time.Millisecond))
	defer cancel()
	d, err := l.c.Check(ctx, l.key, Rule(l.rule))
	return err == nil && d.Allowed
}

// Wait blocks until one request may happen, or ctx is done (its error
// then). While a grant holds it waits for the grant's next token; else
// it asks Check, and waits its retry_after between asks.
func (l *Limiter) Wait(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d, ok, cancel := l.h.Reserve(); ok {
			if d == 0 {
				return nil
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				t.Stop()
				cancel()
				return ctx.Err()
			}
		}
		if l.leased() {
			// A grant that denies all, or whose tokens fill after it
			// runs out: ask again after a fill's time or so.
			if !sleep(ctx, 10*time.Millisecond) {
				return ctx.Err()
			}
			continue
		}
		d, err := l.c.Check(ctx, l.key, Rule(l.rule))
		switch {
		case err != nil:
			return err
		case d.Allowed:
			return nil
		}
		if !sleep(ctx, max(d.RetryAfter, time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// Reservation is a request's place in the key's grant, as
// golang.org/x/time/rate's is: act after Delay, or Cancel.
type Reservation struct {
	ok     bool
	at     time.Time
	cancel func()
}

// OK reports whether the reservation holds a token; without one (no
// grant, or none whose tokens fill before it runs out), decide with
// Allow or Wait.
func (r *Reservation) OK() bool { return r.ok }

// Delay is how long to wait before acting.
func (r *Reservation) Delay() time.Duration { return max(time.Until(r.at), 0) }

// Cancel gives the token back, if its time has not come.
func (r *Reservation) Cancel() {
	if r.cancel != nil {
		r.cancel()
	}
}

// Reserve takes a token of the key's grant for one request, now or ahead
// of its fill. It never makes a round trip: without a grant that fills
// the token before it runs out, the reservation is not OK.
func (l *Limiter) Reserve() *Reservation {
	d, ok, cancel := l.h.Reserve()
	return &Reservation{ok: ok, at: time.Now().Add(d), cancel: cancel}
}

// leaseConn carries the filter's reports of the rate limit quota service
// over ratelimit.v1's Lease stream: a bucket is a key of a rule.
type leaseConn struct {
	rpc ratelimitv1connect.RateLimitServiceClient
}

func (c leaseConn) StreamRateLimitQuotas(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse], error) {
	st := c.rpc.Lease(ctx)
	// Connect opens the stream with the first message; headers now make
	// a node that cannot be reached fail here, as a dial would.
	if err := st.Send(nil); err != nil {
		return nil, err
	}
	// A Receive blocked on an HTTP/2 body that the node keeps open does
	// not always see ctx end: closing the response ends it.
	go func() {
		<-ctx.Done()
		_ = st.CloseRequest()
		_ = st.CloseResponse()
	}()
	return &leaseStream{ctx: ctx, st: st}, nil
}

type leaseStream struct {
	grpc.ClientStream
	ctx context.Context
	st  *connect.BidiStreamForClient[ratelimitv1.LeaseRequest, ratelimitv1.LeaseResponse]
}

func (s *leaseStream) Send(m *rlqsv3.RateLimitQuotaUsageReports) error {
	out := &ratelimitv1.LeaseRequest{Usages: make([]*ratelimitv1.LeaseUsage, len(m.GetBucketQuotaUsages()))}
	for i, u := range m.GetBucketQuotaUsages() {
		id := u.GetBucketId().GetBucket()
		out.Usages[i] = &ratelimitv1.LeaseUsage{Rule: id["rule"], Key: id["key"], Elapsed: u.GetTimeElapsed(), Allowed: u.GetNumRequestsAllowed(), Denied: u.GetNumRequestsDenied()}
	}
	return s.st.Send(out)
}

func (s *leaseStream) Recv() (*rlqsv3.RateLimitQuotaResponse, error) {
	m, err := s.st.Receive()
	if err != nil {
		return nil, err
	}
	out := &rlqsv3.RateLimitQuotaResponse{BucketAction: make([]*rlqsv3.RateLimitQuotaResponse_BucketAction, len(m.GetGrants()))}
	for i, g := range m.GetGrants() {
		a := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"rule": g.GetRule(), "key": g.GetKey()}}}
		var strat *typev3.RateLimitStrategy
		switch {
		case g.GetTokenBucket() != nil:
			tb := g.GetTokenBucket()
			strat = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
				MaxTokens: tb.GetMaxTokens(), TokensPerFill: wrapperspb.UInt32(tb.GetTokensPerFill()), FillInterval: tb.GetFillInterval(),
			}}}
		case g.GetDenyAll():
			strat = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
		}
		if strat == nil {
			a.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}
		} else {
			ttl := g.GetTtl()
			if ttl == nil {
				ttl = durationpb.New(0) // a grant without one holds for nothing
			}
			a.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: ttl, RateLimitStrategy: strat,
			}}
		}
		out.BucketAction[i] = a
	}
	return out, nil
}

func (s *leaseStream) CloseSend() error { return s.st.CloseRequest() }

func (s *leaseStream) Context() context.Context { return s.ctx }
