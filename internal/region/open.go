package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"
)

// Config configures the store that [Open] composes. Zero fields mean their
// default.
type Config struct {
	// Region is the local region's name. Default "local".
	Region string
	// Redis, when Redis.URL is set, makes the region's Redis the primary
	// store, wrapped in a [Failover] whose fallback is an in-memory store.
	// Its Region is Config.Region. With no URL the store is in memory.
	Redis RedisConfig
	// Memory configures the in-memory store: the store itself without
	// Redis, the failover's fallback with it. Its Region is Config.Region
	// or, for the fallback, a [FallbackRegion] of it.
	Memory MemoryConfig
	// Failover configures the failover around Redis. Its Region and Logger
	// are Config's.
	Failover FailoverConfig
	// DenyCache, when set, puts a [DenyCache] in front of Redis's failover
	// (a remembered denial needs neither Redis nor the failure policy).
	// Unused without Redis: the in-memory store answers as fast.
	DenyCache *DenyCacheConfig
	// Replica, without Redis, makes the in-memory store count under a
	// replica name of Region ([FallbackRegion]: Region~id, random per
	// process) rather than Region itself (see MemoryConfig.Replica): set
	// it when several nodes of one region each decide from their own
	// in-memory store, so that their counts add up instead of
	// overwriting each other. Ignored with Redis.
	Replica bool
	// Logger gets the store's lines: the failure policy at start, and
	// the failover's transitions. Default discards.
	Logger *slog.Logger
}

// Stack is a store composed by [Open], with a handle on each of its
// layers. Its Store is the outermost layer, the one to decide with; the
// layer fields are nil when the configuration has no such layer.
//
//	DenyCache -> Failover -> Redis
//	                      -> Memory (the fallback)
//	Memory                            (without Redis)
//
// Stack is itself a [Store] (its Store's methods) and is safe for
// concurrent use. [Stack.Stats] reads every layer's counters at once, and
// [Stack.Collectors] exports them to Prometheus.
type Stack struct {
	Store
	// Memory is the in-memory store: the store itself without Redis, else
	// the failover's fallback.
	Memory *Memory
	// Redis is the primary store, nil without Redis.
	Redis *Redis
	// Failover decides while Redis is unavailable, nil without Redis.
	Failover *Failover
	// DenyCache answers remembered denials, nil when not configured.
	DenyCache *DenyCache

	desc string
}

// ErrConfig is wrapped by the errors of [Open] that a configuration
// causes (as opposed to a Redis that cannot be reached), and so by every
// error of [Config.Validate].
var ErrConfig = errors.New("region: bad store configuration")

// DefaultRegion is the region of a store configured without one, as
// rlnode's flags show it.
const DefaultRegion = defaultRegion

// Validate reports whether Open accepts cfg's settings, its zero fields
// taking their defaults: a region name of at most [MaxRegionName] bytes
// of UTF-8, a failover policy that exists and no negative durations or
// sizes. Each problem is an error wrapping [ErrConfig] that names its
// field ("Region: 65 bytes, want at most 64"). It reads no file and
// dials nothing; Open calls it.
func (cfg Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, a...)))
	}
	if len(cfg.Region) > MaxRegionName {
		bad("Region", "%d bytes, want at most %d", len(cfg.Region), MaxRegionName)
	} else if !utf8.ValidString(cfg.Region) {
		bad("Region", "%q is not UTF-8", cfg.Region)
	}
	if cfg.Memory.MaxKeys < 0 || cfg.Memory.MaxLogBytes < 0 {
		bad("Memory", "sizes must not be negative")
	}
	if err := cfg.Failover.validate(); err != nil {
		bad("Failover", "%v", err)
	}
	if cfg.DenyCache != nil && cfg.DenyCache.MaxKeys < 0 {
		bad("DenyCache.MaxKeys", "%d, want 0 (the default) or more", cfg.DenyCache.MaxKeys)
	}
	return errors.Join(errs...)
}

