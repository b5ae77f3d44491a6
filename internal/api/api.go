// Package api owns the node's HTTP handler and the ratelimit.v1
// RateLimitService (Check, CheckBatch, Peek) for the Connect protocol (JSON
// and binary), gRPC and gRPC-Web with its JSON codec; [NewHandler] mounts it
// on one handler with the packages that own the rest:
//
//	decision     the one path every entry point decides through: validation,
//	             namespaced counter keys, the store call, metrics, shadow mode
//	             and replication
//	rules        native rules and envoyproxy/ratelimit domains, their YAML
//	             formats and the file reloader
//	envoyrls     Envoy's rate-limit service (RLS v3 ShouldRateLimit)
//	forwardauth  the /check endpoint for proxies' forward authentication
//	status       the status page (/) and /status.json
//	auth         bearer tokens and the middleware that requires them
//
// besides gRPC health checking, server reflection, the /healthz, /readyz and
// /metrics endpoints. Errors map to wire codes: bad input is
// invalid_argument with a message naming the field, a store failure is
// unavailable, and a denial is a normal response.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/envoyrls"
	"github.com/rlcluster/rlcluster/internal/api/forwardauth"
	"github.com/rlcluster/rlcluster/internal/api/rlqs"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/api/status"
	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// ErrConfig is wrapped by every error of [Config.Validate].
var ErrConfig = errors.New("api: invalid config")

// MinRequestBytes is the least Config.MaxRequestBytes may be: a smaller
// bound would refuse every request.
const MinRequestBytes = 64

// Defaults for zero [Config] fields.
const (
	DefaultMaxKeyBytes     = 1024
	DefaultMaxBatch        = 1000
	DefaultMaxRequestBytes = 1 << 20
	// DefaultMaxRequestMemory lets 4 requests of the default largest
	// size be decoded at once.
	DefaultMaxRequestMemory = 4 << 20
	DefaultReadyTimeout     = 2 * time.Second
	DefaultStreamTimeout    = time.Minute
	DefaultMaxHits          = window.MaxLimit
	DefaultMaxWindow        = window.MaxWindow
	DefaultMaxLogLimit      = 10000
)

// ReadyCheck is one condition /readyz requires, besides the store being
// reachable.
type ReadyCheck struct {
	// Name appears in /readyz's answer.
	Name string
	// Check returns nil when ready. It should honour ctx's deadline.
	Check func(ctx context.Context) error
}

