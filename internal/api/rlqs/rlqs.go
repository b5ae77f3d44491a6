// Package rlqs owns Envoy's Rate Limit Quota Service (RLQS,
// envoy.service.rate_limit_quota.v3 StreamRateLimitQuotas): the streams of
// usage reports that Envoy's rate_limit_quota filter sends, the matching
// of their buckets to limits, and the quota assignments sent back, which
// the filter enforces locally so that limited requests cost no round trip.
//
// An assignment is a lease: every token it can hand out over its life is
// decided and counted through the [decision.Decider] before the
// assignment is sent, under the same counter key (and through the same
// burst guard and replication) as Envoy's ShouldRateLimit for the same
// descriptor, so a bucket's leases and every other caller of that limit
// share one count. An assignment's life is extended at each report while
// its rate still fits the bucket's demand, and each extension is charged
// before it is sent; a lease held to its part of the limit is also
// topped up between reports, its extensions pushed unasked. The node
// divides its share of a key (the burst guard's) among its streams by max-min
// fairness (demand.go). What a lease cannot do is return a token once
// charged: tokens a client does not use stay counted until they leave the
// window. docs/design.md ("Quota leases") states the bounds this gives.
package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/window"
)

// The service and its one procedure.
const (
	ServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"
	Procedure   = "/" + ServiceName + "/StreamRateLimitQuotas"
)

// Defaults of [Config].
const (
	DefaultMaxBuckets = 1000
	DefaultLifetime   = time.Hour
)

// Bounds on what a report may say; anything outside is refused.
const (
	// MaxEntries bounds the entries of one bucket_id, as Envoy's
	// descriptors are bounded.
	MaxEntries = 64
	// maxElapsed bounds time_elapsed: a reporting interval longer than an
	// hour is no interval Envoy's filter accepts.
	maxElapsed = time.Hour
	// minInterval and maxInterval clamp the reporting interval that the
	// assignments are sized for.
	minInterval = 50 * time.Millisecond
	maxInterval = time.Minute
	// firstInterval is the interval assumed until a bucket's reports show
	// the client's (Envoy's first report of a bucket comes at once).
	firstInterval = time.Second
	// delivery covers the time between sending an assignment and the
	// client applying it, and between the client's report and its arrival:
	// each charge covers the client's fills this much past the TTL.
	delivery = 100 * time.Millisecond
	// headroom is how much more than its demand a lease asks for.
	headroom = 1.1
	// smoothing is the weight of a new measure of a bucket's demand in
	// its moving average.
	smoothing = 0.5
	// tries is the most decisions one assignment takes: the whole charge,
	// then half, then a quarter.
	tries = 3
)

