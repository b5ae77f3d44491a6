// Package rlqsfilter is a client of Envoy's Rate Limit Quota Service (RLQS:
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService,
// StreamRateLimitQuotas) that decides requests as Envoy's rate_limit_quota
// HTTP filter does, for the server's tests, benches and load generators.
// It owns the per-bucket state a filter keeps — the bucket's assignment,
// its token bucket, its usage since the last report — and the stream that
// reports the usage and receives the assignments.
//
// It follows, from envoy.service.rate_limit_quota.v3:
//   - RateLimitQuotaUsageReports: domain in the first message of a stream
//     only; bucket_quota_usages with bucket_id, time_elapsed since the
//     bucket's last report, num_requests_allowed and num_requests_denied.
//   - RateLimitQuotaResponse.BucketAction: quota_assignment_action with
//     assignment_time_to_live (unset: no expiry; 0: expired at once) and
//     rate_limit_strategy (unset: ALLOW_ALL), applied, extended or replaced
//     as QuotaAssignmentAction documents; abandon_action, which erases the
//     bucket as AbandonAction documents.
//
// and, from envoy.extensions.filters.http.rate_limit_quota.v3's
// RateLimitQuotaBucketSettings: reporting_interval ([Config].ReportingInterval),
// no_assignment_behavior.fallback_rate_limit ([Config].NoAssignment) and
// expired_assignment_behavior with fallback_rate_limit,
// reuse_last_assignment and expired_assignment_behavior_timeout
// ([Config].Expired). Strategies are envoy.type.v3.RateLimitStrategy's
// blanket_rule and token_bucket ([Strategy]).
//
// There is no matcher: the caller names each request's bucket (the
// BucketId map that bucket_id_builder would have built), one filter has
// one set of bucket settings, and there is no deny response, only the
// decision.
//
// Where Envoy's implementation and the proto's documentation part, this
// package follows the proto except where noted: a replaced assignment is
// reported at once; time_elapsed and fill_interval keep their sub-second
// part (Envoy's filter rounds both down to whole seconds); an expired
// assignment with no expired_assignment_behavior goes back to the
// no-assignment behaviour (as Envoy's filter does; the proto says the
// bucket is abandoned). See [Config], [Filter.Run] and [StrategyFromProto].
package rlqsfilter

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Config is a filter's settings.
type Config struct {
	// Domain is sent in the first message of each stream
	// (RateLimitQuotaUsageReports.domain).
	Domain string
	// ReportingInterval is how often every bucket's usage is reported
	// (reporting_interval). Required, > 0.
	ReportingInterval time.Duration
	// NoAssignment applies to a bucket from its first request until its
	// first assignment (no_assignment_behavior.fallback_rate_limit). The
	// zero value allows all, Envoy's default. A token bucket here is one
	// per bucket and starts full when the bucket is created.
	NoAssignment Strategy
	// Expired is what applies once an assignment's TTL runs out
	// (expired_assignment_behavior). Nil: the bucket goes back to
	// NoAssignment, keeping its subscription and reports, as Envoy's
	// filter does when the field is unset.
	Expired *Expired
	// ReconnectBackoff is the wait between a stream's end and the next
	// stream's open in [Filter.Run]. Zero means ReportingInterval: Envoy
	// retries the stream when its next report is due. The wait is fixed,
	// not growing, so that a test can say when the next stream opens.
	ReconnectBackoff time.Duration
	// Now is the clock; nil means time.Now (inside a testing/synctest
	// bubble that is the bubble's fake clock).
	Now func() time.Time
	// Logger gets stream ends and ignored actions; nil discards them.
	Logger *slog.Logger
}