// Config configures a [Server]. Zero fields mean the documented default.
type Config struct {
	// Store decides requests. Required. Its layers' own metrics
	// ([region.Stack.Collectors]) are the caller's to register.
	Store region.Store
	// Failover, when set, is the failover Store decides through
	// ([region.Stack.Failover]): /readyz asks it whether the primary
	// answers, rather than reading Store, and states the mode it decides
	// in. Nil: /readyz reads Store.
	Failover *region.Failover
	// Region is this node's region name; default "local".
	Region string
	// Rules are the named rules at start; nil means none. Replace them
	// later with [Server.SetRules].
	Rules *rules.Set
	// Pool, when set, is the other regions (see [decision.Pool]): it is
	// told of every counter decision, queues the admitted totals, gives
	// the burst guard its view and the responses and the status page the
	// remote regions' ages; while it counts more than one region, a
	// region-local algorithm (token bucket, sliding log) with global scope
	// is refused as invalid_argument. Nil means a single region.
	Pool decision.Pool
	// Guard, when set with a Pool, is the burst guard every consuming
	// counter decision with global scope asks before the store. Nil means
	// none.
	Guard *guard.Guard
	// Cluster, when set, describes the gossip pool on the status page
	// (/ and /status.json). Nil means a single region.
	Cluster status.Cluster
	// Watcher, when set, draws a watched key's recent windows and the
	// remote regions' staleness on the status page (/?watch=<key>,
	// /watch.svg and /status.json?watch=<key>). Nil: no key is watched.
	Watcher status.Watcher
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// MaxKeyBytes bounds a request's key (for Envoy, the escaped domain
	// and entries); default 1024, at most [decision.MaxKeyBytes] so that
	// the namespaced counter key stays within what replication carries.
	MaxKeyBytes int
	// MaxBatch bounds the checks in one CheckBatch; default 1000.
	MaxBatch int
	// MaxRequestBytes bounds a request message; default 1 MiB. A larger
	// message is refused with resource_exhausted before it is decoded.
	// It bounds CheckBatch and Envoy's ShouldRateLimit; Check and Peek
	// read at most what their longest key and rule name take (a few
	// kilobytes past 6 x (MaxKeyBytes + the longest rule name), for JSON
	// escapes), health checking and server reflection 16 KiB. Checks in a
	// batch and Envoy descriptors and their entries are counted before
	// they are decoded: at most one over MaxBatch (or [envoyrls.MaxEntries])
	// is decoded before the request is refused.
	MaxRequestBytes int
	// MaxRequestMemory bounds the bytes that requests larger than 64 KiB
	// (large batches) hold in flight at once, all connections together;
	// default [DefaultMaxRequestMemory], at least MaxRequestBytes. A large
	// request waits up to 5 s for its share, first come first served, and
	// is then refused with resource_exhausted. Each takes a few times its
	// size in memory while it is decoded and decided.
	MaxRequestMemory int64
	// MaxHits bounds the hits one check may ask for (besides the limit);
	// default 2^53, so that only the limit bounds them.
	MaxHits uint64
	// MaxWindow bounds an inline limit's window, from 1s up to 168h (the
	// default).
	MaxWindow time.Duration
	// MaxLogLimit bounds an inline sliding_log limit, whose memory grows
	// with the hits it holds: default 10000.
	MaxLogLimit uint64
	// MaxInlineLimit bounds an inline limit's count; 0 means 2^53 (the
	// most any limit may be). A token's scope may bound it further, and
	// the window too (see [auth.Scope]).
	MaxInlineLimit uint64
	// Logger receives warnings such as store failures; default discards.
	Logger *slog.Logger
	// Registerer receives the metrics; default a new registry.
	Registerer prometheus.Registerer
	// Gatherer is served on /metrics; default Registerer when it is a
	// Gatherer (as *prometheus.Registry is), else the new registry.
	Gatherer prometheus.Gatherer
	// HandlerOptions are added to the Connect handlers' options, for
	// example interceptors for authentication.
	HandlerOptions []connect.HandlerOption
	// StreamTimeout bounds a streaming call (server reflection) from its
	// start: its read and write deadlines and its context; default
	// [DefaultStreamTimeout].
	StreamTimeout time.Duration
	// ReadyChecks are extra conditions for /readyz.
	ReadyChecks []ReadyCheck
	// ReadyTimeout bounds each /readyz probe; default 2s.
	ReadyTimeout time.Duration
	// Check configures the HTTP check endpoint for proxies' forward-auth
	// (default path /check).
	Check forwardauth.Config
	// ShadowMode, when true, decides and counts every request as usual but
	// answers allowed (OK to Envoy); denials show as outcome
	// "shadow_denied" in rlcluster_decisions_total. Rules can also be in
	// shadow mode one by one.
	ShadowMode bool
	// RLSHeaders, when its names are set, makes Envoy's ShouldRateLimit
	// add response headers for the most limiting descriptor, as
	// envoyproxy/ratelimit does with LIMIT_RESPONSE_HEADERS_ENABLED. The
	// zero value adds none.
	RLSHeaders envoyrls.Headers
	// RequireAdmin, when true, refuses Reset (permission_denied) unless
	// the caller's token has the admin scope ([auth.Scope.AllowAdmin]):
	// set it whenever bearer tokens are required. False allows every
	// caller that reaches the handler.
	RequireAdmin bool
	// ResetTTL is how long a node trusts what it read of a key's reset
	// instant; default [decision.DefaultResetTTL].
	ResetTTL time.Duration
	// RLQSMaxBuckets bounds the buckets of one stream of Envoy's rate
	// limit quota service; default [rlqs.DefaultMaxBuckets].
	RLQSMaxBuckets int
	// RLQSLifetime ends a stream of the rate limit quota service this
	// long after it began; default [rlqs.DefaultLifetime].
	RLQSLifetime time.Duration
}

