// Package decision owns the one path by which every entry point of the API
// (the Connect service, Envoy's rate-limit service and the forward-auth
// /check endpoint) decides: an adapter turns its input into an [Input],
// [Decider.Validate] checks it once and builds the store request under the
// namespaced counter key, [Decider.Decide] asks the store in one call, and
// the outcome step records the decision metrics, applies shadow mode (an
// explicit Shadowed flag on each [Outcome]) and tells the [Pool] (the
// other regions) what was decided.
//
// Validation happens here and only here: the stores trust the requests
// they get (a valid limit, 1 <= Hits <= Limit.Limit, a key of at most
// [region.MaxKeyBytes]).
//
// Every limit has a scope ([rules.Scope]). A global limit counts under the
// namespaced key, which the Pool carries to the other regions; a
// region-scoped one counts under a key of its own ([RegionKey]) that is
// never replicated. A region-local algorithm (token bucket, sliding log:
// not [window.Algorithm.Counted]) asked for with global scope is refused
// as invalid_argument while the Pool says the cluster has more than one
// region, never run per region in silence.
package decision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// outcome is what a decision counts as: a value of the outcome label of
// rlcluster_decisions_total.
type outcome uint8

const (
	outcomeAllowed outcome = iota
	outcomeDenied
	// outcomeGuardDenied is a denial by the burst guard (see
	// [guard.Guard]): the store might have admitted the request, but this
	// region had spent its share of the headroom for the horizon in which
	// it cannot know what the other regions admitted.
	outcomeGuardDenied
	// outcomeShadowDenied is a denial that shadow mode answered as allowed.
	outcomeShadowDenied
	outcomeError
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "denied", "guard_denied", "shadow_denied", "error"}

// String returns o's label value.
func (o outcome) String() string { return outcomeNames[o] }

// Values of the rule label besides configured rule names and Envoy limits.
const (
	LabelInline  = "inline"  // an inline limit
	LabelUnknown = "unknown" // a request naming no known rule
)

// Pool is what the decision path needs of the other regions, as one node
// of the gossip pool sees them: the one seam between a decision and
// replication. gossip.Node implements it; nil means a single region. Every
// method runs on the request path and must not block on I/O.
type Pool interface {
	// Regions returns how many regions the cluster has now, this one
	// included. It is called only to judge a region-local algorithm with
	// global scope.
	Regions() int
	// Dirty queues this region's new total for a bucket (t.Count) for the
	// other regions. It is called after every admitted Check of a counter
	// algorithm (sliding or fixed window) with global scope, and after a
	// Reset: it must queue the total and return.
	Dirty(t region.Total)
	// Decided tells the pool that the store decided a consuming request
	// of a counter algorithm (of either scope) for key under limit l, in
	// bucket, for the accuracy observer.
	Decided(key string, l window.Limit, bucket int64)
	// GuardView returns the pool as the burst guard sees it at now (see
	// [guard.View]); the guard asks at most every few milliseconds.
	GuardView(now time.Time) guard.View
	// RemoteAges returns, for each remote region heard from, how old the
	// newest total merged from it is; a region missing from the map shows
	// no age. It is called at most once per RPC.
	RemoteAges() map[string]time.Duration
}

// burstGuard bounds what this node admits for a key before it can know
// what the other regions admitted: [guard.Node] implements it. Both
// methods run on the request path and must not block.
type burstGuard interface {
	// Admit reports whether the hits may go to the store, and with which
	// limit (t.StoreLimit); when not, how long until they might.
	Admit(now time.Time, key string, l window.Limit, hits uint64) (t guard.Ticket, ok bool, retryAfter time.Duration)
	// Done tells the guard the store's answer to an admitted ticket. It
	// returns a retry-after when the store's denial is the guard's (the
	// store decided against a limit lowered to this region's share, and
	// the full limit would have admitted the hits), else 0.
	Done(t *guard.Ticket, res *region.Result) (guardRetry time.Duration)
}