// Expired mirrors ExpiredAssignmentBehavior.
type Expired struct {
	// ReuseLast keeps applying the expired assignment's strategy, its
	// token bucket carrying on (reuse_last_assignment). It wins over
	// Fallback.
	ReuseLast bool
	// Fallback applies when ReuseLast is false (fallback_rate_limit). If
	// it equals the expired assignment's strategy, that token bucket
	// carries on (as in Envoy's filter); otherwise a new one starts full.
	Fallback Strategy
	// Timeout is how long the expired behaviour applies
	// (expired_assignment_behavior_timeout) unless a new assignment
	// arrives. When it runs out the bucket is abandoned — erased with its
	// usage, no longer reported; its next request starts it anew — as the
	// proto documents (Envoy's filter goes back to the no-assignment
	// behaviour instead). Zero, the proto's default, abandons the bucket as
	// soon as its assignment expires.
	Timeout time.Duration
}

// Phase is where a bucket is in an assignment's life.
type Phase uint8

const (
	// PhaseNoAssignment: Config.NoAssignment applies (before the first
	// assignment, or after one expired with Config.Expired nil).
	PhaseNoAssignment Phase = iota
	// PhaseActive: an assignment applies and has not expired.
	PhaseActive
	// PhaseExpired: the assignment expired; Config.Expired applies.
	PhaseExpired
)

// String names p.
func (p Phase) String() string {
	switch p {
	case PhaseNoAssignment:
		return "no-assignment"
	case PhaseActive:
		return "active"
	case PhaseExpired:
		return "expired"
	}
	return "Phase(" + strconv.Itoa(int(p)) + ")"
}

// BucketState is a bucket's state at one instant, for tests.
type BucketState struct {
	Phase Phase
	// Strategy is the strategy that decides the bucket's requests now.
	Strategy Strategy
	// ExpiresAt is, in PhaseActive, when the assignment expires (zero: it
	// does not); in PhaseExpired, when the expired behaviour ends and the
	// bucket is abandoned; zero in PhaseNoAssignment.
	ExpiresAt time.Time
	// Tokens is the whole tokens in the bucket now (token buckets only).
	Tokens uint64
	// Allowed and Denied count the bucket's requests since it was created
	// (an abandoned bucket's counts go with it).
	Allowed, Denied uint64
}

// Stats are a filter's totals since New.
type Stats struct {
	Allowed, Denied uint64 // requests decided
	Buckets         int    // buckets tracked now
	Streams         uint64 // streams opened
	Reports         uint64 // usage report messages sent
	Responses       uint64 // responses received
	IgnoredActions  uint64 // bucket actions for unknown buckets, or invalid
}

// Filter decides requests for its buckets and, while [Filter.Run] runs,
// reports their usage and applies the assignments received. Its methods
// are safe for concurrent use; one mutex guards its state.
type Filter struct {
	cfg  Config
	now  func() time.Time
	log  *slog.Logger
	seed maphash.Seed
	// wake has room for one signal: an immediate report is queued.
	wake    chan struct{}
	running atomic.Bool

	mu      sync.Mutex
	buckets map[uint64]*bucket // by idHash; collisions chain through next
	// connected is true while a stream is open; only then are immediate
	// reports queued in outbox. While no stream is open a bucket's usage
	// stays in it and goes in the next stream's first message.
	connected bool
	outbox    []queued
	stats     Stats
}

// queued is a usage taken at an event that must be reported at once: a
// new bucket, or a replaced assignment. Taking it at the event, not when
// the sender gets to it, keeps the usage before the event apart from the
// usage after.
type queued struct {
	b *bucket
	u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
}

type bucket struct {
	id     map[string]string
	pb     *rlqsv3.BucketId // built once, shared read-only by every report
	key    string           // canonical id; orders reports
	hash   uint64
	next   *bucket
	erased bool

	phase     Phase
	strategy  Strategy
	expires   bool      // PhaseActive: the assignment has a TTL
	expiresAt time.Time // PhaseActive with expires
	abandonAt time.Time // PhaseExpired
	tokens    tokenState

	allowed, denied uint64 // since lastReport
	lastReport      time.Time
	totalAllowed    uint64
	totalDenied     uint64
}