// Config configures a [Service]. Decider and Now are required.
type Config struct {
	// Decider validates, decides and records the leases' charges; its
	// rules hold the domains and the native rules.
	Decider *decision.Decider
	// Now returns the current time.
	Now func() time.Time
	// MaxBuckets bounds the buckets of one stream (default
	// [DefaultMaxBuckets]); a bucket past it is abandoned.
	MaxBuckets int
	// Lifetime ends a stream this long after it began (default
	// [DefaultLifetime]); Envoy's filter then opens a new one and keeps
	// its assignments meanwhile.
	Lifetime time.Duration
	// Logger logs refused streams; nil discards.
	Logger *slog.Logger
	// Registerer registers the metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Service serves StreamRateLimitQuotas. It is safe for concurrent use.
type Service struct {
	cfg     Config
	m       metrics
	streams atomic.Int64
	buckets atomic.Int64
	demand  *demands
}

type metrics struct {
	streams     prometheus.Gauge
	buckets     prometheus.Gauge
	reports     *prometheus.CounterVec // by outcome of the reported requests
	assignments *prometheus.CounterVec // by action
	charged     prometheus.Counter
	overused    prometheus.Counter
}

// New checks cfg and returns the service.
func New(cfg Config) (*Service, error) {
	if cfg.Decider == nil || cfg.Now == nil {
		return nil, errors.New("rlqs: Config.Decider and Now are required")
	}
	if cfg.MaxBuckets <= 0 {
		cfg.MaxBuckets = DefaultMaxBuckets
	}
	if cfg.Lifetime <= 0 {
		cfg.Lifetime = DefaultLifetime
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, demand: newDemands(), m: metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rlcluster_rlqs_streams",
			Help: "Open streams of Envoy's rate limit quota service (RLQS).",
		}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rlcluster_rlqs_buckets",
			Help: "Buckets of the open RLQS streams (a bucket reported on two streams counts twice).",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rlcluster_rlqs_reported_requests_total",
			Help: "Requests that RLQS clients reported, by outcome (allowed, denied).",
		}, []string{"outcome"}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rlcluster_rlqs_assignments_total",
			Help: "Bucket actions sent to RLQS clients, by action: token_bucket (a new lease), extend (the active lease's life extended), deny_all, allow_all (an unlimited limit), abandon (no limit applies, or the stream holds too many buckets).",
		}, []string{"action"}),
		charged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rlcluster_rlqs_charged_hits_total",
			Help: "Hits counted for RLQS leases: every token an assignment can hand out over its life, counted before it is sent.",
		}),
		overused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rlcluster_rlqs_overused_requests_total",
			Help: "Requests that RLQS clients reported allowed beyond what their streams' leases were charged for (at least): before the first assignment, on an expired assignment's fallback, or by clients that do not enforce their assignments. They are counted on the limit when it admits them.",
		}),
	}}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.m.streams, s.m.buckets, s.m.reports, s.m.assignments, s.m.charged, s.m.overused} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("rlqs: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Handler returns the Connect handler of [Procedure] (gRPC over HTTP/2,
// as Envoy calls it), with opts.
func (s *Service) Handler(opts ...connect.HandlerOption) http.Handler {
	return connect.NewBidiStreamHandler(Procedure, func(ctx context.Context, st *connect.BidiStream[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
		return s.Stream(ctx, st.Receive, st.Send)
	}, opts...)
}

// Lifetime is how long a stream may last (Config.Lifetime).
func (s *Service) Lifetime() time.Duration { return s.cfg.Lifetime }

// Streams returns the streams open now.
func (s *Service) Streams() int64 { return s.streams.Load() }

// Buckets returns the buckets the open streams hold.
func (s *Service) Buckets() int64 { return s.buckets.Load() }

// Stream serves one StreamRateLimitQuotas call, for every transport:
// recv returns the client's next reports (io.EOF when it half-closes),
// send writes a response. It answers every report with an action for
// each of its buckets, in the report's order, and returns when the client
// ends the stream (nil), ctx is done, the stream's lifetime passes (nil:
// Envoy's filter opens a new stream), or a report is invalid
// (invalid_argument, naming the field). Errors are Connect errors.
func (s *Service) Stream(parent context.Context, recv func() (*rlqsv3.RateLimitQuotaUsageReports, error), send func(*rlqsv3.RateLimitQuotaResponse) error) error {
	return s.stream(parent, false, recv, send)
}

// StreamRules serves a stream of leases of native rules' keys (the
// ratelimit.v1 Lease call) as [Service.Stream] serves Envoy's: its
// reports carry no domain, and each bucket is exactly the entries "rule"
// and "key" of a leasable rule.
func (s *Service) StreamRules(parent context.Context, recv func() (*rlqsv3.RateLimitQuotaUsageReports, error), send func(*rlqsv3.RateLimitQuotaResponse) error) error {
	return s.stream(parent, true, recv, send)
}

func (s *Service) stream(parent context.Context, native bool, recv func() (*rlqsv3.RateLimitQuotaUsageReports, error), send func(*rlqsv3.RateLimitQuotaResponse) error) error {
	ctx, cancel := context.WithTimeout(parent, s.cfg.Lifetime)
	defer cancel()
	s.streams.Add(1)
	s.m.streams.Inc()
	st := &stream{svc: s, ctx: ctx, native: native, buckets: map[string]*bucket{}}
	defer func() {
		s.streams.Add(-1)
		s.m.streams.Dec()
		s.m.buckets.Sub(float64(len(st.buckets)))
		s.buckets.Add(-int64(len(st.buckets)))
		for key, b := range st.buckets {
			s.demand.leave(key, b)
		}
	}()
	// recv blocks on the transport, not on ctx: a goroutine of its own
	// receives, so that the lifetime can end the stream. Returning ends
	// the call, which makes a blocked recv return.
	type received struct {
		m   *rlqsv3.RateLimitQuotaUsageReports
		err error
	}
	msgs := make(chan received)
	go func() {
		for {
			m, err := recv()
			select {
			case msgs <- received{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var (
		ticker *time.Ticker
		ticks  <-chan time.Time
	)
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for {
		var r received
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return connect.NewError(connect.CodeCanceled, parent.Err())
			}
			return nil // the lifetime passed: the client opens a new stream
		case <-ticks:
			if resp := st.topUp(s.cfg.Now()); resp != nil {
				if err := send(resp); err != nil {
					return err
				}
			}
			continue
		case r = <-msgs:
		}
		switch {
		case errors.Is(r.err, io.EOF):
			return nil
		case r.err != nil:
			return r.err
		}
		resp, err := st.report(r.m)
		if err != nil {
			s.cfg.Logger.Debug("rlqs: stream refused", "err", err)
			return err
		}
		if len(resp.GetBucketAction()) > 0 {
			if err := send(resp); err != nil {
				return err
			}
		}
		if p := st.topUpPeriod(); p != st.period {
			st.period = p
			switch {
			case p == 0 && ticker != nil:
				ticker.Stop()
				ticker, ticks = nil, nil
			case p > 0 && ticker == nil:
				ticker = time.NewTicker(p)
				ticks = ticker.C
			case p > 0:
				ticker.Reset(p)
			}
		}
	}
}

// stream is one call's state, owned by its goroutine.
type stream struct {
	svc     *Service
	ctx     context.Context
	native  bool // native rules only, no domain (StreamRules)
	domain  string
	buckets map[string]*bucket // by counter key
	// period is how often the stream's capped leases are topped up (0:
	// none is), set at every report (see topUpPeriod).
	period time.Duration
}

// bucket is one bucket_id of a stream: its limit, the client's demand and
// the lease it holds.
type bucket struct {
	id  *rlqsv3.BucketId
	key string
	// req decides one hit of the bucket's limit; charges copy it.
	req   decision.Request
	limit window.Limit
	// interval is the client's reporting interval (its last time_elapsed
	// within bounds), rate its demand in requests a second (allowed and
	// denied), as last reported.
	interval time.Duration
	rate     float64
	// elapsed holds the last reports' time_elapsed, nextElapsed where
	// the next goes (see observe).
	elapsed     [4]time.Duration
	nextElapsed int
	// pendN and pendElapsed are the requests and time of the reports
	// since the rate was last measured (see observe).
	pendN       uint64
	pendElapsed time.Duration
	measured    bool
	// The active lease, when tb.MaxTokens > 0: sent at start, expiring at
	// expiry; charged is every token it can hand out until then (its
	// full bucket and its fills, continuous at tb's rate).
	tb            tokenBucket
	start, expiry time.Time
	charged       uint64
	// leaseUsed is what the client reported allowed since the lease
	// began (see lease).
	leaseUsed uint64
	// share is this node's share of the key's headroom as the burst
	// guard divides it among the regions and their nodes (1 alone), when
	// last reported.
	share float64
	// reach is how far past a report the active lease's charge reaches
	// (see lease); capped says whether the lease is held to its part at
	// the last report, and topped up between reports (see topUp).
	reach  time.Duration
	capped bool
	// level is the most any bucket of the key on this node gets of the
	// node's share of the limit's rate (see demands.level) when the
	// rate was last reported.
	level float64
	// used is every request the client reported allowed on this stream,
	// paid every token charged on it (both only grow; see usage).
	used, paid uint64
}

// tokenBucket is an assignment's token bucket.
type tokenBucket struct {
	MaxTokens, TokensPerFill uint32
	FillInterval             time.Duration
}

// rate is the bucket's fill rate in tokens a second.
func (t tokenBucket) rate() float64 {
	return float64(t.TokensPerFill) / t.FillInterval.Seconds()
}

// lifetimeTokens is the most tokens t can hand out from its start over d:
// its full bucket and its whole fills, counted as continuous (a discrete
// fill hands out no more by any instant, and a request takes a whole
// token).
func (t tokenBucket) lifetimeTokens(d time.Duration) uint64 {
	return uint64(t.MaxTokens) + uint64(math.Floor(t.rate()*d.Seconds()))
}

// report handles one message: every usage it carries, in order.
func (st *stream) report(m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	if !st.native && st.domain == "" {
		if m.GetDomain() == "" {
			return nil, decision.Invalid("domain: required in a stream's first report")
		}
		if !auth.FromContext(st.ctx).AllowDomain(m.GetDomain()) {
			return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("domain: this token may not use domain %.128q", m.GetDomain()))
		}
		st.domain = m.GetDomain()
	} else if !st.native && m.GetDomain() != "" && m.GetDomain() != st.domain {
		return nil, decision.Invalid("domain: a stream keeps its first report's domain %.128q; open a new stream for %.128q", st.domain, m.GetDomain())
	}
	if n := len(m.GetBucketQuotaUsages()); n > st.svc.cfg.MaxBuckets {
		return nil, decision.Invalid("bucket_quota_usages: %d usages, more than the maximum of %d buckets a stream may hold", n, st.svc.cfg.MaxBuckets)
	}
	now := st.svc.cfg.Now()
	resp := &rlqsv3.RateLimitQuotaResponse{BucketAction: make([]*rlqsv3.RateLimitQuotaResponse_BucketAction, 0, len(m.GetBucketQuotaUsages()))}
	for i, u := range m.GetBucketQuotaUsages() {
		a, err := st.usage(i, u, now)
		if err != nil {
			return nil, err
		}
		resp.BucketAction = append(resp.BucketAction, a)
	}
	return resp, nil
}

// usage handles report i of one bucket and returns its action.
func (st *stream) usage(i int, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now time.Time) (*rlqsv3.RateLimitQuotaResponse_BucketAction, error) {
	f := usageField(i)
	id := u.GetBucketId().GetBucket()
	if len(id) == 0 {
		return nil, decision.Invalid("%sbucket_id.bucket: at least one entry is required", f)
	}
	if len(id) > MaxEntries {
		return nil, decision.Invalid("%sbucket_id.bucket: more than the maximum of %d entries", f, MaxEntries)
	}
	var elapsed time.Duration
	if te := u.GetTimeElapsed(); te != nil {
		if err := te.CheckValid(); err != nil || te.AsDuration() < 0 || te.AsDuration() > maxElapsed {
			return nil, decision.Invalid("%stime_elapsed: must be from 0 to %v", f, maxElapsed)
		}
		elapsed = te.AsDuration()
	}
	allowed, denied := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()
	if allowed > window.MaxLimit || denied > window.MaxLimit {
		return nil, decision.Invalid("%snum_requests_allowed and num_requests_denied: at most %d each", f, window.MaxLimit)
	}
	st.svc.m.reports.WithLabelValues("allowed").Add(float64(allowed))
	st.svc.m.reports.WithLabelValues("denied").Add(float64(denied))

	entries := make([]rules.Entry, 0, len(id))
	for k, v := range id {
		if k == "" {
			return nil, decision.Invalid("%sbucket_id.bucket: keys must not be empty", f)
		}
		entries = append(entries, rules.Entry{Key: k, Value: v})
	}
	slices.SortFunc(entries, func(a, b rules.Entry) int { return strings.Compare(a.Key, b.Key) })
	key, req, lim, known, err := st.match(f, entries, now)
	if err != nil {
		return nil, err
	}
	action := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: id}}
	if !known {
		st.forget(key)
		return st.abandon(action), nil
	}
	if lim.unlimited {
		st.forget(key)
		return st.blanket(action, typev3.RateLimitStrategy_ALLOW_ALL, firstInterval), nil
	}
	b := st.buckets[key]
	if b == nil {
		if len(st.buckets) >= st.svc.cfg.MaxBuckets {
			return st.abandon(action), nil
		}
		b = &bucket{id: action.BucketId, key: key, interval: firstInterval}
		for i := range b.elapsed {
			b.elapsed[i] = firstInterval
		}
		st.buckets[key] = b
		st.svc.m.buckets.Inc()
		st.svc.buckets.Add(1)
	}
	b.req, b.limit = req, lim.limit
	b.observe(elapsed, allowed, denied)
	st.svc.demand.set(key, b, b.asks())
	r := b.req
	r.Store.Now = now
	st.svc.cfg.Decider.Refused(r, st.svc.demand.refusals(key, b.limit, now, denied))
	b.share = st.svc.cfg.Decider.NodeShare(r)
	b.level = st.svc.demand.level(key, fullRate(b.limit)*b.share)
	if b.used > b.paid {
		// More allowed than every lease of the stream could hand out:
		// requests before the first assignment or on an expired one's
		// fallback (the filter's no_assignment_behavior and
		// expired_assignment_behavior), a lease of an earlier stream's,
		// or a client that does not enforce its assignments. They are
		// counted now, if the limit admits them, so that later decisions
		// see them; either way they are counted once, in the metric.
		over := b.used - b.paid
		st.svc.m.overused.Add(float64(over))
		st.charge(b, min(over, b.limit.Capacity()), now)
		b.paid = b.used
	}
	if lim.limit.Limit == 0 {
		b.tb, b.capped = tokenBucket{}, false
		return st.blanket(action, typev3.RateLimitStrategy_DENY_ALL, b.ttl()), nil
	}
	return st.lease(action, b, now), nil
}

// usageFields are the field prefixes of a report's first usages, built
// once: every usage names its field, though only an error shows it.
var usageFields = func() (f [128]string) {
	for i := range f {
		f[i] = fmt.Sprintf("bucket_quota_usages[%d].", i)
	}
	return f
}()

// usageField returns the field prefix of usage i.
func usageField(i int) string {
	if i < len(usageFields) {
		return usageFields[i]
	}
	return fmt.Sprintf("bucket_quota_usages[%d].", i)
}

// matched is a bucket's limit, as much of it as the lease needs.
type matched struct {
	limit     window.Limit
	unlimited bool
}

// match finds the limit of a bucket's entries (sorted by key): the
// stream's domain's, when it is a configured domain, in the first order
// of the entries that its descriptor tree matches ([rules.Domain.MatchSet];
// the counter is then the one ShouldRateLimit decides a descriptor of
// those entries in that order on); else, for a bucket of exactly the
// entries "rule" and "key", the native rule of that name, when the rule
// is leasable.
// key names the bucket within the stream (its counter's key, before any
// scope prefix); known is false when no limit applies.
func (st *stream) match(f string, entries []rules.Entry, now time.Time) (key string, req decision.Request, lim matched, known bool, err error) {
	d := st.svc.cfg.Decider
	rs := d.Rules()
	if dom := rs.Domain(st.domain); dom != nil && !st.native {
		el, ordered := dom.MatchSet(entries)
		if el != nil {
			entries = ordered
		}
		in := decision.Input{NS: decision.Envoy, Field: f, Envoy: el, Now: now}
		in.StoreKey, in.Key = decision.EnvoyStoreKey(st.domain, entries)
		req, err = d.Validate(in)
		if err != nil || el == nil {
			return in.StoreKey, req, lim, false, err
		}
		return in.StoreKey, req, matched{limit: el.Limit, unlimited: el.Unlimited}, true, nil
	}
	if len(entries) == 2 && entries[0].Key == "key" && entries[1].Key == "rule" {
		key = decision.RuleKey(entries[1].Value, entries[0].Value)
		rule, ok := rs.Lookup(entries[1].Value)
		if !ok || !rule.Leasable {
			return key, req, lim, false, nil
		}
		req, err = d.Validate(decision.Input{NS: decision.Rule, Field: f, Rule: rule.Name, Key: entries[0].Value, Now: now, Scope: auth.FromContext(st.ctx)})
		if err != nil {
			return key, req, lim, false, err
		}
		return key, req, matched{limit: rule.Limit}, true, nil
	}
	return decision.EnvoyDescriptor(st.domain, entries), req, lim, false, nil
}

// observe takes a report's figures into the bucket's interval and demand.
func (b *bucket) observe(elapsed time.Duration, allowed, denied uint64) {
	b.used += allowed
	b.leaseUsed += allowed
	// Besides its periodic reports, the filter reports a bucket out of
	// cycle: at once when it is new, and when an assignment replaces
	// another. Such a report covers a short time, and its few requests
	// say little of the rate: the demand is measured over reports that
	// add up to half an interval at least, and the interval is the
	// longest of the last four time_elapsed (out-of-cycle reports come
	// between periodic ones, not in runs), the first interval assumed
	// until four reports say otherwise.
	b.pendN += allowed + denied
	b.pendElapsed += elapsed
	if elapsed > 0 {
		b.elapsed[b.nextElapsed%len(b.elapsed)] = elapsed
		b.nextElapsed++
		b.interval = min(max(slices.Max(b.elapsed[:]), minInterval), maxInterval)
	}
	switch {
	case b.pendElapsed <= 0 && !b.measured:
		// A new bucket's first report: its requests say that it is
		// asked for, not at what rate. Until a rate is measured the
		// bucket asks for an eighth of the limit's rate (at most its
		// part of it), so that a new client's first interval is not
		// held to a request or two, while clients that start together
		// do not charge the window full of leases they may not use
		// (docs/design.md, "Quota leases").
		b.rate = max(b.rate, fullRate(b.limit)/8)
	case b.pendElapsed >= b.interval/2:
		// An interval's count of random arrivals is noisy (a Poisson
		// count of n is off by about its square root): the rate is a
		// moving average, so that a lease is not replaced, and its
		// client's bucket refilled, on noise alone.
		r := float64(b.pendN) / b.pendElapsed.Seconds()
		if b.measured {
			r = smoothing*r + (1-smoothing)*b.rate
		}
		b.rate, b.measured = r, true
		b.pendN, b.pendElapsed = 0, 0
	}
}

// ttl is an assignment's time to live: the reporting interval and half of
// it again, so that one late report does not let a lease lapse.
func (b *bucket) ttl() time.Duration {
	return b.interval + max(b.interval/2, 2*delivery)
}

// want is the token bucket the bucket's demand asks for, and the part
// that holds it (0 when what it asks fits). Its rate is what it asks
// (see asks), or, when that is more than its part of the node's share
// of the limit's rate (the key's level on this node: see
// demands.level), partTarget of the part: the parts add up to the
// limit's rate, and asking for more (a quarter more, tried) charges the
// window full early in each window and then refuses every lease until
// the charges leave it, in bunches. Its bucket holds half an interval's
// tokens and three standard deviations of an interval's count of random
// arrivals (a Poisson count of n varies by about its square root):
// random arrivals need depth, not rate, and a rate above the demand
// charges fills that a full bucket discards. A bucket held to its part
// is less deep (see fullLoss), a new one's only half an interval.
//
// Intervals come in steps of powers of two milliseconds, and rates that
// fit in steps of powers of 1.25, so that a demand that wanders within a
// step keeps its lease: a replaced lease starts a full bucket, charged
// again, while the old one's tokens are lost.
func (b *bucket) want() (tb tokenBucket, part float64) {
	part = min(fullRate(b.limit)*b.share, b.level)
	interval := stepInterval(b.interval)
	i := interval.Seconds()
	r := b.asks()
	if r > part {
		// Its part, even under a request an interval (a limit of a few
		// a minute leases a token at a time), less a margin: leases
		// charge their fills ahead of use, and the parts add up to the
		// limit's rate, so parts taken whole would charge the window
		// full early in each window and then refuse every lease until
		// the charges leave it, in bunches.
		r = part * partTarget
	} else {
		part = 0
	}
	tb = sized(r, interval, b.limit.Capacity())
	if !b.measured {
		// A new bucket's rate is a guess: its lease is charged no depth
		// for random arrivals at a rate nobody measured.
		return tb, part
	}
	depth := math.Ceil(r*i/2 + 3*math.Sqrt(r*i))
	tb.MaxTokens = uint32(min(max(float64(tb.MaxTokens), depth), float64(b.limit.Capacity()), math.MaxUint32))
	if u := r / b.rate; part > 0 && u < 1 {
		// A client asked for more than its part empties its bucket as it
		// fills, and its depth only bursts when a replaced lease starts
		// full. Its tokens are lost only while its bucket is full: with
		// random arrivals at rate d and fills at r, a bucket of depth D
		// is full about (r/d)^D of the time. The depth keeps that under
		// a hundredth.
		need := math.Ceil(math.Log(fullLoss) / math.Log(u))
		tb.MaxTokens = min(tb.MaxTokens, uint32(max(need, float64(tb.TokensPerFill))))
	}
	return tb, part
}

// reachSteps is how many reports a lease takes to reach its TTL: a new
// lease is charged until its next report's answer, and each extension
// reaches a tenth of an interval further. Charged until its TTL at once,
// a new lease charged the half interval of fills past its next report
// in one go, and clients that started, or whose leases lapsed, at once
// charged the window past the limit early enough to refuse them again
// at its end, a window later, and again.
const reachSteps = 10

// fullLoss is the share of a lease's fills that a client asking for more
// than its part may lose to a full bucket (see want).
const fullLoss = 0.01

// asks is the rate of the lease the bucket's demand asks for: a tenth
// more than its rate, at least a request an interval, rounded up to a
// step. The key's level divides the limit among what its buckets ask.
func (b *bucket) asks() float64 {
	return stepUp(max(b.rate*headroom, 1/stepInterval(b.interval).Seconds()))
}

// A lease held to its part is sized at partTarget of it, and kept while
// its rate stays within partFloor and the whole part: a part moves a
// little with every report (its clients' demands are measured), and a
// replaced lease starts a full bucket.
const (
	partTarget = 0.97
	partFloor  = 0.93
)

// rateStep is the ratio of one step of lease rates to the next.
const rateStep = 1.25

// stepUp rounds r up to a power of rateStep.
func stepUp(r float64) float64 {
	return math.Pow(rateStep, math.Ceil(math.Log(r)/math.Log(rateStep)-1e-9))
}

// stepInterval rounds d to a power of two milliseconds.
func stepInterval(d time.Duration) time.Duration {
	ms := math.Exp2(math.Round(math.Log2(max(float64(d.Milliseconds()), 1))))
	return time.Duration(ms) * time.Millisecond
}

// fullRate is l's whole rate, in hits a second.
func fullRate(l window.Limit) float64 {
	w, _ := l.BucketAt(0)
	if l.Window > 0 {
		w = l.Window
	}
	return float64(l.Capacity()) / w.Seconds()
}

// sized is a token bucket of rate r tokens a second for clients reporting
// every interval, its bucket at most capacity: whole tokens a fill, the
// fill interval what makes the rate r (about a tenth of an interval, or
// as long as one token takes).
func sized(r float64, interval time.Duration, capacity uint64) tokenBucket {
	per := max(math.Round(r*(interval/10).Seconds()), 1)
	per = min(per, math.MaxUint32)
	fill := time.Duration(per / r * float64(time.Second))
	fill = max(fill, time.Millisecond)
	maxTokens := min(max(math.Ceil(r*interval.Seconds()/2), per), float64(capacity), math.MaxUint32)
	return tokenBucket{MaxTokens: uint32(maxTokens), TokensPerFill: uint32(per), FillInterval: fill}
}

// keeps reports whether the active lease cur may stay for a demand that
// wants want: the same, or a step more than it (fewer fills wasted than
// a new bucket would cost), but never less; held to a part (part > 0),
// at a rate within the part and over partFloor of it.
func keeps(cur, want tokenBucket, part float64) bool {
	if cur == want {
		return true
	}
	if part > 0 {
		rc := cur.rate()
		// The depth follows the measured demand (see want), which is
		// noisy: only a depth far below what the demand wants replaces
		// the lease.
		return rc <= part*1.0001 && rc >= part*partFloor && 2*cur.MaxTokens >= want.MaxTokens
	}
	rc, rw := cur.rate(), want.rate()
	return rc >= rw && rc <= rw*rateStep*1.001 && cur.MaxTokens >= want.MaxTokens
}

// lease answers a report of bucket b: it extends the active lease when
// it still fits the demand and its extension can be charged; else it
// charges a new lease for the demand, crediting the fills the active one
// was charged for and can no longer make; else it extends the active one
// as it is, or lets it run out unextended (no charge); with no lease left,
// it charges a smaller new one (half, then a quarter), else the bucket
// denies all until its next report.
//
// Replacing a lease wastes what its client's bucket holds (the filter
// starts the new one full), so a lease is replaced only when the demand
// moved and the new one can be charged.
func (st *stream) lease(action *rlqsv3.RateLimitQuotaResponse_BucketAction, b *bucket, now time.Time) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	ttl := b.ttl()
	want, part := b.want()
	// Held to its part, and filling a token every half interval at
	// least: a lease of a few tokens a minute is charged a token at a
	// time, for as long as it lasts.
	b.capped = part > 0 && want.rate()*(b.interval/2).Seconds() >= 1
	active := b.active(now)
	// extend extends the active lease at a report: a tenth of an
	// interval further than before, up to the TTL, or, held to its part,
	// to its top-up reach.
	extend := func() bool {
		reach := min(ttl, max(b.reach, b.interval+delivery)+b.interval/reachSteps)
		if b.capped {
			reach = b.topUpReach()
		}
		if !st.extend(b, reach, now) {
			return false
		}
		st.svc.m.assignments.WithLabelValues("extend").Inc()
		return true
	}
	if active && keeps(b.tb, want, part) && extend() {
		return assign(action, b.tb, b.expiry.Sub(now))
	}
	// What the active lease was charged and its client will not use is
	// the new lease's: the fills it would make after its client applies
	// a replacement (a delivery from now), and, of those before, what
	// its client did not use: the lease hands out at most what its
	// client reported using and, after the report this answers, what its
	// bucket held and filled until the replacement applies (two
	// deliveries).
	var credit uint64
	if active {
		made := b.tb.lifetimeTokens(now.Add(delivery).Sub(b.start))
		spent := min(made, b.leaseUsed+uint64(b.tb.MaxTokens)+uint64(math.Ceil(b.tb.rate()*(2*delivery).Seconds())))
		if b.charged > spent {
			credit = b.charged - spent
		}
	}
	reach := b.reach
	switch {
	case b.capped:
		reach = b.topUpReach()
	case !active:
		reach = min(ttl, b.interval+delivery)
	}
	renew := func(tb tokenBucket) bool { return st.renew(b, tb, credit, reach, now) }
	if active {
		if !keeps(b.tb, want, part) && renew(want) {
			return assign(action, want, b.reach)
		}
		if extend() {
			return assign(action, b.tb, b.expiry.Sub(now))
		}
		// Nothing more can be charged: the lease runs out as it is (the
		// same strategy with the time it has left changes nothing).
		st.svc.m.assignments.WithLabelValues("extend").Inc()
		return assign(action, b.tb, b.expiry.Sub(now))
	}
	for range tries {
		if renew(want) {
			return assign(action, want, b.reach)
		}
		r := want.rate() / 2
		if r*(ttl+delivery).Seconds() < 1 {
			break
		}
		want = sized(r, b.interval, uint64(want.MaxTokens))
	}
	b.tb = tokenBucket{}
	return st.blanket(action, typev3.RateLimitStrategy_DENY_ALL, ttl)
}