// Config configures a [Decider]. Every field is required unless it says
// otherwise; the API's Config documents the defaults it fills in.
type Config struct {
	Store  region.Store
	Region string // this node's region, for replicated totals
	// Pool is the other regions; nil means a single region.
	Pool        Pool
	MaxKeyBytes int // at most [MaxKeyBytes]
	MaxHits     uint64
	MaxWindow   time.Duration
	MaxLogLimit uint64
	// MaxInlineLimit bounds an inline limit's count; 0 means
	// window.MaxLimit.
	MaxInlineLimit uint64
	// Guard, when set with a Pool, is the burst guard: it is asked, under
	// the Pool's view, before the store about every consuming counter
	// request with global scope, and told the store's answer. Nil: no
	// guard (a single region, or --burst-guard=false).
	Guard *guard.Guard
	// ShadowMode answers every denial allowed, except Envoy's, whose
	// statuses stay as decided (the Envoy adapter changes overall_code).
	ShadowMode bool
	// ResetTTL is how long the node trusts what it last read of a key's
	// reset instant before reading it again (see [Decider.Reset]);
	// default [DefaultResetTTL].
	ResetTTL time.Duration
	// MaxResetKeys bounds the keys whose reset instant the node keeps;
	// default 1<<17.
	MaxResetKeys int
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
}

// Decider validates, decides and records. It is safe for concurrent use.
type Decider struct {
	cfg       Config
	guard     burstGuard // nil: none
	rules     atomic.Pointer[rules.Set]
	resets    *resetCache
	decisions *prometheus.CounterVec   // rule, outcome
	latency   *prometheus.HistogramVec // method
	storeErrs prometheus.Counter
	// observers and counters cache the metrics' children by method and
	// by label (counters: *outcomeCounters), so that a decision does not
	// hash its labels again; both hold configured names only.
	observers sync.Map
	counters  sync.Map
}

// outcomeCounters are one label's decision counters by outcome, each made
// on first use so that only outcomes that happened are exported.
type outcomeCounters [numOutcomes]atomic.Value // of prometheus.Counter

// count returns label's counter of o.
func (d *Decider) count(label string, o outcome) prometheus.Counter {
	c, ok := d.counters.Load(label)
	if !ok {
		c, _ = d.counters.LoadOrStore(label, new(outcomeCounters))
	}
	oc := c.(*outcomeCounters)
	if v := oc[o].Load(); v != nil {
		return v.(prometheus.Counter)
	}
	ctr := d.decisions.WithLabelValues(label, o.String())
	oc[o].Store(ctr)
	return ctr
}

// latencyBuckets go from 50 µs to 1 s in 24 steps of about x1.54.
var latencyBuckets = prometheus.ExponentialBucketsRange(50e-6, 1, 24)

// New checks cfg, registers the decision metrics and returns a Decider
// with rs (nil: none) as its rules.
func New(cfg Config, rs *rules.Set) (*Decider, error) {
	if cfg.Store == nil || cfg.Logger == nil || cfg.Registerer == nil {
		return nil, errors.New("decision: Config.Store, Logger and Registerer are required")
	}
	if cfg.MaxKeyBytes < 1 || cfg.MaxKeyBytes > MaxKeyBytes {
		return nil, fmt.Errorf("decision: Config.MaxKeyBytes %d must be from 1 to %d (%d, the longest key replication carries, less %d for the namespace prefix)",
			cfg.MaxKeyBytes, MaxKeyBytes, region.MaxKeyBytes, MaxPrefixBytes)
	}
	if cfg.ResetTTL <= 0 {
		cfg.ResetTTL = DefaultResetTTL
	}
	if cfg.MaxResetKeys <= 0 {
		cfg.MaxResetKeys = 1 << 17
	}
	d := &Decider{
		cfg:    cfg,
		resets: newResetCache(cfg.ResetTTL, cfg.MaxResetKeys),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rlcluster_decisions_total",
			Help: "Decisions made by Check, CheckBatch and Envoy's ShouldRateLimit, by rule (a rule name, \"inline\", \"unknown\" or an Envoy limit's domain.key_value path) and outcome (allowed, denied, guard_denied: denied by the burst guard before the store, shadow_denied: denied but answered allowed in shadow mode, error).",
		}, []string{"rule", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rlcluster_decision_duration_seconds",
			Help:    "Time to answer one RPC (Check, CheckBatch or Peek), from validation to response.",
			Buckets: latencyBuckets,
		}, []string{"method"}),
		storeErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rlcluster_store_errors_total",
			Help: "Store calls that failed.",
		}),
	}
	for _, c := range []prometheus.Collector{d.decisions, d.latency, d.storeErrs} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("decision: register metrics: %w", err)
		}
	}
	if cfg.Guard != nil && cfg.Pool != nil {
		g, err := guard.NewNode(cfg.Guard, cfg.Pool.GuardView, cfg.Registerer)
		if err != nil {
			return nil, fmt.Errorf("decision: %w", err)
		}
		d.guard = g
	}
	d.rules.Store(rs)
	return d, nil
}