// New returns a filter; it reports nothing until [Filter.Run] runs.
func New(cfg Config) (*Filter, error) {
	if cfg.ReportingInterval <= 0 {
		return nil, fmt.Errorf("rlqsfilter: reporting interval %v: must be > 0", cfg.ReportingInterval)
	}
	if cfg.ReconnectBackoff < 0 {
		return nil, fmt.Errorf("rlqsfilter: reconnect backoff %v: must be >= 0", cfg.ReconnectBackoff)
	}
	if cfg.ReconnectBackoff == 0 {
		cfg.ReconnectBackoff = cfg.ReportingInterval
	}
	cfg.NoAssignment = cfg.NoAssignment.normalize()
	if err := cfg.NoAssignment.validate(); err != nil {
		return nil, fmt.Errorf("rlqsfilter: no-assignment strategy: %w", err)
	}
	if cfg.Expired != nil {
		e := *cfg.Expired // a copy, so the caller's later edits do not race
		if e.Timeout < 0 {
			return nil, fmt.Errorf("rlqsfilter: expired behaviour timeout %v: must be >= 0", e.Timeout)
		}
		e.Fallback = e.Fallback.normalize()
		if !e.ReuseLast {
			if err := e.Fallback.validate(); err != nil {
				return nil, fmt.Errorf("rlqsfilter: expired fallback strategy: %w", err)
			}
		}
		cfg.Expired = &e
	}
	f := &Filter{
		cfg:     cfg,
		now:     cfg.Now,
		log:     cfg.Logger,
		seed:    maphash.MakeSeed(),
		wake:    make(chan struct{}, 1),
		buckets: make(map[uint64]*bucket),
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	return f, nil
}

// Allow decides one request matched into the bucket id. The first request
// of a bucket creates it (no-assignment behaviour) and, while a stream is
// open, reports it at once, which subscribes the server to it. For a known
// bucket it does not allocate; id is not retained. An empty id is a
// bucket like any other, but no action can name it: Envoy's filter, and
// this one, ignore an action without a bucket_id.
func (f *Filter) Allow(id map[string]string) bool {
	h := f.idHash(id)
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.allowLocked(nil, h, id, now)
	return ok
}

// Bucket returns a handle on the bucket id, for a caller that sends many
// requests into one bucket: its Allow skips hashing id and, while the
// bucket lives, the lookup. Getting the handle does not create the bucket
// (its first request does). The handle stays valid when the bucket is
// abandoned: its next request starts the bucket anew, as [Filter.Allow]'s
// would. id is copied.
func (f *Filter) Bucket(id map[string]string) *Bucket {
	id = maps.Clone(id)
	return &Bucket{f: f, id: id, hash: f.idHash(id)}
}

// Bucket is a handle on one bucket of a filter; see [Filter.Bucket].
type Bucket struct {
	f    *Filter
	id   map[string]string
	hash uint64
	b    *bucket // guarded by f.mu
}

// Allow decides one request matched into the handle's bucket, as
// [Filter.Allow] does.
func (h *Bucket) Allow() bool {
	f := h.f
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	var ok bool
	h.b, ok = f.allowLocked(h.b, h.hash, h.id, now)
	return ok
}

// Reserve takes a token of the handle's bucket for one request, now or
// ahead of its fill, as golang.org/x/time/rate's Reserve does: delay is
// how long the caller waits before acting, and cancel gives the token
// back (a call after the delay has passed changes nothing the bucket has
// not already counted). ok is false, and nothing is taken, unless the
// bucket's active assignment is a token bucket that fills the token
// before the assignment expires; a bucket not yet known subscribes, as a
// request would (without counting one). A reserved token counts in the usage
// reported as an allowed request; a token owed is paid by the next
// fills, before any request is admitted again.
func (h *Bucket) Reserve() (delay time.Duration, ok bool, cancel func()) {
	f := h.f
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	b := h.b
	if b == nil || !f.live(b, now) {
		b = f.lookup(h.hash, h.id, now)
	}
	if b == nil {
		// A new bucket subscribes, as its first request would.
		b = f.create(h.hash, h.id, now)
		if f.connected {
			f.queue(b, now)
		}
	}
	h.b = b
	if b.phase != PhaseActive || b.strategy.Kind != KindTokenBucket {
		return 0, false, func() {}
	}
	tb := b.strategy.TokenBucket
	delay = b.tokens.reserve(tb, now)
	if b.expires && now.Add(delay).After(b.expiresAt) {
		b.tokens.unreserve(tb)
		return 0, false, func() {}
	}
	b.allowed++
	b.totalAllowed++
	f.stats.Allowed++
	at := now.Add(delay)
	var once sync.Once
	return delay, true, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.now().Before(at) && b.strategy.Kind == KindTokenBucket && b.strategy.TokenBucket == tb {
				b.tokens.unreserve(tb)
			}
		})
	}
}