// renew charges b a new lease tb, less credit, until reach from now;
// when the limit refuses that whole but admits part of it, it charges
// the part, and the lease lives as long as the part covers, if that is
// past the next top-up (capped) or a quarter interval (else). It reports
// whether b holds the new lease.
func (st *stream) renew(b *bucket, tb tokenBucket, credit uint64, reach time.Duration, now time.Time) bool {
	need := tb.lifetimeTokens(reach + delivery)
	got, until := need, reach
	if need > credit {
		left, ok := st.decide(b, need-credit, now)
		if !ok {
			least := b.interval / 4
			if b.capped {
				least = b.period() + delivery
			}
			got = credit + min(left, need-credit-1)
			until = min(reach, tb.covers(got))
			if got <= credit || until < least || !st.charge(b, got-credit, now) {
				return false
			}
		}
	}
	b.tb, b.start, b.expiry, b.reach, b.charged, b.leaseUsed = tb, now, now.Add(until), until, got, 0
	st.svc.m.assignments.WithLabelValues("token_bucket").Inc()
	return true
}

// Top-ups. A lease held to its part is charged only a little ahead, and
// topped up between reports: the stream charges its next fills every
// period and pushes the same assignment with a later expiry (RLQS lets
// the server push assignments at any time; the filter keeps the state
// of a bucket whose strategy did not change). A charge a second ahead
// is a lump of a client's part that the burst guard, which gives each
// node its share of the window's headroom a horizon at a time, refuses
// whole near the limit; a period's is a few hits. Leases that fit their
// demand are far from the limit, and keep to their reports.