// Rules returns the rules in use (nil when none).
func (d *Decider) Rules() *rules.Set { return d.rules.Load() }

// SetRules atomically replaces the rules in use; requests already being
// validated finish with the rules they started with.
func (d *Decider) SetRules(rs *rules.Set) { d.rules.Store(rs) }

// ShadowMode reports whether the whole node is in shadow mode.
func (d *Decider) ShadowMode() bool { return d.cfg.ShadowMode }

// Observe records how long one call of method took since start.
func (d *Decider) Observe(method string, start time.Time) {
	o, ok := d.observers.Load(method)
	if !ok {
		o, _ = d.observers.LoadOrStore(method, d.latency.WithLabelValues(method))
	}
	o.(prometheus.Observer).Observe(time.Since(start).Seconds())
}

// Input is an entry point's request, before validation.
type Input struct {
	// NS is the namespace the key lives in.
	NS Namespace
	// Field prefixes the names of fields in error messages ("checks[3].").
	Field string
	// HitsField names the hits in error messages; default "hits".
	HitsField string
	// Key is the caller's key; for Envoy, the encoded descriptor
	// ([EnvoyDescriptor]).
	Key string
	// StoreKey, when set, is the namespaced store key of Key, already
	// built by the adapter ([EnvoyStoreKey]), so that it is not built
	// twice.
	StoreKey string
	// Hits are the hits to spend; 0 means 1.
	Hits uint64
	// Peek decides without consuming anything.
	Peek bool
	// Rule names the rule (Rule and ForwardAuth; in Inline it must be
	// empty, and naming one makes the namespace Rule).
	Rule string
	// Limit is an inline limit from the wire (Inline).
	Limit *ratelimitv1.Limit
	// Envoy is the matched or override limit (Envoy; nil when none
	// applies, which checks the key and hits only). Its hits may exceed
	// its limit and its limit may be 0: the adapter answers those
	// over the limit with [Decider.Refuse], as Envoy expects, instead of an
	// error.
	Envoy *rules.EnvoyLimit
	// Now is the instant of the decision.
	Now time.Time
	// Scope, when set, binds the caller's token to rules and key
	// prefixes ([auth.Scope]); a request outside it is permission_denied.
	Scope *auth.Scope
}

// Request is a validated request, ready for [Decider.Decide].
type Request struct {
	// Store is what the store decides, under the namespaced key.
	Store region.Request
	// Label is the rule label of the decision metrics: a configured rule
	// or domain's name, [LabelInline] or [LabelUnknown]; never a caller's
	// string.
	Label string
	// Shadow answers a denial as allowed.
	Shadow bool
	// Scope is the limit's scope: a region-scoped decision is never
	// replicated.
	Scope rules.Scope
}

// Outcome is a decided request.
type Outcome struct {
	region.Result
	// Spec is the limit the request was decided against: its window and
	// algorithm (Result.Limit is its count).
	Spec window.Limit
	// Shadowed is true when the store denied the request and shadow mode
	// answered it allowed (Result.Allowed is then true).
	Shadowed bool
	// Scope is the scope that applied.
	Scope rules.Scope
	// GuardDenied is true when the burst guard denied the request before
	// the store (see [Config.Guard]).
	GuardDenied bool
}