// allowLocked decides a request for the bucket (h, id), trying cached
// first, and returns the bucket it used.
func (f *Filter) allowLocked(cached *bucket, h uint64, id map[string]string, now time.Time) (*bucket, bool) {
	b := cached
	if b == nil || !f.live(b, now) {
		b = f.lookup(h, id, now)
	}
	fresh := b == nil
	if fresh {
		b = f.create(h, id, now)
	}
	ok := b.decide(now)
	if ok {
		f.stats.Allowed++
	} else {
		f.stats.Denied++
	}
	if fresh && f.connected {
		// The first report of a BucketId subscribes to it; it carries
		// this first request, as Envoy's does.
		f.queue(b, now)
	}
	return b, ok
}

// State returns the bucket's state now, or false if the bucket is not
// tracked (never requested, abandoned, or its expired behaviour ran out).
func (f *Filter) State(id map[string]string) (BucketState, bool) {
	h := f.idHash(id)
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.lookup(h, id, now)
	if b == nil {
		return BucketState{}, false
	}
	st := BucketState{
		Phase:    b.phase,
		Strategy: b.strategy,
		Allowed:  b.totalAllowed,
		Denied:   b.totalDenied,
	}
	switch {
	case b.phase == PhaseActive && b.expires:
		st.ExpiresAt = b.expiresAt
	case b.phase == PhaseExpired:
		st.ExpiresAt = b.abandonAt
	}
	if b.strategy.Kind == KindTokenBucket {
		b.tokens.refill(b.strategy.TokenBucket, now)
		st.Tokens = b.tokens.tokens
	}
	return st, true
}

// Stats returns the filter's totals.
func (f *Filter) Stats() Stats {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	// Bring every bucket up to now, so that Buckets does not count one
	// whose expired behaviour has run out but that nothing has looked at.
	f.sweep(now)
	return f.stats
}

// sweep brings every bucket up to now, erasing the ones no longer
// tracked, and returns the live ones.
func (f *Filter) sweep(now time.Time) []*bucket {
	var live []*bucket
	for _, chain := range f.buckets {
		for b := chain; b != nil; {
			next := b.next // live may erase b and clear its next
			if f.live(b, now) {
				live = append(live, b)
			}
			b = next
		}
	}
	return live
}

// idHash hashes a bucket id independently of the map's order (BucketId
// documents that the order of keys does not matter): a sum of one hash per
// entry. Collisions only cost a map comparison.
func (f *Filter) idHash(id map[string]string) uint64 {
	var sum uint64
	for k, v := range id {
		// Mix key and value asymmetrically, so that {a: b} and {b: a}
		// differ.
		e := maphash.String(f.seed, k)*0x9e3779b97f4a7c15 ^ bits.RotateLeft64(maphash.String(f.seed, v), 31)
		sum += e ^ e>>29
	}
	return sum
}

// lookup returns the live bucket (h, id), erasing it if its expired
// behaviour has run out, or nil.
func (f *Filter) lookup(h uint64, id map[string]string, now time.Time) *bucket {
	for b := f.buckets[h]; b != nil; b = b.next {
		if maps.Equal(b.id, id) {
			if f.live(b, now) {
				return b
			}
			return nil
		}
	}
	return nil
}

