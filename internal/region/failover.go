package region

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// Policy says how a [Failover] decides while its primary store is
// unavailable.
type Policy uint8

// The policies. The zero value is PolicyLocal.
const (
	// PolicyLocal decides from the in-memory fallback store, which holds
	// the counts this node last saw in the primary plus what it admitted
	// since, and keeps replicating.
	PolicyLocal Policy = iota
	// PolicyOpen admits every request, as an empty counter would: allowed,
	// remaining = limit - hits. Nothing is counted.
	PolicyOpen
	// PolicyClosed denies every request, with RetryAfter
	// FailoverConfig.ClosedRetryAfter. Nothing is counted.
	PolicyClosed
)

// String returns the policy's configuration name.
func (p Policy) String() string {
	switch p {
	case PolicyLocal:
		return "local"
	case PolicyOpen:
		return "open"
	case PolicyClosed:
		return "closed"
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// ParsePolicy parses "local", "open" or "closed"; "" means local.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", "local":
		return PolicyLocal, nil
	case "open":
		return PolicyOpen, nil
	case "closed":
		return PolicyClosed, nil
	}
	return 0, fmt.Errorf("region: unknown store failure policy %q (want local, open or closed)", s)
}

// DefaultStoreTimeout is FailoverConfig.Timeout's default.
const DefaultStoreTimeout = 50 * time.Millisecond

// FailoverConfig configures a [Failover]. Zero fields mean their default.
type FailoverConfig struct {
	// Region is the local region's name, the primary's. Required.
	Region string
	// Policy decides while the primary is unavailable. Default PolicyLocal.
	Policy Policy
	// Timeout bounds how long a decision waits for the primary; past it,
	// the decision is made under Policy and counted as a failure. It also
	// bounds each recovery probe. Default [DefaultStoreTimeout].
	Timeout time.Duration
	// Threshold is the number of consecutive failures (errors or timeouts)
	// that opens the breaker. Default 3.
	Threshold int
	// ProbeMin is the delay before the first recovery probe after the
	// breaker opens; each failed probe doubles it up to ProbeMax.
	// Defaults 100ms and 5s.
	ProbeMin, ProbeMax time.Duration
	// ClosedRetryAfter is the RetryAfter of PolicyClosed's denials.
	// Default 1s.
	ClosedRetryAfter time.Duration
	// MaxWriteBack bounds the buckets remembered for the write-back of
	// the fallback's counts on recovery; beyond it they are dropped and
	// counted in FailoverStatus.WriteBackDropped. Default 100000.
	MaxWriteBack int
	// Now is the clock, for timestamps and request-less probes.
	// Default time.Now.
	Now func() time.Time
	// Logger gets one line per transition. Default discards.
	Logger *slog.Logger
}

// Mode is which store a [Failover] decides with.
type Mode uint8

// The modes.
const (
	// ModePrimary: decisions go to the primary store.
	ModePrimary Mode = iota
	// ModeFallback: the breaker is open (or probing) and decisions follow
	// the Policy.
	ModeFallback
)

// FailoverStatus is a snapshot of a [Failover]'s state and counters.
type FailoverStatus struct {
	Policy Policy
	Mode   Mode
	// Probing is set while a recovery probe is in flight (half-open).
	Probing bool
	// Since is when the current mode began (zero before the first
	// transition).
	Since time.Time
	// LastError is the last failure of the primary, "" when none.
	LastError string
	// Transitions counts mode changes, both ways.
	Transitions uint64
	// Failures counts primary calls that failed, timeouts included;
	// Timeouts counts those that took longer than Timeout.
	Failures, Timeouts uint64
	// FallbackDecisions counts requests decided under Policy.
	FallbackDecisions uint64
	// WriteBacks counts fallback totals written to the primary (on
	// recovery, or after a failure too short to open the breaker);
	// WriteBackDropped the buckets lost to MaxWriteBack (a failed
	// write-back is retried).
	WriteBacks, WriteBackDropped uint64
}

// ModeName returns "primary" or, in fallback, the policy's name ("local",
// "open", "closed"): the values of the rlcluster_store_mode metric label.
func (s FailoverStatus) ModeName() string {
	if s.Mode == ModePrimary {
		return "primary"
	}
	return s.Policy.String()
}