// topUps is how many times an interval a capped lease is topped up.
const topUps = 5

// minPeriod is the shortest top-up period: that of the shortest
// reporting interval the node assumes, so that a client claiming a short
// interval does not make the node decide a lease's charges more often
// than reports at that interval would.
const minPeriod = minInterval

// period is how often b's lease is topped up: topUps times an interval,
// or as long as its lease takes to fill a token.
func (b *bucket) period() time.Duration {
	p := max(b.interval/topUps, minPeriod)
	if r := b.tb.rate(); b.tb.MaxTokens > 0 && r > 0 {
		p = max(p, time.Duration(float64(time.Second)/r))
	}
	return p
}

// topUpReach is how far past now a capped lease is charged: past the
// next top-up by a period and a delivery each way, so that one top-up
// late or lost does not let it lapse.
func (b *bucket) topUpReach() time.Duration { return 2*b.period() + 2*delivery }

// topUpPeriod is the stream's top-up period: the shortest of its capped
// buckets', or 0 when none is capped.
func (st *stream) topUpPeriod() time.Duration {
	var p time.Duration
	for _, b := range st.buckets {
		if b.capped && (p == 0 || b.period() < p) {
			p = b.period()
		}
	}
	return p
}

// topUp charges every active capped lease of the stream until its reach
// from now, or as much of it as the limit admits, and returns the
// assignments whose expiry moved (nil when none did).
func (st *stream) topUp(now time.Time) *rlqsv3.RateLimitQuotaResponse {
	var resp *rlqsv3.RateLimitQuotaResponse
	for _, b := range st.buckets {
		if !b.capped {
			continue
		}
		reach := b.topUpReach()
		// A part that moved since the report (a client of the key came,
		// left, or asked for more or less) is followed now, not an
		// interval later: a lease over it shrinks, so that a newcomer's
		// charges find room, and a lease that lapsed, or was refused, is
		// asked for again. The old lease is credited the fills it was
		// charged for past the replacement's arrival, which its client
		// cannot have taken.
		b.level = st.svc.demand.level(b.key, fullRate(b.limit)*b.share)
		want, part := b.want()
		active := b.active(now)
		if part > 0 && (!active || b.tb.rate() > part*1.0001) {
			var credit uint64
			if made := b.tb.lifetimeTokens(now.Add(delivery).Sub(b.start)); active && b.charged > made {
				credit = b.charged - made
			}
			if st.renew(b, want, credit, reach, now) {
				resp = pushed(resp, assign(&rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: b.id}, want, b.reach))
				continue
			}
		}
		if !active {
			continue
		}
		if !b.expiry.Before(now.Add(reach - b.period())) {
			continue // its last top-up still reaches past the next
		}
		if !st.extend(b, reach, now) {
			continue
		}
		st.svc.m.assignments.WithLabelValues("top_up").Inc()
		resp = pushed(resp, assign(&rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: b.id}, b.tb, b.expiry.Sub(now)))
	}
	return resp
}