// Invalid returns an invalid_argument error whose message is the formatted
// text.
func Invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// Message returns err's message without the code prefix Connect adds.
func Message(err error) string {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// Label returns the metric label of a request naming rule: its name when
// it is a configured rule, else [LabelUnknown].
func (d *Decider) Label(rule string) string {
	if _, ok := d.rules.Load().Lookup(rule); ok {
		return rule
	}
	return LabelUnknown
}

// RecordError counts an invalid request under label.
func (d *Decider) RecordError(label string) {
	d.count(label, outcomeError).Inc()
}

// Validate checks in and returns the store request it asks for, or an
// invalid_argument error whose message names the field. It is the only
// place requests are checked: key bounds, the rule or inline limit, hits
// (0 means 1; at most the limit, except Envoy's; at most MaxHits), the
// token's scope (permission_denied), and the counter key in in.NS's
// namespace. An invalid request that would have consumed is counted as an
// error under the returned Label.
func (d *Decider) Validate(in Input) (Request, error) {
	r, err := d.validate(in)
	if err != nil && !in.Peek {
		d.RecordError(r.Label)
	}
	return r, err
}

func (d *Decider) validate(in Input) (Request, error) {
	f := in.Field
	hitsField := in.HitsField
	if hitsField == "" {
		hitsField = "hits"
	}
	r := Request{Label: LabelInline}
	ns := in.NS
	switch {
	case ns == Envoy && in.Envoy != nil:
		r.Label = in.Envoy.Stat
	case ns == Envoy || ns == ForwardAuth || in.Rule != "":
		r.Label = LabelUnknown
	}
	if in.Hits > d.cfg.MaxHits {
		return r, Invalid("%s%s: %d is more than the maximum of %d", f, hitsField, in.Hits, d.cfg.MaxHits)
	}
	switch {
	case in.Key == "":
		return r, Invalid("%skey: must not be empty", f)
	case len(in.Key) > d.cfg.MaxKeyBytes && ns == Envoy:
		return r, Invalid("%s: domain and entries make a %d-byte key, more than the maximum of %d", strings.TrimSuffix(f, "."), len(in.Key), d.cfg.MaxKeyBytes)
	case len(in.Key) > d.cfg.MaxKeyBytes:
		return r, Invalid("%skey: %d bytes, more than the maximum of %d", f, len(in.Key), d.cfg.MaxKeyBytes)
	}
	if err := checkScope(in); err != nil {
		if in.Rule != "" {
			r.Label = d.Label(in.Rule)
		}
		return r, err
	}
	var l window.Limit
	switch {
	case ns == Envoy && in.Envoy == nil:
		return r, nil // no limit applies: valid, with nothing to decide
	case ns == Envoy:
		l = in.Envoy.Limit
		r.Shadow, r.Scope = in.Envoy.Shadow, in.Envoy.Scope
		if n := d.refusing(l.Algorithm, r.Scope); n > 1 && !in.Envoy.Unlimited {
			return r, refuseRegionLocal(n, l.Algorithm, f+"rate_limit.scope: limit "+in.Envoy.Stat, "its", ": region on its rate_limit", false)
		}
	case in.Rule != "" && in.Limit != nil:
		return r, Invalid("%srule: set exactly one of rule and limit, not both", f)
	case in.Rule == "" && in.Limit == nil:
		return r, Invalid("%slimit: required when no rule is named (set exactly one of rule and limit)", f)
	case in.Rule != "":
		rule, ok := d.rules.Load().Lookup(in.Rule)
		if !ok {
			return r, Invalid("%srule: unknown rule %q", f, truncate(in.Rule, 128))
		}
		if ns == Inline {
			ns = Rule
		}
		r.Label, r.Shadow, r.Scope, l = rule.Name, rule.Shadow, rule.Scope, rule.Limit
		if n := d.refusing(l.Algorithm, r.Scope); n > 1 {
			return r, refuseRegionLocal(n, l.Algorithm, fmt.Sprintf("%srule: rule %q: scope", f, rule.Name), "the rule's", ": region in its rules file", false)
		}
	default:
		var err error
		if l, r.Scope, err = d.inlineLimit(f, in.Limit); err != nil {
			return r, err
		}
		if err := checkCeilings(f, in.Scope, l); err != nil {
			return r, err
		}
	}
	hits := max(in.Hits, 1)
	if ns != Envoy && hits > l.Capacity() {
		if l.Burst > 0 {
			return r, Invalid("%s%s: %d is more than the burst of %d", f, hitsField, hits, l.Burst)
		}
		return r, Invalid("%s%s: %d is more than the limit of %d", f, hitsField, hits, l.Limit)
	}
	key := in.StoreKey
	switch {
	case key == "":
		key = counterKey(ns, in.Rule, in.Key, r.Scope)
	case r.Scope == rules.ScopeRegion:
		key = tagRegion + key // StoreKey is the global-scope key
	}
	r.Store = region.Request{Key: key, Limit: l, Hits: hits, Now: in.Now, Peek: in.Peek}
	r.Shadow = r.Shadow || (d.cfg.ShadowMode && ns != Envoy)
	return r, nil
}

// checkScope refuses a request that its token's scope does not allow.
func checkScope(in Input) error {
	sc := in.Scope
	if sc == nil {
		return nil
	}
	f := in.Field
	switch {
	case in.NS == Envoy:
		return nil // bound by domain, in the Envoy adapter
	case in.Rule == "" && in.NS == Inline && !sc.AllowInline():
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%slimit: this token may not use inline limits (its scope does not name inline=yes)", f))
	case in.Rule != "" && !sc.AllowRule(in.Rule):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%srule: this token may not use rule %q", f, truncate(in.Rule, 128)))
	case in.NS != ForwardAuth && !sc.AllowKey(in.Key):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%skey: this token may only use keys with its prefixes", f))
	}
	return nil
}

// checkCeilings refuses an inline limit over its token's ceilings.
func checkCeilings(f string, sc *auth.Scope, l window.Limit) error {
	switch {
	case sc == nil:
		return nil
	case sc.MaxWindow > 0 && max(l.Window, l.Calendar.Unit.Longest()) > sc.MaxWindow:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%slimit.window: this token may not ask for a window longer than %v", f, sc.MaxWindow))
	case sc.MaxLimit > 0 && l.Limit > sc.MaxLimit:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%slimit.limit: this token may not ask for a limit over %d", f, sc.MaxLimit))
	}
	return nil
}

// refusing returns how many regions the Pool sees when a limit of
// algorithm a with scope sc is refused in a cluster of more than one
// ([rules.RegionLocal]), else 1.
func (d *Decider) refusing(a window.Algorithm, sc rules.Scope) int {
	if d.cfg.Pool == nil || !rules.RegionLocal(a, sc) {
		return 1
	}
	return max(d.cfg.Pool.Regions(), 1)
}

// refuseRegionLocal is the invalid_argument error that refuses a
// region-local algorithm a with global scope in a cluster of n regions.
// where names the field and the limit, whose the scope's owner, and
// setRegion how to ask for region scope; proto names the algorithms as
// the API's enum does rather than as configuration does.
func refuseRegionLocal(n int, a window.Algorithm, where, whose, setRegion string, proto bool) error {
	name := window.Algorithm.String
	if proto {
		name = func(a window.Algorithm) string { return "ALGORITHM_" + strings.ToUpper(a.String()) }
	}
	return Invalid("%s: %s is region-local and %s scope is global, and this cluster has %d regions: "+
		"set scope%s for one limit per region, or use %s or %s for one global limit",
		where, name(a), whose, n, setRegion, name(window.SlidingWindow), name(window.FixedWindow))
}

// inlineLimit converts and checks an inline limit, within MaxWindow and
// MaxLogLimit, and its scope.
func (d *Decider) inlineLimit(field string, lim *ratelimitv1.Limit) (window.Limit, rules.Scope, error) {
	l, err := d.inlineWindow(field, lim)
	if err != nil {
		return l, 0, err
	}
	var sc rules.Scope
	switch s := lim.GetScope(); s {
	case ratelimitv1.Scope_SCOPE_UNSPECIFIED, ratelimitv1.Scope_SCOPE_GLOBAL:
		sc = rules.ScopeGlobal
	case ratelimitv1.Scope_SCOPE_REGION:
		sc = rules.ScopeRegion
	default:
		return l, 0, Invalid("%slimit.scope: unknown scope %d (want SCOPE_GLOBAL or SCOPE_REGION)", field, int32(s))
	}
	if n := d.refusing(l.Algorithm, sc); n > 1 {
		return l, 0, refuseRegionLocal(n, l.Algorithm, field+"limit.scope", "the", " to SCOPE_REGION", true)
	}
	return l, sc, nil
}

// inlineWindow converts and checks an inline limit's limit, window and
// algorithm.
func (d *Decider) inlineWindow(field string, lim *ratelimitv1.Limit) (window.Limit, error) {
	var l window.Limit
	if n := lim.GetLimit(); n < 1 || n > window.MaxLimit {
		return l, Invalid("%slimit.limit: must be from 1 to 2^53 (%d), got %d", field, uint64(window.MaxLimit), n)
	}
	if m := d.cfg.MaxInlineLimit; m > 0 && lim.GetLimit() > m {
		return l, Invalid("%slimit.limit: %d is more than the maximum of %d", field, lim.GetLimit(), m)
	}
	l.Limit = lim.GetLimit()
	if lim.GetCalendar() != ratelimitv1.Calendar_CALENDAR_UNSPECIFIED || lim.GetTimeZone() != "" {
		return d.inlineCalendar(field, lim, l)
	}
	w := lim.GetWindow()
	if w == nil {
		return l, Invalid("%slimit.window: required, from %v to %v", field, window.MinWindow, window.MaxWindow)
	}
	if w.CheckValid() != nil {
		return l, Invalid("%slimit.window: not a valid duration (seconds %d, nanos %d)", field, w.GetSeconds(), w.GetNanos())
	}
	if err := rules.CheckWindow(w.AsDuration()); err != nil {
		return l, Invalid("%slimit.window: %v", field, err)
	}
	if w.AsDuration() > d.cfg.MaxWindow {
		return l, Invalid("%slimit.window: %v is more than the maximum of %v", field, w.AsDuration(), d.cfg.MaxWindow)
	}
	l.Window = w.AsDuration()
	switch a := lim.GetAlgorithm(); a {
	case ratelimitv1.Algorithm_ALGORITHM_UNSPECIFIED, ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW:
		l.Algorithm = window.SlidingWindow
	case ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW:
		l.Algorithm = window.FixedWindow
	case ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET:
		l.Algorithm = window.TokenBucket
	case ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG:
		l.Algorithm = window.SlidingLog
	case ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW_TWO_BUCKET:
		l.Algorithm = window.SlidingWindowTwoBucket
	default:
		return l, Invalid("%slimit.algorithm: unknown algorithm %d", field, int32(a))
	}
	if lim.GetStrict() {
		if !l.Algorithm.Trails() {
			return l, Invalid("%slimit.strict: applies to the sliding window algorithm only, not %s", field, l.Algorithm)
		}
		l.Strict = true
	}
	if b := lim.GetBurst(); b > 0 {
		if l.Algorithm != window.TokenBucket {
			return l, Invalid("%slimit.burst: applies to the token bucket algorithm only, not %s", field, l.Algorithm)
		}
		if b/window.MaxBurstFactor > l.Limit || (b/window.MaxBurstFactor == l.Limit && b%window.MaxBurstFactor != 0) || b > window.MaxLimit {
			return l, Invalid("%slimit.burst: must be at most %d times the limit (%d) and at most 2^53, got %d", field, window.MaxBurstFactor, l.Limit, b)
		}
		l.Burst = b
	}
	if l.Algorithm == window.SlidingLog && l.Limit > d.cfg.MaxLogLimit {
		return l, Invalid("%slimit.limit: %d is more than the maximum of %d for sliding_log (its memory grows with the limit)", field, l.Limit, d.cfg.MaxLogLimit)
	}
	if err := l.Validate(); err != nil {
		return l, Invalid("%slimit: %v", field, err)
	}
	return l, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Decide asks the store for every request in one call and writes the
// outcomes to out (len(out) == len(reqs)), recording each (see record).
// Each request's key is first pointed at its current generation (see
// [Decider.Reset]), which may read reset instants in one store call
// before.
// A store failure is unavailable (and counted); a done ctx is its own
// code.
func (d *Decider) Decide(ctx context.Context, reqs []Request, out []Outcome) error {
	stale := d.resetGens(reqs)
	if len(stale) > 0 && d.guard != nil {
		// The guard's path decides a subset of the requests: read the
		// resets first there.
		if err := d.readResets(ctx, reqs, stale); err != nil {
			return d.storeFailed(ctx, reqs, err)
		}
		stale = nil
	}
	var sreqs []region.Request
	var res []region.Result
	if len(reqs) == 1 && len(stale) == 0 {
		// The common case in one allocation instead of two.
		one := new(struct {
			req [1]region.Request
			res [1]region.Result
		})
		sreqs, res = one.req[:], one.res[:]
	} else {
		sreqs, res = make([]region.Request, len(reqs), len(reqs)+resetPeeksPer*len(stale)), make([]region.Result, len(reqs)+resetPeeksPer*len(stale))
	}
	for i := range reqs {
		sreqs[i] = reqs[i].Store
	}
	tickets, skip := d.guardBefore(reqs, sreqs, out)
	if skip != nil {
		return d.decideGuarded(ctx, reqs, sreqs, res, out, tickets, skip)
	}
	sreqs = append(sreqs, resetPeeks(reqs, stale)...)
	if err := d.cfg.Store.Check(ctx, sreqs, res); err != nil {
		return d.storeFailed(ctx, reqs, err)
	}
	redo := d.learnResets(reqs, stale, res[len(reqs):])
	for i := range reqs {
		if redo == nil || !redo[i] {
			out[i] = d.record(&reqs[i], res[i], byStore)
		}
	}
	if redo != nil {
		return d.decideAgain(ctx, reqs, out, redo)
	}
	return nil
}

// decideAgain decides reqs[i] again for every i with redo[i]: each was
// decided under a generation that a reset the same call read has ended
// (what it consumed there no longer counts).
func (d *Decider) decideAgain(ctx context.Context, reqs []Request, out []Outcome, redo []bool) error {
	var again []Request
	var idx []int
	for i, r := range redo {
		if r {
			again, idx = append(again, reqs[i]), append(idx, i)
		}
	}
	outs := make([]Outcome, len(again))
	if err := d.Decide(ctx, again, outs); err != nil {
		return err
	}
	for j, i := range idx {
		out[i] = outs[j]
	}
	return nil
}

// storeFailed counts a failed store call and returns its error: unavailable,
// or ctx's own code when ctx is done.
func (d *Decider) storeFailed(ctx context.Context, reqs []Request, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return connect.NewError(connect.CodeOf(ctxErr), ctxErr)
	}
	d.storeErrs.Inc()
	d.cfg.Logger.Warn("store check failed", "checks", len(reqs), "err", err)
	for i := range reqs {
		if !reqs[i].Store.Peek {
			d.count(reqs[i].Label, outcomeError).Inc()
		}
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("store unavailable: %w", err))
}

// Refuse is the outcome of a request that nothing can admit (an Envoy
// limit of 0, or more hits than the limit), decided without the store;
// res describes it.
func (d *Decider) Refuse(r Request, res region.Result) Outcome {
	res.Allowed = false
	return d.record(&r, res, byRefusal)
}

// source is what decided a request.
type source uint8

const (
	byStore   source = iota
	byGuard          // the burst guard: before the store, or claiming its denial
	byRefusal        // nothing: see [Decider.Refuse]
)

// record is the outcome step: it applies shadow mode, counts the decision
// (not a Peek's; the burst guard's denial as guard_denied) and tells the
// Pool what the store decided and what it admitted. A denied shadow
// request is counted as shadow_denied and answered allowed with Shadowed
// set, keeping its retry_after. A denial outside shadow mode counts as
// shadow_denied when the whole node is in shadow mode (Envoy's, whose
// statuses stay as decided).
func (d *Decider) record(r *Request, res region.Result, by source) Outcome {
	o := Outcome{Result: res, Spec: r.Store.Limit, Scope: r.Scope, GuardDenied: by == byGuard}
	peek := r.Store.Peek
	counted := r.Store.Limit.Algorithm.Counted()
	if d.cfg.Pool != nil && by == byStore && !peek && counted {
		d.cfg.Pool.Decided(r.Store.Key, r.Store.Limit, res.Bucket)
	}
	switch {
	case by == byGuard && !r.Shadow && !d.cfg.ShadowMode:
		d.count(r.Label, outcomeGuardDenied).Inc()
	case !res.Allowed && r.Shadow:
		o.Allowed, o.Shadowed = true, true
		if !peek {
			d.count(r.Label, outcomeShadowDenied).Inc()
		}
	case peek:
	case !res.Allowed && d.cfg.ShadowMode:
		d.count(r.Label, outcomeShadowDenied).Inc()
	case !res.Allowed:
		d.count(r.Label, outcomeDenied).Inc()
	default:
		d.count(r.Label, outcomeAllowed).Inc()
		if d.cfg.Pool != nil && counted && r.Scope == rules.ScopeGlobal {
			d.cfg.Pool.Dirty(admitted(r, &res, d.cfg.Region))
		}
	}
	return o
}

// admitted is the total to replicate for r, admitted with res in region
// reg (or in the failover store's fallback region, when res names one).
func admitted(r *Request, res *region.Result, reg string) region.Total {
	if res.LocalRegion != "" {
		reg = res.LocalRegion
	}
	return region.Total{
		Key:    r.Store.Key,
		Window: r.Store.Limit.BucketWindow(res.Bucket),
		Bucket: res.Bucket,
		Region: reg,
		Count:  res.Local,
		Trail:  res.LocalTrail,
		// How urgent the total is: the rule's limit (not the burst
		// guard's store limit) and the estimate admitted at.
		Limit:    r.Store.Limit.Limit,
		Estimate: res.Estimate + r.Store.Hits,
	}
}