// Validate reports whether NewHandler accepts cfg's settings, its zero
// fields taking their defaults: MaxKeyBytes at most
// [decision.MaxKeyBytes], MaxRequestBytes at least [MinRequestBytes],
// MaxWindow from [window.MinWindow] to [window.MaxWindow],
// MaxInlineLimit at most [window.MaxLimit], nothing negative, and the
// check endpoint's ([forwardauth.Config.Validate]). Each problem is an
// error wrapping [ErrConfig] that names its field ("MaxWindow: 192h0m0s,
// want 1s to 168h0m0s", "Check.DenyStatus: 500, want 429 or 403"). The
// parts a node wires in (Store, Rules, ...) are checked by NewHandler.
func (cfg Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, a...)))
	}
	if cfg.MaxKeyBytes < 0 || cfg.MaxKeyBytes > decision.MaxKeyBytes {
		bad("MaxKeyBytes", "%d, want at most %d (counter keys, namespace prefix included, must fit the %d bytes replication carries)",
			cfg.MaxKeyBytes, decision.MaxKeyBytes, region.MaxKeyBytes)
	}
	if cfg.MaxBatch < 0 {
		bad("MaxBatch", "%d, want at least 1", cfg.MaxBatch)
	}
	if cfg.MaxRequestBytes != 0 && cfg.MaxRequestBytes < MinRequestBytes {
		bad("MaxRequestBytes", "%d, want at least %d", cfg.MaxRequestBytes, MinRequestBytes)
	}
	if cfg.MaxWindow != 0 && (cfg.MaxWindow < window.MinWindow || cfg.MaxWindow > window.MaxWindow) {
		bad("MaxWindow", "%v, want %v to %v", cfg.MaxWindow, window.MinWindow, window.MaxWindow)
	}
	if cfg.MaxInlineLimit > window.MaxLimit {
		bad("MaxInlineLimit", "%d, want at most %d (the most any limit may be)", cfg.MaxInlineLimit, uint64(window.MaxLimit))
	}
	if cfg.ReadyTimeout < 0 {
		bad("ReadyTimeout", "%v, want 0 (the default) or more", cfg.ReadyTimeout)
	}
	if err := cfg.Check.Validate(); err != nil {
		each := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			each = j.Unwrap()
		}
		for _, e := range each {
			errs = append(errs, fmt.Errorf("%w: Check.%w", ErrConfig, e))
		}
	}
	return errors.Join(errs...)
}

// Server is the API's http.Handler. It is safe for concurrent use.
type Server struct {
	cfg    Config
	dec    *decision.Decider
	mux    *http.ServeMux
	health *grpchealth.StaticChecker
	envoy  *envoyrls.Service
	rlqs   *rlqs.Service
	resets *prometheus.CounterVec // rule, result
	// errWriter writes serveFast's errors; nil when the fast path is off
	// (Config.HandlerOptions set: interceptors must see every call).
	errWriter *connect.ErrorWriter
	// lim bounds the entries a request may make the node decode, reads
	// the bytes each endpoint reads (bounds.go).
	lim    countLimits
	reads  readLimits
	budget *requestBudget
}

var _ ratelimitv1connect.RateLimitServiceHandler = (*Server)(nil)