// extend charges b's active lease its fills until reach from now, or as
// many of them as the limit admits, and moves its expiry to what its
// charge covers; it reports whether the lease lives longer for it.
func (st *stream) extend(b *bucket, reach time.Duration, now time.Time) bool {
	if need := b.tb.lifetimeTokens(now.Add(reach + delivery).Sub(b.start)); need > b.charged {
		b.charged += st.chargeUpTo(b, need-b.charged, now)
	}
	until := b.covered()
	if until.After(now.Add(reach)) {
		until = now.Add(reach)
	}
	if !until.After(b.expiry) {
		return false
	}
	b.expiry, b.reach = until, reach
	return true
}

// pushed appends a to resp, made when nil.
func pushed(resp *rlqsv3.RateLimitQuotaResponse, a *rlqsv3.RateLimitQuotaResponse_BucketAction) *rlqsv3.RateLimitQuotaResponse {
	if resp == nil {
		resp = &rlqsv3.RateLimitQuotaResponse{}
	}
	resp.BucketAction = append(resp.BucketAction, a)
	return resp
}

// chargeUpTo charges n hits of b's limit now, or, when the limit refuses
// them, the fewer that it says it would admit; it returns the hits
// charged.
func (st *stream) chargeUpTo(b *bucket, n uint64, now time.Time) uint64 {
	r, ok := st.decide(b, n, now)
	if ok {
		return n
	}
	if r = min(r, n-1); r > 0 {
		if _, ok := st.decide(b, r, now); ok {
			return r
		}
	}
	return 0
}