// live brings b up to now and says whether it is still tracked; a bucket
// whose expired behaviour has run out is erased here. Expiry is evaluated
// lazily, when the bucket is next used, reported or asked about: no timer
// per bucket, and the state at any instant is the same as if one fired.
func (f *Filter) live(b *bucket, now time.Time) bool {
	if b.erased {
		return false
	}
	if b.phase == PhaseActive && b.expires && !now.Before(b.expiresAt) {
		f.expire(b)
	}
	if b.phase == PhaseExpired && !now.Before(b.abandonAt) {
		f.erase(b)
		return false
	}
	return true
}

// expire moves b from its active assignment to the expired behaviour, as
// of the instant the assignment expired.
func (f *Filter) expire(b *bucket) {
	at := b.expiresAt
	b.expires, b.expiresAt = false, time.Time{}
	e := f.cfg.Expired
	switch {
	case e == nil:
		b.phase = PhaseNoAssignment
		b.setStrategy(f.cfg.NoAssignment, at)
	case e.ReuseLast:
		b.phase, b.abandonAt = PhaseExpired, at.Add(e.Timeout)
	default:
		b.phase, b.abandonAt = PhaseExpired, at.Add(e.Timeout)
		if b.strategy != e.Fallback {
			b.setStrategy(e.Fallback, at)
		}
	}
}

// create starts tracking the bucket (h, id) in the no-assignment phase.
func (f *Filter) create(h uint64, id map[string]string, now time.Time) *bucket {
	id = maps.Clone(id)
	b := &bucket{
		id:         id,
		pb:         &rlqsv3.BucketId{Bucket: id},
		key:        canonicalKey(id),
		hash:       h,
		next:       f.buckets[h],
		phase:      PhaseNoAssignment,
		lastReport: now,
	}
	b.setStrategy(f.cfg.NoAssignment, now)
	f.buckets[h] = b
	f.stats.Buckets++
	return b
}

// erase stops tracking b, with its usage: an abandoned bucket is not
// reported again, not even what was queued for it.
func (f *Filter) erase(b *bucket) {
	if b.erased {
		return
	}
	b.erased = true
	f.stats.Buckets--
	if p := f.buckets[b.hash]; p == b {
		if b.next == nil {
			delete(f.buckets, b.hash)
		} else {
			f.buckets[b.hash] = b.next
		}
	} else {
		for ; p != nil; p = p.next {
			if p.next == b {
				p.next = b.next
				break
			}
		}
	}
	b.next = nil
	f.outbox = slices.DeleteFunc(f.outbox, func(q queued) bool { return q.b == b })
}

// canonicalKey spells id with its keys sorted, unambiguously (quoted), to
// order reports.
func canonicalKey(id map[string]string) string {
	var sb strings.Builder
	for i, k := range slices.Sorted(maps.Keys(id)) {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Quote(k))
		sb.WriteByte(':')
		sb.WriteString(strconv.Quote(id[k]))
	}
	return sb.String()
}

// setExpiry sets when the active assignment expires, if it does.
func (b *bucket) setExpiry(expires bool, at time.Time) {
	if !expires {
		at = time.Time{}
	}
	b.expires, b.expiresAt = expires, at
}

func (b *bucket) setStrategy(s Strategy, now time.Time) {
	b.strategy = s
	if s.Kind == KindTokenBucket {
		b.tokens.reset(s.TokenBucket, now)
	} else {
		b.tokens = tokenState{}
	}
}

// decide applies b's strategy to one request and counts it.
func (b *bucket) decide(now time.Time) bool {
	var ok bool
	if b.strategy.Kind == KindTokenBucket {
		ok = b.tokens.take(b.strategy.TokenBucket, now)
	} else {
		ok = b.strategy.BlanketRule != typev3.RateLimitStrategy_DENY_ALL
	}
	if ok {
		b.allowed++
		b.totalAllowed++
	} else {
		b.denied++
		b.totalDenied++
	}
	return ok
}