// NewHandler checks cfg and returns the API handler. It serves:
//
//	/ratelimit.v1.RateLimitService/{Check,CheckBatch,Peek,Reset}   Connect, gRPC, gRPC-Web
//	/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit   Envoy's RLS v3
//	/grpc.health.v1.Health/Check                             gRPC health
//	/grpc.reflection.v1{,alpha}.ServerReflection/...         server reflection
//	/metrics  /healthz  /readyz
//	/check, /check/<rule>                                    forward-auth check (see [forwardauth.Config])
//	/  /status.json                                          status page and its data (GET)
//
// The handler serves HTTP/1.1 and HTTP/2; gRPC needs HTTP/2, so serve it
// with an http.Server whose Protocols allow unencrypted HTTP/2 (h2c).
func NewHandler(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("api: Config.Store is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		cfg.Region = "local"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxKeyBytes <= 0 {
		cfg.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxRequestMemory <= 0 {
		cfg.MaxRequestMemory = DefaultMaxRequestMemory
	}
	cfg.MaxRequestMemory = max(cfg.MaxRequestMemory, int64(cfg.MaxRequestBytes))
	if cfg.MaxHits == 0 {
		cfg.MaxHits = DefaultMaxHits
	}
	if cfg.MaxWindow == 0 {
		cfg.MaxWindow = DefaultMaxWindow
	}
	if cfg.MaxLogLimit == 0 {
		cfg.MaxLogLimit = DefaultMaxLogLimit
	}
	if cfg.StreamTimeout <= 0 {
		cfg.StreamTimeout = DefaultStreamTimeout
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		reg := prometheus.NewRegistry()
		cfg.Registerer = reg
		if cfg.Gatherer == nil {
			cfg.Gatherer = reg
		}
	}
	if cfg.Gatherer == nil {
		g, ok := cfg.Registerer.(prometheus.Gatherer)
		if !ok {
			return nil, errors.New("api: Config.Gatherer is required when Config.Registerer is not a Gatherer")
		}
		cfg.Gatherer = g
	}
	dcfg := decision.Config{
		Store:          cfg.Store,
		Region:         cfg.Region,
		Pool:           cfg.Pool,
		Guard:          cfg.Guard,
		MaxKeyBytes:    cfg.MaxKeyBytes,
		MaxHits:        cfg.MaxHits,
		MaxWindow:      cfg.MaxWindow,
		MaxLogLimit:    cfg.MaxLogLimit,
		MaxInlineLimit: cfg.MaxInlineLimit,
		ShadowMode:     cfg.ShadowMode,
		Logger:         cfg.Logger,
		Registerer:     cfg.Registerer,
	}
	dcfg.ResetTTL = cfg.ResetTTL
	dec, err := decision.New(dcfg, cfg.Rules)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	hc, err := forwardauth.New(cfg.Check, dec, cfg.Now)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s := &Server{cfg: cfg, dec: dec, mux: http.NewServeMux()}
	if s.resets, err = newResetMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}

	// Each endpoint reads at most what its largest request takes, and
	// decodes at most one more entry than a request may carry (bounds.go).
	s.lim = countLimits{batch: cfg.MaxBatch, entries: envoyrls.MaxEntries}
	s.reads = newReadLimits(cfg)
	s.budget = newRequestBudget(cfg.MaxRequestMemory)
	if err := cfg.Registerer.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "rlcluster_requests_over_memory_total",
		Help: "Requests larger than 64 KiB refused because the bytes of such requests in flight stayed at the node's budget (--max-request-memory).",
	}, func() float64 { return float64(s.budget.Refused()) })); err != nil {
		return nil, fmt.Errorf("api: register metrics: %w", err)
	}
	opts := append(codecs(&s.lim), connect.WithCompressMinBytes(compressMinBytes))
	if len(cfg.HandlerOptions) == 0 {
		s.errWriter = connect.NewErrorWriter(opts...)
	}
	opts = append(opts, cfg.HandlerOptions...)
	readMax := func(n int) []connect.HandlerOption {
		return append([]connect.HandlerOption{connect.WithReadMaxBytes(n)}, opts...)
	}
	svcPath, checks := ratelimitv1connect.NewRateLimitServiceHandler(s, readMax(s.reads.check)...)
	_, batches := ratelimitv1connect.NewRateLimitServiceHandler(s, readMax(s.reads.batch)...)
	s.mux.Handle(svcPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == pathCheckBatch || r.URL.Path == ratelimitv1connect.RateLimitServiceLeaseProcedure {
			// A lease report holds many keys, as a batch does.
			batches.ServeHTTP(w, r)
			return
		}
		checks.ServeHTTP(w, r)
	}))
	s.envoy = envoyrls.New(envoyrls.Config{Decider: dec, MaxBatch: cfg.MaxBatch, Now: cfg.Now, Headers: cfg.RLSHeaders})
	s.mux.Handle(envoyrls.Procedure, s.envoy.Handler(readMax(s.reads.batch)...))
	if s.rlqs, err = rlqs.New(rlqs.Config{Decider: dec, Now: cfg.Now, MaxBuckets: cfg.RLQSMaxBuckets, Lifetime: cfg.RLQSLifetime, Logger: cfg.Logger, Registerer: cfg.Registerer}); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s.mux.Handle(rlqs.Procedure, s.rlqs.Handler(readMax(s.reads.batch)...))
	s.health = grpchealth.NewStaticChecker(ratelimitv1connect.RateLimitServiceName, envoyrls.ServiceName, rlqs.ServiceName)
	s.mux.Handle(grpchealth.NewHandler(s.health, readMax(s.reads.small)...))
	reflector := grpcreflect.NewStaticReflector(ratelimitv1connect.RateLimitServiceName, envoyrls.ServiceName, rlqs.ServiceName, grpchealth.HealthV1ServiceName)
	s.mux.Handle(grpcreflect.NewHandlerV1(reflector, readMax(s.reads.small)...))
	s.mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, readMax(s.reads.small)...))
	s.mux.Handle("/metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	s.mux.HandleFunc("/readyz", s.serveReady)
	s.mux.Handle(hc.Path(), hc)
	s.mux.Handle(hc.Path()+"/", hc)
	// "/{$}" is the exact path "/" only: other unknown paths stay 404.
	var ages func() map[string]time.Duration
	if cfg.Pool != nil {
		ages = cfg.Pool.RemoteAges
	}
	leases := func() status.LeaseStatus {
		return status.LeaseStatus{Streams: s.rlqs.Streams(), Buckets: s.rlqs.Buckets()}
	}
	sp := status.New(status.Config{Region: cfg.Region, Cluster: cfg.Cluster, Now: cfg.Now, Ages: ages, Ready: s.Ready, Watcher: cfg.Watcher, Leases: leases})
	s.mux.HandleFunc("GET /{$}", sp.ServePage)
	s.mux.HandleFunc("GET /status.json", sp.ServeJSON)
	s.mux.HandleFunc("GET /watch.svg", sp.ServeWatchSVG)
	return s, nil
}