// active reports whether b holds a lease that has not expired at now.
func (b *bucket) active(now time.Time) bool { return b.tb.MaxTokens > 0 && now.Before(b.expiry) }

// covered is the instant until which the active lease's charge covers
// its fills, its delivery allowed for.
func (b *bucket) covered() time.Time { return b.start.Add(b.tb.covers(b.charged)) }

// covers is how long after its start a lease of t charged n tokens
// covers its fills, its delivery allowed for (0 when n does not pass its
// full bucket).
func (t tokenBucket) covers(n uint64) time.Duration {
	if n <= uint64(t.MaxTokens) {
		return 0
	}
	// With n fills charged, the client may take tokens until just before
	// the next one.
	next := float64(n-uint64(t.MaxTokens)+1) / t.rate()
	return max(time.Duration(next*float64(time.Second))-time.Nanosecond-delivery, 0)
}

// charge decides n hits of b's limit now, as one request; it reports
// whether the limit admitted them. A store failure admits nothing.
func (st *stream) charge(b *bucket, n uint64, now time.Time) bool {
	_, ok := st.decide(b, n, now)
	return ok
}

// decide charges n hits of b's limit now, as one request: it reports
// whether the limit admitted them, and else how many it would have.
func (st *stream) decide(b *bucket, n uint64, now time.Time) (remaining uint64, ok bool) {
	if n > b.limit.Capacity() {
		return b.limit.Capacity(), false // no window holds it: the caller asks for less
	}
	req := b.req
	req.Store.Hits, req.Store.Now, req.Store.Peek = n, now, false
	var out [1]decision.Outcome
	if err := st.svc.cfg.Decider.Decide(st.ctx, []decision.Request{req}, out[:]); err != nil {
		return 0, false
	}
	if !out[0].Allowed { // shadow mode answers allowed: the lease is granted
		return out[0].Remaining, false
	}
	b.paid += n
	st.svc.m.charged.Add(float64(n))
	return 0, true
}