// String describes the status for /readyz, for example
// "fallback local, primary unavailable since 2026-11-23T04:50:00Z: <error>".
func (s FailoverStatus) String() string {
	if s.Mode == ModePrimary {
		return "primary"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fallback %s, primary unavailable since %s", s.Policy, s.Since.UTC().Format(time.RFC3339))
	if s.Probing {
		b.WriteString(" (probing)")
	}
	if s.LastError != "" {
		b.WriteString(": ")
		b.WriteString(s.LastError)
	}
	return b.String()
}

// Failover is a [Store] that decides with a primary store (Redis) and, while
// the primary fails, under a [Policy]: from an in-memory fallback store
// (PolicyLocal), admitting everything (PolicyOpen) or denying everything
// (PolicyClosed). It is safe for concurrent use.
//
// Timeout and circuit breaker: each Check waits at most Timeout for the
// primary (the primary honours ctx, as every [Store] must; a coalescing
// [Redis] lets a call leave its batch at its deadline and keeps the batch
// intact for the others); a call that errs or times out is decided under
// the policy.
// After Threshold consecutive failures the breaker opens: decisions stop
// going to the primary, and a goroutine probes it (a Peek decision) after
// ProbeMin, doubling the delay to ProbeMax while it fails (the half-open
// state); the first probe that succeeds closes the breaker. Each
// transition is logged once. A Failover that [Open] makes over a Redis that
// did not answer at start begins with the breaker open, probing; see
// [Failover.Ping] for readiness meanwhile.
//
// Counting under PolicyLocal: while the primary answers, the Failover copies
// every counter decision's per-region counts into the fallback (max-merge),
// so that the fallback starts an outage from the counts this node last saw.
// The fallback counts its own admissions under a region of its own, the
// fallback region (Region + "~" + a random id per process, see
// [FallbackRegion]), never under Region: a decision it makes reports
// Result.LocalRegion = the fallback region, so replication sends that
// region's total, a grow-only count of this process's fallback admissions.
// The invariants hold as for any region: the primary's count for Region
// still changes only by its decisions, and every replicated total is one
// that its region (the fallback region) really reached. When the breaker
// closes, the fallback region's totals, and the other regions' totals that
// only the fallback received while the breaker was open, are merged into
// the primary (the write-back), so that decisions on the primary count them
// too and the primary agrees with the other regions again. A
// timed-out call may still be applied by the primary later: such hits are
// counted twice (conservative), never lost.
//
// Token bucket and sliding log state is region-local and not copied: the
// fallback starts them empty.
type Failover struct {
	primary  Store
	fallback *Memory
	cfg      FailoverConfig
	log      *slog.Logger
	fbRegion string
	bounded  bool // the primary bounds its calls at Timeout itself

	open      atomic.Bool  // breaker not closed: decide under the policy
	fails     atomic.Int64 // consecutive failures while closed
	unreached atomic.Bool  // the primary has not answered since start

	mu          sync.Mutex
	probing     bool
	since       time.Time
	lastErr     string
	transitions uint64

	failures, timeouts, fbDecisions atomic.Uint64
	writeBacks, wbDropped           atomic.Uint64

	wbMu    sync.Mutex
	wb      map[BucketRef]*memBucket // the totals to write back, by bucket
	wbOn    atomic.Bool              // a write-back runs outside an outage
	wbLater atomic.Bool              // a writeBackLater is waiting
	wbAny   atomic.Bool              // wb is not empty

	stop     chan struct{}
	stopOnce sync.Once
	probes   sync.WaitGroup
}

var _ Store = (*Failover)(nil)

// ErrTimeout is the failure recorded when the primary does not answer
// within FailoverConfig.Timeout.
var ErrTimeout = errors.New("region: store timeout")

// FallbackRegion returns a fallback region name for region: region + "~" +
// 6 random hex digits, at most MaxRegionName bytes (region is cut to fit
// when it is longer than MaxReplicaOf).
func FallbackRegion(region string) string {
	var id [replicaIDLen / 2]byte
	_, _ = rand.Read(id[:])
	suffix := "~" + hex.EncodeToString(id[:])
	if len(region)+len(suffix) > MaxRegionName {
		region = region[:MaxRegionName-len(suffix)]
	}
	return region + suffix
}

// replicaIDLen is the length of a replica name's id: hex digits.
const replicaIDLen = 6

// MaxReplicaOf is the longest region name whose replicas' names
// (FallbackRegion) keep it whole: MaxRegionName less "~" and the id.
const MaxReplicaOf = MaxRegionName - 1 - replicaIDLen

// IsReplica reports whether name is exactly a name FallbackRegion makes
// for region, uncut: region + "~" + 6 lower-case hex digits. A prefix of
// region, or a name cut to fit, is not one.
func IsReplica(name, region string) bool {
	if len(region) == 0 || len(region) > MaxReplicaOf || len(name) != len(region)+1+replicaIDLen ||
		name[:len(region)] != region || name[len(region)] != '~' {
		return false
	}
	for _, c := range []byte(name[len(region)+1:]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NewFailover returns a Failover over primary with fallback, which must
// count under a region other than cfg.Region: make it with
// NewMemory(MemoryConfig{Region: FallbackRegion(cfg.Region)}). Close closes
// both stores. A [Redis] primary whose RedisConfig.CallTimeout is at most
// cfg.Timeout bounds its calls itself (as [Open] makes it); any other
// primary is called with a context of cfg.Timeout's deadline.
func NewFailover(primary Store, fallback *Memory, cfg FailoverConfig) (*Failover, error) {
	switch {
	case primary == nil || fallback == nil:
		return nil, errors.New("region: failover: primary and fallback stores are required")
	case cfg.Region == "":
		return nil, errors.New("region: failover: region is required")
	case fallback.Region() == cfg.Region:
		return nil, fmt.Errorf("region: failover: fallback region %q must differ from the primary's (use FallbackRegion)", cfg.Region)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("region: failover: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultStoreTimeout
	}
	if cfg.Threshold == 0 {
		cfg.Threshold = 3
	}
	if cfg.ProbeMin == 0 {
		cfg.ProbeMin = 100 * time.Millisecond
	}
	if cfg.ProbeMax == 0 {
		cfg.ProbeMax = 5 * time.Second
	}
	cfg.ProbeMax = max(cfg.ProbeMax, cfg.ProbeMin)
	if cfg.ClosedRetryAfter == 0 {
		cfg.ClosedRetryAfter = time.Second
	}
	if cfg.MaxWriteBack == 0 {
		cfg.MaxWriteBack = 100000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Failover{
		primary:  primary,
		fallback: fallback,
		cfg:      cfg,
		log:      cfg.Logger.With("component", "store", "policy", cfg.Policy.String()),
		fbRegion: fallback.Region(),
		wb:       map[BucketRef]*memBucket{},
		stop:     make(chan struct{}),
	}
	if r, ok := primary.(*Redis); ok && r.co.timeout > 0 && r.co.timeout <= cfg.Timeout {
		f.bounded = true
	}
	return f, nil
}

// validate checks the settings of c (not its Region, which the caller
// sets): a known policy, no negative durations or counts.
func (c FailoverConfig) validate() error {
	switch {
	case c.Policy > PolicyClosed:
		return fmt.Errorf("Policy: unknown policy %d", c.Policy)
	case c.Timeout < 0 || c.ProbeMin < 0 || c.ProbeMax < 0 || c.ClosedRetryAfter < 0 || c.Threshold < 0 || c.MaxWriteBack < 0:
		return errors.New("durations and counts must not be negative")
	}
	return nil
}

// Region returns the local region's name.
func (f *Failover) Region() string { return f.cfg.Region }

// FallbackRegion returns the region the fallback counts its admissions
// under.
func (f *Failover) FallbackRegion() string { return f.fbRegion }

// Fallback returns the in-memory fallback store.
func (f *Failover) Fallback() *Memory { return f.fallback }

// Status returns a snapshot of the mode and counters.
func (f *Failover) Status() FailoverStatus {
	f.mu.Lock()
	s := FailoverStatus{
		Policy:      f.cfg.Policy,
		Probing:     f.probing,
		Since:       f.since,
		LastError:   f.lastErr,
		Transitions: f.transitions,
	}
	f.mu.Unlock()
	if f.open.Load() {
		s.Mode = ModeFallback
	}
	s.Failures, s.Timeouts = f.failures.Load(), f.timeouts.Load()
	s.FallbackDecisions = f.fbDecisions.Load()
	s.WriteBacks, s.WriteBackDropped = f.writeBacks.Load(), f.wbDropped.Load()
	return s
}

// Check decides reqs with the primary, or under the policy when the
// breaker is open or the primary fails or takes longer than Timeout; see
// [Store]. It returns an error only when ctx ends.
func (f *Failover) Check(ctx context.Context, reqs []Request, res []Result) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("region: check: %w", err)
	}
	if !f.open.Load() {
		err := f.callPrimary(ctx, reqs, res)
		if err == nil {
			f.fails.Store(0)
			if f.cfg.Policy == PolicyLocal {
				f.mirror(reqs, res)
				f.writeBackSoon()
			}
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("region: check: %w", cerr)
		}
		f.failed(err)
		f.decideFallback(reqs, res)
		if f.cfg.Policy == PolicyLocal {
			f.writeBackLater()
		}
		return nil
	}
	f.decideFallback(reqs, res)
	return nil
}

// decideFallback decides reqs under the policy.
func (f *Failover) decideFallback(reqs []Request, res []Result) {
	f.fbDecisions.Add(uint64(len(reqs)))
	switch f.cfg.Policy {
	case PolicyOpen:
		for i := range reqs {
			res[i] = Result{Decision: emptyDecision(&reqs[i])}
		}
	case PolicyClosed:
		for i := range reqs {
			q := &reqs[i]
			res[i] = Result{Decision: window.Decision{
				Limit:      q.Limit.Limit,
				RetryAfter: f.cfg.ClosedRetryAfter,
				ResetAfter: f.cfg.ClosedRetryAfter,
			}}
			if q.Limit.Algorithm.Counted() {
				_, res[i].Bucket = q.Limit.BucketAt(window.Ms(q.Now))
			}
		}
	default:
		// The memory store never fails.
		_ = f.fallback.Check(context.Background(), reqs, res)
		for i := range reqs {
			q := &reqs[i]
			if !q.Limit.Algorithm.Counted() {
				continue
			}
			res[i].LocalRegion = f.fbRegion
			if res[i].Allowed && !q.Peek {
				f.remember(Total{Key: q.Key, Window: q.Limit.BucketWindow(res[i].Bucket), Bucket: res[i].Bucket, Region: f.fbRegion,
					Count: res[i].Local, Trail: res[i].LocalTrail})
			}
		}
	}
}

// emptyDecision decides q against an empty counter: allowed, since hits is
// at most the limit.
func emptyDecision(q *Request) window.Decision {
	nowMs := window.Ms(q.Now)
	switch q.Limit.Algorithm {
	case window.TokenBucket:
		d, _ := q.Limit.DecideGCRA(nowMs, 0, q.Hits)
		return d
	case window.SlidingLog:
		return q.Limit.DecideLog(nowMs, nil, q.Hits)
	}
	return q.Limit.DecideCounter(nowMs, window.Counts{}, q.Hits)
}

// Merge max-merges remote totals into the primary (unless the breaker is
// open) and, under PolicyLocal, into the fallback; see [Store].
func (f *Failover) Merge(ctx context.Context, totals []Total) error {
	if f.cfg.Policy == PolicyLocal {
		_ = f.fallback.Merge(ctx, totals)
	}
	if f.open.Load() {
		if f.cfg.Policy == PolicyLocal {
			// Held by the fallback only: written back on recovery, so
			// that the primary does not miss what other regions reported
			// meanwhile (their reconciliation is not sent twice).
			for _, t := range totals {
				f.remember(t)
			}
			return nil
		}
		return fmt.Errorf("region: merge: %w (breaker open)", ErrUnavailable)
	}
	return f.primary.Merge(ctx, totals)
}

// Vectors reads the primary, or under PolicyLocal while the breaker is
// open, the fallback (whose counts never exceed what their regions
// reached); see [Store].
func (f *Failover) Vectors(ctx context.Context, refs []BucketRef) ([][]Total, error) {
	if f.open.Load() {
		if f.cfg.Policy == PolicyLocal {
			return f.fallback.Vectors(ctx, refs)
		}
		return nil, fmt.Errorf("region: vectors: %w (breaker open)", ErrUnavailable)
	}
	return f.primary.Vectors(ctx, refs)
}

// Close stops probing and closes both stores.
func (f *Failover) Close() error {
	f.stopOnce.Do(func() { close(f.stop) })
	f.probes.Wait()
	return errors.Join(f.primary.Close(), f.fallback.Close())
}

// OnFallback reports whether decisions are made from the in-memory
// fallback now: the breaker is open under PolicyLocal. The fallback then
// counts under the fallback region, apart from the region's other nodes,
// and replication must bring it every other count (see gossip's
// Fallbacker).
func (f *Failover) OnFallback() bool { return f.cfg.Policy == PolicyLocal && f.open.Load() }