// ServeHTTP implements http.Handler. Plain Connect unary JSON calls take a
// shorter path to the same methods (see serveFast). Streaming calls
// (server reflection) replace the server's read and write deadlines,
// which suit unary calls, with Config.StreamTimeout from their start.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isStream(r.URL.Path) {
		// A stream outlives the server's unary deadlines, up to its own.
		d := s.cfg.StreamTimeout
		if r.URL.Path == rlqs.Procedure || r.URL.Path == ratelimitv1connect.RateLimitServiceLeaseProcedure {
			d = s.rlqs.Lifetime()
		}
		end := time.Now().Add(d)
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(end) // unsupported by some writers: the server's deadlines stay then
		_ = rc.SetWriteDeadline(end)
		ctx, cancel := context.WithDeadline(r.Context(), end)
		defer cancel()
		r = r.WithContext(ctx)
	}
	if r.URL.Path == pathCheckBatch || r.URL.Path == envoyrls.Procedure {
		// Large requests share the request memory budget (budget.go).
		release, err := s.budget.acquire(r.Context(), requestSize(r, int64(s.reads.batch)), r.ProtoMajor < 2)
		if err != nil {
			ew := s.errWriter
			if ew == nil {
				ew = connect.NewErrorWriter()
			}
			_ = ew.Write(w, r, err)
			return
		}
		defer release()
	}
	if s.serveFast(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// AcquireRequest takes the memory of a request of size bytes from the
// budget that large requests share (see Config.MaxRequestMemory), for
// other transports (a grpc-go server) to bound theirs with the same
// budget: the returned func gives it back. It waits at most a few seconds
// and then returns a resource_exhausted error.
func (s *Server) AcquireRequest(ctx context.Context, size int) (release func(), err error) {
	return s.budget.acquire(ctx, int64(size), true)
}

// isStream reports whether path is a streaming procedure.
func isStream(path string) bool {
	return path == rlqs.Procedure || path == ratelimitv1connect.RateLimitServiceLeaseProcedure ||
		strings.HasPrefix(path, "/grpc.reflection.v1.ServerReflection/") ||
		strings.HasPrefix(path, "/grpc.reflection.v1alpha.ServerReflection/")
}

// Handle mounts another handler on the server's mux, for endpoints that
// other packages add (for example Envoy's rate-limit service). It panics,
// as http.ServeMux.Handle does, when pattern is already taken.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Envoy returns the server's Envoy rate-limit service, for other
// transports (a grpc-go server) to serve through the same decision path.
func (s *Server) Envoy() *envoyrls.Service { return s.envoy }

// RLQS returns the server's rate limit quota service, for other
// transports (a grpc-go server) to serve.
func (s *Server) RLQS() *rlqs.Service { return s.rlqs }

// Rules returns the rules in use (nil when none).
func (s *Server) Rules() *rules.Set { return s.dec.Rules() }

// SetRules atomically replaces the rules in use; requests already being
// decided finish with the rules they started with.
func (s *Server) SetRules(rs *rules.Set) { s.dec.SetRules(rs) }

// SetServing sets what gRPC health checking reports for the service and
// the server as a whole, for example NotServing while shutting down.
func (s *Server) SetServing(serving bool) {
	st := grpchealth.StatusServing
	if !serving {
		st = grpchealth.StatusNotServing
	}
	s.health.SetStatus(ratelimitv1connect.RateLimitServiceName, st)
	s.health.SetStatus(envoyrls.ServiceName, st)
	s.health.SetStatus("", st)
}

// Ready reports whether the store is reachable (the failover's primary,
// when there is one) and every ReadyCheck passes.
func (s *Server) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	var err error
	if s.cfg.Failover != nil {
		err = s.cfg.Failover.Ping(ctx)
	} else {
		_, err = s.cfg.Store.Vectors(ctx, []region.BucketRef{{Key: "rlcluster:readyz", Window: time.Second}})
	}
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	for _, c := range s.cfg.ReadyChecks {
		if err := c.Check(ctx); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	return nil
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := s.Ready(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	if s.cfg.Failover != nil {
		// A store deciding under its failure policy is still ready (local
		// and open decide; closed fails Ready above): say which mode.
		fmt.Fprintf(w, "ok (store: %s)\n", s.cfg.Failover.Status())
		return
	}
	fmt.Fprintln(w, "ok")
}
