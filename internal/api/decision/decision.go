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
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

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
	// NeedsRead reports whether the guard should read the key's counts
	// (a Peek of the store, told with Learn) before Admit: it has no
	// store result for the key at this node.
	NeedsRead(now time.Time, key string, l window.Limit) bool
	// Learn tells the guard a read that NeedsRead asked for.
	Learn(now time.Time, key string, l window.Limit, res *region.Result)
	// Share returns this region's share of the key's headroom, as the
	// guard weighs the regions.
	Share(now time.Time, key string, l window.Limit) float64
	// Refused tells the guard of hits refused outside it and the store
	// (by quota leases' clients): the region's demand.
	Refused(now time.Time, key string, l window.Limit, hits uint64)
}

// Config configures a [Decider]. Every field is required unless it says
// otherwise; the API's Config documents the defaults it fills in.
type Config struct {
	// Store decides; Reset needs one that also restores its own region's
	// totals, as [region.Stack], Redis and Memory do.
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
	mark      resetMark
	resetless resetless                // the Store's, nil when it cannot tell
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
		mark:   resetMark{ttl: cfg.ResetTTL},
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
	d.resetless, _ = cfg.Store.(resetless)
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

// Decide asks the store for every request in one call and writes the
// outcomes to out (len(out) == len(reqs)), recording each (see record).
// Each request's key is first pointed at its current generation (see
// [Decider.Reset]), which may read reset instants in one store call
// before.
// A store failure is unavailable (and counted); a done ctx is its own
// code.
func (d *Decider) Decide(ctx context.Context, reqs []Request, out []Outcome) error {
	look := d.resetGens(reqs)
	if look.peeks() > 0 && d.guard != nil {
		// The guard's path decides a subset of the requests: read the
		// resets first there.
		if err := d.readResets(ctx, reqs, &look); err != nil {
			return d.storeFailed(ctx, reqs, err)
		}
		look = resetLook{}
	}
	var sreqs []region.Request
	var res []region.Result
	switch n := len(reqs) + look.peeks(); {
	case n == 1:
		// The common cases in one allocation instead of two.
		one := new(struct {
			req [1]region.Request
			res [1]region.Result
		})
		sreqs, res = one.req[:], one.res[:]
	case n == 1+resetPeeksPer && len(reqs) == 1:
		one := new(struct {
			req [1 + resetPeeksPer]region.Request
			res [1 + resetPeeksPer]region.Result
		})
		sreqs, res = one.req[:1], one.res[:]
	default:
		sreqs, res = make([]region.Request, len(reqs), n), make([]region.Result, n)
	}
	for i := range reqs {
		sreqs[i] = reqs[i].Store
	}
	d.guardRead(ctx, reqs)
	tickets, skip := d.guardBefore(reqs, sreqs, out)
	if skip != nil {
		return d.decideGuarded(ctx, reqs, sreqs, res, out, tickets, skip)
	}
	sreqs = appendResetPeeks(sreqs, reqs, &look)
	if err := d.cfg.Store.Check(ctx, sreqs, res); err != nil {
		d.mark.release(look.claim)
		return d.storeFailed(ctx, reqs, err)
	}
	redo := d.learnResets(reqs, &look, res[len(reqs):])
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