// forget drops a bucket that no longer has a lease to track.
func (st *stream) forget(key string) {
	if b, ok := st.buckets[key]; ok {
		delete(st.buckets, key)
		st.svc.m.buckets.Dec()
		st.svc.buckets.Add(-1)
		st.svc.demand.leave(key, b)
	}
}

func assign(a *rlqsv3.RateLimitQuotaResponse_BucketAction, tb tokenBucket, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	a.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
		AssignmentTimeToLive: durationpb.New(ttl),
		RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     tb.MaxTokens,
			TokensPerFill: wrapperspb.UInt32(tb.TokensPerFill),
			FillInterval:  durationpb.New(tb.FillInterval),
		}}},
	}}
	return a
}

func (st *stream) blanket(a *rlqsv3.RateLimitQuotaResponse_BucketAction, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	label := "deny_all"
	if rule == typev3.RateLimitStrategy_ALLOW_ALL {
		label = "allow_all"
	}
	st.svc.m.assignments.WithLabelValues(label).Inc()
	a.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
		AssignmentTimeToLive: durationpb.New(ttl),
		RateLimitStrategy:    &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}},
	}}
	return a
}

func (st *stream) abandon(a *rlqsv3.RateLimitQuotaResponse_BucketAction) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	st.svc.m.assignments.WithLabelValues("abandon").Inc()
	a.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}
	return a
}