// usage takes b's usage since its last report and starts the next.
func (b *bucket) usage(now time.Time) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	el := max(now.Sub(b.lastReport), 0)
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           b.pb,
		TimeElapsed:        durationpb.New(el),
		NumRequestsAllowed: b.allowed,
		NumRequestsDenied:  b.denied,
	}
	b.allowed, b.denied = 0, 0
	if now.After(b.lastReport) {
		b.lastReport = now
	}
	return u
}

// queue takes b's usage for an immediate report and wakes the sender.
func (f *Filter) queue(b *bucket, now time.Time) {
	f.outbox = append(f.outbox, queued{b: b, u: b.usage(now)})
	select {
	case f.wake <- struct{}{}:
	default: // a wake is already pending; the sender takes the whole outbox
	}
}

// takeReport empties the outbox and, if all, adds every bucket's usage
// (sorted by id, so that reports read the same from run to run). It
// returns nil if there is nothing to send.
func (f *Filter) takeReport(all bool, now time.Time) *rlqsv3.RateLimitQuotaUsageReports {
	var us []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
	out := f.outbox
	f.outbox = nil
	for _, q := range out {
		if f.live(q.b, now) {
			us = append(us, q.u)
		}
	}
	if all {
		live := f.sweep(now)
		slices.SortFunc(live, func(a, b *bucket) int { return cmp.Compare(a.key, b.key) })
		for _, b := range live {
			us = append(us, b.usage(now))
		}
	}
	if len(us) == 0 {
		return nil
	}
	return &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: us}
}

// errIgnored marks a bucket action the filter does not apply.
var errIgnored = errors.New("bucket action ignored")

// apply applies a response's bucket actions in order.
func (f *Filter) apply(resp *rlqsv3.RateLimitQuotaResponse) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Responses++
	for _, a := range resp.GetBucketAction() {
		if err := f.applyAction(a, now); err != nil {
			f.stats.IgnoredActions++
			f.log.Debug("rlqsfilter: bucket action ignored", "bucket", a.GetBucketId().GetBucket(), "err", err)
		}
	}
}

func (f *Filter) applyAction(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now time.Time) error {
	id := a.GetBucketId().GetBucket()
	if len(id) == 0 {
		// As Envoy's filter does: an action must name its bucket.
		return fmt.Errorf("%w: no bucket_id", errIgnored)
	}
	b := f.lookup(f.idHash(id), id, now)
	if b == nil {
		// Never reported (or abandoned since): the server answers a
		// report this filter did not send, so there is nothing to apply
		// it to.
		return fmt.Errorf("%w: unknown bucket", errIgnored)
	}
	switch act := a.GetBucketAction().(type) {
	case *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_:
		qa := act.QuotaAssignmentAction
		s, err := StrategyFromProto(qa.GetRateLimitStrategy())
		if err != nil {
			return fmt.Errorf("%w: rate_limit_strategy: %w", errIgnored, err)
		}
		var ttl time.Duration
		expires := qa.GetAssignmentTimeToLive() != nil
		if expires {
			if err := qa.GetAssignmentTimeToLive().CheckValid(); err != nil {
				return fmt.Errorf("%w: assignment_time_to_live: %w", errIgnored, err)
			}
			ttl = max(qa.GetAssignmentTimeToLive().AsDuration(), 0)
		}
		if b.phase == PhaseActive && b.strategy == s {
			// The same strategy as the active assignment: only its
			// duration is extended; its token bucket carries on.
			b.setExpiry(expires, now.Add(ttl))
			return nil
		}
		// A different strategy, or no active assignment: end the current
		// one, report the bucket's usage at once, apply the new one with a
		// new (full) token bucket.
		if f.connected {
			f.queue(b, now)
		}
		b.phase = PhaseActive
		b.setStrategy(s, now)
		b.setExpiry(expires, now.Add(ttl))
		b.abandonAt = time.Time{}
		return nil
	case *rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_:
		f.erase(b)
		return nil
	default:
		return fmt.Errorf("%w: no action set", errIgnored)
	}
}