// Open composes the store cfg describes: the in-memory store alone, or
// Redis behind a [Failover] (with an in-memory fallback) behind an
// optional [DenyCache].
//
// Redis need not be reachable: when it does not answer at start (an
// error wrapping [ErrUnavailable], or no answer before ctx's deadline),
// Open logs it once and returns a store
// that decides under the failure policy from the start and connects in the
// background, as after an outage; see [Failover.Ping] for readiness
// meanwhile. A URL that does not parse, or a Redis that answers with an
// error (a wrong password, for example), makes Open fail. Closing the
// Stack closes every layer.
func Open(ctx context.Context, cfg Config) (*Stack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Redis.URL == "" {
		mc := cfg.Memory
		mc.Region = cfg.Region
		desc := "memory"
		if cfg.Replica {
			mc.Region, mc.Replica = FallbackRegion(cfg.Region), true
			desc += ", counting as replica " + mc.Region
		}
		m := NewMemory(mc)
		return &Stack{Store: m, Memory: m, desc: desc}, nil
	}
	fc := cfg.Failover
	fc.Region, fc.Logger = cfg.Region, cfg.Logger
	if fc.Timeout == 0 {
		fc.Timeout = DefaultStoreTimeout
	}
	rc := cfg.Redis
	rc.Region = cfg.Region
	rc.CallTimeout = fc.Timeout // Redis bounds its own calls: one timer per round trip
	r, err := newRedis(rc)
	if err != nil {
		return nil, fmt.Errorf("open redis: %w: %w", ErrConfig, err)
	}
	mc := cfg.Memory
	mc.Region = FallbackRegion(cfg.Region)
	fb := NewMemory(mc)
	f, err := NewFailover(r, fb, fc)
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := r.connect(ctx); err != nil {
		// Unavailable, or silent until ctx's deadline: an outage. Canceled,
		// or an error reply (a wrong password): Open fails.
		if !errors.Is(err, ErrUnavailable) && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			_ = f.Close()
			return nil, fmt.Errorf("open redis: %w", err)
		}
		f.startDown(err)
	}
	cfg.Logger.Info("redis outages decided under the failure policy", "on_store_failure", f.cfg.Policy.String(),
		"store_timeout", f.cfg.Timeout, "fallback_region", fb.Region())
	st := &Stack{Store: f, Memory: fb, Redis: r, Failover: f,
		desc: fmt.Sprintf("redis %s (on failure: %s, fallback region %s)", RedactURL(rc.URL), f.cfg.Policy, fb.Region())}
	if cfg.DenyCache != nil {
		dc := *cfg.DenyCache
		dc.Region = cfg.Region
		st.DenyCache = NewDenyCache(f, dc)
		st.Store = st.DenyCache
		st.desc += fmt.Sprintf(", deny cache of %d keys", st.DenyCache.maxKeys)
	}
	return st, nil
}

// Restore max-merges totals into the store the region's counts live in
// (Redis, else the in-memory store), the local region's own included: see
// [Redis.Restore]. It fails while Redis is unavailable.
func (s *Stack) Restore(ctx context.Context, totals []Total) error {
	if s.Redis != nil {
		return s.Redis.Restore(ctx, totals)
	}
	return s.Memory.Restore(ctx, totals)
}

// NoResets reports whether the stack holds no reset instant (see
// [Memory.NoResets]): with Redis it never says so, since Redis is shared
// with other nodes and the stack cannot tell what it holds without asking.
func (s *Stack) NoResets() bool { return s.Redis == nil && s.Memory.NoResets() }

// OnFallback reports whether the stack decides from its in-memory fallback
// now (see [Failover.OnFallback]); false without Redis.
func (s *Stack) OnFallback() bool { return s.Failover != nil && s.Failover.OnFallback() }

// String describes the stack for logs, with the Redis URL redacted, for
// example "redis redis://127.0.0.1:6379 (on failure: local, fallback
// region eu~3fa9c1), deny cache of 100000 keys".
func (s *Stack) String() string { return s.desc }

// Stats is a snapshot of every layer's counters; a layer the stack does
// not have leaves its field nil.
type Stats struct {
	// Memory is the in-memory store's (or the failover's fallback's).
	Memory MemoryStats
	// Redis is the Redis store's, nil without Redis.
	Redis *RedisStats
	// Failover is the failover's state and counters, nil without Redis.
	Failover *FailoverStatus
	// DenyCache is the deny cache's, nil without one.
	DenyCache *DenyCacheStats
}

// Stats reads every layer's counters once. It does not block on I/O.
func (s *Stack) Stats() Stats {
	st := Stats{Memory: s.Memory.Stats()}
	if s.Redis != nil {
		rs := s.Redis.Stats()
		st.Redis = &rs
	}
	if s.Failover != nil {
		fs := s.Failover.Status()
		st.Failover = &fs
	}
	if s.DenyCache != nil {
		ds := s.DenyCache.DenyCacheStats()
		st.DenyCache = &ds
	}
	return st
}
