package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/envoyrls"
	"github.com/rlcluster/rlcluster/internal/api/forwardauth"
	"github.com/rlcluster/rlcluster/internal/api/rlqs"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/gossip"
	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// What a key costs a node on the in-memory store, with gossip on: the
// store's own state (region.MemoryKeyBytes, about 400 bytes of heap) and
// the replication sets that remember it, as resident memory after the
// garbage collector's headroom: 1.0 to 1.9 KB a key between 100,000 and
// 300,000 keys (go run ./loadtest/keyflood -keys 300000 -every 100000).
// --max-keys defaults to --memory-budget divided by it.
const (
	memoryKeyBytes         = 2048
	defaultMemoryBudgetMiB = 1024
)

// envPrefix prefixes the environment variable that backs each flag:
// --redis-url falls back to RLNODE_REDIS_URL.
const envPrefix = "RLNODE_"

// defaultMaxRules is --max-rules's default, for the node and for
// `rlnode validate`. (The rules package's zero means no bound.)
const defaultMaxRules = 10000

// config is rlnode's configuration, from flags with environment fallbacks.
// Add a field here and its flag in newFlagSet; nothing else parses flags.
type config struct {
	Listen string
	// GRPCListen, when set, serves the gRPC services with grpc-go there.
	GRPCListen string
	Region     string
	RedisURL   string
	Rules      string
	// RulesReloadInterval is how often the rules files are polled for
	// changes; negative: only on SIGHUP.
	RulesReloadInterval time.Duration
	ShadowMode          bool
	RLSHeaders          string
	RLQSMaxBuckets      int
	RLQSStreamLifetime  time.Duration
	LogLevel            slog.Level
	LogFormat           string
	MaxKeys             int
	MaxKeyBytes         int
	DenyCacheKeys       int
	MaxConnections      int
	MaxStreams          int
	StreamTimeout       time.Duration
	ShutdownTimeout     time.Duration
	GCHeadroomMiB       int

	// Bounds on input (see api.Config).
	MaxBatch        int
	MaxRequestBytes int
	// MaxRequestMemoryMiB is --max-request-memory.
	MaxRequestMemoryMiB int
	MaxHits             uint64
	MaxWindow           time.Duration
	MaxLogLimit         uint64
	MaxInlineLimit      uint64
	// MemoryBudgetMiB sizes the in-memory store: --max-keys defaults to
	// it divided by what a key costs (memoryKeyBytes).
	MemoryBudgetMiB int
	MaxRules        int

	// Redis outages (see region.Failover); used only with RedisURL.
	OnStoreFailure string
	Policy         region.Policy // OnStoreFailure, parsed by parseConfig
	StoreTimeout   time.Duration
	// RedisClock takes counter decisions' instant from Redis's TIME.
	RedisClock bool

	// Gossip (multi-region replication); off when GossipAddr is empty.
	GossipAddr      string
	GossipAdvertise string
	Join            string
	NodeName        string
	GossipKey       string
	GossipKeyFile   string
	GossipInsecure  bool
	JoinTimeout     time.Duration
	FlushInterval   time.Duration
	MaxStaleness    time.Duration
	// The burst guard (internal/guard) and the heartbeats it reads.
	BurstGuard          bool
	BurstGuardSuspicion time.Duration
	BurstGuardMargin    time.Duration
	BurstGuardFloor     uint64
	HeartbeatInterval   time.Duration

	// The forward-auth check endpoint.
	CheckPath        string
	CheckKeyHeaders  string
	CheckDefaultRule string
	CheckDenyStatus  int
	LegacyHeaders    bool

	// Security (security.go, tls.go).
	TLSCert       string
	TLSKey        string
	TLSClientCA   string
	AuthTokenFile string
	AuthToken     string // from the environment only (authTokenEnv), never a flag
	AuthOpenPaths string
	RedisCA       string
	RedisCert     string
	RedisKey      string
	// RedisPasswordFile names a file holding the Redis AUTH password;
	// RedisPassword is its content, read by parseConfig.
	RedisPasswordFile string
	RedisPassword     string
}

// newFlagSet returns the flag set that fills c with its defaults.
func newFlagSet(c *config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rlnode", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8080", "`host:port` to serve the API, health, readiness and metrics on (HTTP/1.1 and h2c; HTTPS with HTTP/2 and HTTP/1.1 when --tls-cert is set)")
	fs.StringVar(&c.GRPCListen, "grpc-listen", "", "`host:port` to also serve gRPC on with grpc-go's own transport (Envoy's RLS v3, ratelimit.v1, health, reflection; TLS, mTLS and tokens as --listen); faster than gRPC on --listen, which stays; empty: none")
	fs.StringVar(&c.Region, "region", region.DefaultRegion, "this node's region `name`")
	fs.StringVar(&c.RedisURL, "redis-url", "", "regional Redis `URL` (redis://, rediss:// for TLS, Sentinel or Cluster; user:password@ for AUTH or an ACL user); empty: the in-memory store")
	fs.StringVar(&c.Rules, "rules", "", "rules `path`: a YAML file or a directory of them, native rules or envoyproxy/ratelimit domains; reloaded on change and on SIGHUP; empty: inline limits only")
	fs.DurationVar(&c.RulesReloadInterval, "rules-reload-interval", rules.DefaultReloadInterval, "how often to look for changes to the rules files (`duration`); negative: only on SIGHUP")
	fs.BoolVar(&c.ShadowMode, "shadow-mode", false, "decide and count every request but always answer allowed (OK to Envoy); denials show as outcome=\"shadow_denied\" in rlcluster_decisions_total")
	fs.StringVar(&c.RLSHeaders, "rls-headers", "none", "response headers Envoy's ShouldRateLimit asks Envoy to add (`set`): none, draft (RateLimit-Limit, -Remaining, -Reset) or x (X-RateLimit-Limit, -Remaining, -Reset)")
	fs.IntVar(&c.RLQSMaxBuckets, "rlqs-max-buckets", rlqs.DefaultMaxBuckets, "most buckets one stream of Envoy's rate limit quota service may hold (`count`); a bucket past it is abandoned")
	fs.DurationVar(&c.RLQSStreamLifetime, "rlqs-stream-lifetime", rlqs.DefaultLifetime, "longest a stream of Envoy's rate limit quota service stays open (`duration`); Envoy then opens a new one, keeping its assignments")
	fs.TextVar(&c.LogLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log `format`: text or json")
	fs.IntVar(&c.MaxKeys, "max-keys", defaultMemoryBudgetMiB<<20/memoryKeyBytes, fmt.Sprintf("`count` of keys the in-memory store holds before evicting the least recently used; default --memory-budget / %d bytes, what a key costs the node (its store and replication sets)", memoryKeyBytes))
	fs.IntVar(&c.MemoryBudgetMiB, "memory-budget", defaultMemoryBudgetMiB, fmt.Sprintf("`MiB` the in-memory store's keys may take: --max-keys defaults to it divided by %d bytes a key", memoryKeyBytes))
	fs.IntVar(&c.MaxKeyBytes, "max-key-bytes", api.DefaultMaxKeyBytes, fmt.Sprintf("longest key a request may carry, in `bytes`, at most %d (what replication carries, less the namespace prefix)", decision.MaxKeyBytes))
	fs.IntVar(&c.MaxConnections, "max-connections", 0, "most connections open at once on --listen, and apart on --grpc-listen (`count`); at the cap a new connection takes the place of one doing nothing (one that has not completed a request in the second since it connected first, then, with tokens, one that never sent a valid token, then the longest idle for over a second), connections idle 5s are closed while three quarters of the cap are open, and with tokens those without a valid one hold at most half; 0: no cap")
	fs.DurationVar(&c.StreamTimeout, "stream-timeout", api.DefaultStreamTimeout, "longest a streaming call (server reflection, gRPC health Watch) stays open (`duration`)")
	fs.IntVar(&c.MaxStreams, "max-streams", defaultMaxStreams, "most HTTP/2 streams (calls in flight) one client connection may have open at once, on --listen and --grpc-listen (`count`); more wait in the client")
	fs.IntVar(&c.MaxBatch, "max-batch", api.DefaultMaxBatch, "most checks one CheckBatch may carry (`count`)")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", api.DefaultMaxRequestBytes, "largest request message, in `bytes`; a larger one is refused with resource_exhausted before it is decoded")
	fs.IntVar(&c.MaxRequestMemoryMiB, "max-request-memory", api.DefaultMaxRequestMemory>>20, "`MiB` that requests larger than 64 KiB (large batches) may hold in flight at once, all connections together; each takes a few times its size while decided, and one that finds the budget spent waits up to 5s, then is refused with resource_exhausted (at least --max-request-bytes)")
	fs.Uint64Var(&c.MaxHits, "max-hits", api.DefaultMaxHits, "most hits one check may ask for (`count`; a check's hits are also at most its limit)")
	fs.DurationVar(&c.MaxWindow, "max-inline-window", api.DefaultMaxWindow, "longest window an inline limit may ask for (`duration`, 1s to 168h); a key lives about twice its window, in memory and in Redis")
	fs.DurationVar(&c.MaxWindow, "max-window", api.DefaultMaxWindow, "deprecated alias of --max-inline-window (`duration`)")
	fs.Uint64Var(&c.MaxInlineLimit, "max-inline-limit", window.MaxLimit, "largest limit an inline limit may ask for (`count`, at most 2^53)")
	fs.Uint64Var(&c.MaxLogLimit, "max-log-limit", api.DefaultMaxLogLimit, "largest limit of an inline sliding_log limit, whose memory grows with its limit (`count`)")
	fs.IntVar(&c.MaxRules, "max-rules", defaultMaxRules, "most limits (native rules plus envoy descriptors) the --rules files may define (`count`)")
	fs.StringVar(&c.OnStoreFailure, "on-store-failure", region.PolicyLocal.String(), "`policy` that decides while Redis is unavailable: local (the in-memory fallback, counts kept and replicated), open (allow everything) or closed (deny everything, retry after 1s)")
	fs.DurationVar(&c.StoreTimeout, "store-timeout", region.DefaultStoreTimeout, "longest `duration` a decision waits for Redis before the failure policy decides it")
	fs.BoolVar(&c.RedisClock, "redis-clock", true, "take the instant (and so the bucket) of sliding and fixed window decisions from Redis's clock (TIME), which all nodes of the region share; false: each node's own clock")
	fs.IntVar(&c.DenyCacheKeys, "deny-cache-keys", region.DefaultDenyCacheKeys, "`count` of denials the node remembers to deny again without a Redis round trip; 0 disables")
	fs.IntVar(&c.GCHeadroomMiB, "gc-headroom", 64, "how far the heap may grow between garbage collections, in `MiB`, while the live heap is smaller (a small live heap is otherwise collected dozens of times a second under load); larger live heaps are paced by GOGC; 0, or GOGC set: Go's own pacing")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long to drain in-flight requests on SIGTERM or SIGINT (`duration`)")
	fs.StringVar(&c.GossipAddr, "gossip-addr", "", "`host:port` to bind memberlist gossip on (UDP and TCP): a name binds every address it resolves to and no other; without a key each must be loopback; empty: no gossip, a single region")
	fs.StringVar(&c.GossipAdvertise, "gossip-advertise", "", "`host:port` other nodes reach this node's gossip at; default: the bound address (a private IP when bound to 0.0.0.0)")
	fs.StringVar(&c.Join, "join", "", "comma-separated gossip `seeds` (host:port of nodes in any region); a seed that is not a live member is joined again, with backoff capped at 30s, for as long as the node runs")
	fs.StringVar(&c.NodeName, "node-name", "", "this node's unique `name` in the gossip pool; default hostname:gossip-port")
	fs.StringVar(&c.GossipKey, "gossip-key", "", "base64 AES `keys` (16, 24 or 32 bytes each), comma-separated: the first encrypts gossip, all decrypt; peers without one are refused (make one: head -c 32 /dev/urandom | base64); prefer the environment variable or --gossip-key-file, since flags show in ps")
	fs.StringVar(&c.GossipKeyFile, "gossip-key-file", "", "`file` of base64 gossip keys, one per line, the first encrypting (as --gossip-key); reloaded on SIGHUP, to rotate keys without a restart")
	fs.BoolVar(&c.GossipInsecure, "gossip-insecure", false, "allow gossip without a key on an address other than loopback: anyone who reaches the port can join, read every replicated key and report counts; for labs only")
	fs.DurationVar(&c.JoinTimeout, "gossip-join-timeout", gossip.DefaultJoinTimeout, "with --join, how long the node may go without reaching another region before /readyz reports it not ready (`duration`; 0: never)")
	fs.DurationVar(&c.FlushInterval, "flush-interval", gossip.DefaultFlushInterval, "how often this node sends changed counts to the other regions (`duration`)")
	fs.DurationVar(&c.MaxStaleness, "gossip-max-staleness", gossip.DefaultMaxStaleness, "the longest a key far below its limit waits before its changed count goes to the other regions; a key's count goes at the next flush once its unsent hits reach floor((limit/2 - estimate)/regions), at once at or above half its limit (`duration`; 0: every changed count at the next flush)")
	fs.BoolVar(&c.BurstGuard, "burst-guard", true, "with gossip, admit at most this region's share of a key's headroom per horizon (flush interval plus one-way delay) while other regions are alive, and charge silent regions their share on the minority side of a split; off or alone: no effect")
	fs.DurationVar(&c.BurstGuardSuspicion, "burst-guard-suspicion", gossip.DefaultSuspicion, "how long a region may go unheard (no counts, no heartbeat) before the burst guard treats it as silent (`duration`)")
	fs.DurationVar(&c.BurstGuardMargin, "burst-guard-margin", gossip.DefaultGuardMargin, "added to the burst guard's horizon (flush interval plus the measured one-way delay) for jitter (`duration`)")
	fs.Uint64Var(&c.BurstGuardFloor, "burst-guard-floor", guard.DefaultFloor, "an idle region's weight in the burst guard's shares is limit/(regions*`n`): larger gives an active region more of the headroom, and an idle region's first burst less")
	fs.DurationVar(&c.HeartbeatInterval, "gossip-heartbeat", gossip.DefaultHeartbeatInterval, "how often this node tells the other regions it is alive when it has no counts to send (`duration`)")
	fs.StringVar(&c.CheckPath, "check-path", forwardauth.DefaultPath, "`path` of the forward-auth check endpoint for proxies; it also serves <path>/<rule>")
	fs.StringVar(&c.CheckKeyHeaders, "check-key-headers", forwardauth.DefaultKeyHeaders, "comma-separated request `headers` the check endpoint takes the key from: the first present wins; join headers with + to combine them (X-Api-Key,Authorization+X-Forwarded-For); X-Forwarded-For gives its leftmost address; Authorization, Cookie and *key*/*token*/*secret* headers are hashed")
	fs.StringVar(&c.CheckDefaultRule, "check-default-rule", "", "`rule` the check endpoint applies when neither the path nor the X-RateLimit-Rule header names one; empty: one must be named")
	fs.IntVar(&c.CheckDenyStatus, "check-deny-status", forwardauth.DefaultDenyStatus, "HTTP `status` the check endpoint answers a denial with: 429, or 403 for nginx auth_request (per request: ?deny_status=403)")
	fs.BoolVar(&c.LegacyHeaders, "legacy-headers", false, "also send X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (seconds) from the check endpoint")

	addSecurityFlags(fs, c)
	fs.Usage = func() { usage(fs) }
	return fs
}

// envName returns the environment variable that backs flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// usage prints every flag with its environment variable and default.
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `rlnode serves rlcluster's rate-limit API (Connect, gRPC and gRPC-Web on one port).

Usage: rlnode [flags]
       rlnode validate --rules PATH   check a rules file or directory, list every problem

Every flag can also be set by its environment variable; a flag on the
command line wins.

Flags:
`)
	printFlags(w, fs)
	fmt.Fprint(w, securityUsage)
}

// printFlags writes each of fs's flags with its environment variable and
// default, in the form every rlnode help uses.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, help := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  --%s %s\n", f.Name, typ)
		fmt.Fprintf(w, "\t%s\n", help)
		fmt.Fprintf(w, "\tenv %s, default %q\n", envName(f.Name), defaultText(f))
	})
}

// defaultText is f's default as the help and the docs write it: a
// duration in its shortest form (168h, not 168h0m0s) and a log level in
// lower case, as --log-level accepts it.
func defaultText(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return f.DefValue
	}
	switch g.Get().(type) {
	case time.Duration:
		d, err := time.ParseDuration(f.DefValue)
		if err != nil {
			return f.DefValue
		}
		return shortDuration(d)
	case *slog.Level:
		return strings.ToLower(f.DefValue)
	default:
		return f.DefValue
	}
}

// shortDuration writes d as time.Duration.String does, without zero
// minutes and seconds after a larger unit: 168h, 1m, 1h30m, 50ms.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// parseConfig parses args, falling back to getenv for each flag not given.
// It returns flag.ErrHelp after printing usage to stdout for -h/-help/--help;
// on a bad flag it prints the error and usage to stderr.
func parseConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) (config, error) {
	var c config
	var buf bytes.Buffer
	fs := newFlagSet(&c, &buf)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = buf.WriteTo(stdout)
		} else {
			_, _ = buf.WriteTo(stderr)
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
		}
	})
	// The command line's own rules: a zero that a package would read as
	// its default is refused, and so is a value a flag's unit or meaning
	// rules out. The packages' Validate judge the rest (validateSettings),
	// and say nothing more about a flag refused here.
	refused := map[string]bool{}
	refuse := func(flag, format string, a ...any) {
		errs = append(errs, fmt.Errorf("--"+flag+": "+format, a...))
		refused[flag] = true
	}
	if c.MemoryBudgetMiB < 1 || c.MemoryBudgetMiB > 1<<24 {
		refuse("memory-budget", "%d, want 1 to %d MiB", c.MemoryBudgetMiB, 1<<24)
	} else if !set["max-keys"] && getenv(envName("max-keys")) == "" {
		c.MaxKeys = max(1, int(int64(c.MemoryBudgetMiB)<<20/memoryKeyBytes))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		refuse("log-format", "%q is not text or json", c.LogFormat)
	}
	for _, m := range []struct {
		flag string
		got  int64
		min  int
	}{
		{"max-keys", int64(c.MaxKeys), 1},
		{"max-key-bytes", int64(c.MaxKeyBytes), 1},
		{"max-batch", int64(c.MaxBatch), 1},
		{"max-request-bytes", int64(c.MaxRequestBytes), api.MinRequestBytes},
		{"max-hits", int64(min(c.MaxHits, 1)), 1},
		{"max-log-limit", int64(min(c.MaxLogLimit, 1)), 1},
		{"max-inline-limit", int64(min(c.MaxInlineLimit, 1)), 1},
		{"max-rules", int64(c.MaxRules), 1},
	} {
		if m.got <= 0 {
			refuse(m.flag, "%d, want at least %d", max(m.got, 0), m.min)
		}
	}
	if c.MaxWindow == 0 {
		refuse("max-inline-window", "0s, want %v to %v", window.MinWindow, window.MaxWindow)
	}
	if c.MaxRequestMemoryMiB < 1 || c.MaxRequestMemoryMiB > 1<<20 {
		refuse("max-request-memory", "%d, want 1 to %d MiB", c.MaxRequestMemoryMiB, 1<<20)
	}
	if c.MaxStreams < 1 || c.MaxStreams > 1000 {
		refuse("max-streams", "%d, want 1 to 1000", c.MaxStreams)
	}
	if c.MaxConnections < 0 {
		refuse("max-connections", "%d, want 0 (no cap) or more", c.MaxConnections)
	}
	if c.GCHeadroomMiB < 0 || c.GCHeadroomMiB > 1<<20 {
		refuse("gc-headroom", "%d, want 0 (off) to %d MiB", c.GCHeadroomMiB, 1<<20)
	}
	if c.DenyCacheKeys < 0 {
		refuse("deny-cache-keys", "%d, want 0 (off) or more", c.DenyCacheKeys)
	}
	var err error
	if c.Policy, err = region.ParsePolicy(c.OnStoreFailure); err != nil {
		refuse("on-store-failure", "%q is not local, open or closed", c.OnStoreFailure)
	}
	if c.Region == "" {
		refuse("region", "must not be empty")
	}
	if c.RLQSMaxBuckets < 1 || c.RLQSMaxBuckets > 1_000_000 {
		refuse("rlqs-max-buckets", "%d, want 1 to 1000000", c.RLQSMaxBuckets)
	}
	if _, ok := rlsHeaderSets[c.RLSHeaders]; !ok {
		refuse("rls-headers", "%q is not none, draft or x", c.RLSHeaders)
	}
	for _, d := range []struct {
		flag          string
		got, min, max time.Duration
		want          string
	}{
		{"stream-timeout", c.StreamTimeout, time.Second, 24 * time.Hour, "1s to 24h"},
		{"rlqs-stream-lifetime", c.RLQSStreamLifetime, time.Minute, 24 * time.Hour, "1m to 24h"},
		{"store-timeout", c.StoreTimeout, time.Millisecond, time.Minute, "1ms to 1m"},
		{"flush-interval", c.FlushInterval, time.Millisecond, 10 * time.Second, "1ms to 10s"},
		{"gossip-max-staleness", c.MaxStaleness, 0, time.Hour, "0 to 1h"},
		{"gossip-heartbeat", c.HeartbeatInterval, time.Millisecond, 10 * time.Second, "1ms to 10s"},
		{"burst-guard-margin", c.BurstGuardMargin, 0, 10 * time.Second, "0 to 10s"},
	} {
		if d.got < d.min || d.got > d.max {
			refuse(d.flag, "%v, want %s", d.got, d.want)
		}
	}
	if c.BurstGuardSuspicion <= 0 || c.BurstGuardSuspicion > time.Hour {
		refuse("burst-guard-suspicion", "%v, want from twice --gossip-heartbeat (%v) to 1h", c.BurstGuardSuspicion, 2*c.HeartbeatInterval)
	}
	if c.BurstGuardFloor < 1 || c.BurstGuardFloor > 1000 {
		refuse("burst-guard-floor", "%d, want 1 to 1000", c.BurstGuardFloor)
	}
	if c.GossipAddr == "" && (c.Join != "" || c.GossipKey != "" || c.GossipKeyFile != "" || c.GossipAdvertise != "" || c.GossipInsecure) {
		errs = append(errs, errors.New("--join, --gossip-key, --gossip-key-file, --gossip-advertise and --gossip-insecure need --gossip-addr"))
	}
	if c.JoinTimeout < 0 {
		refuse("gossip-join-timeout", "%v, want 0 (never) or more", c.JoinTimeout)
	}
	if c.GossipKey != "" && c.GossipKeyFile != "" {
		errs = append(errs, errors.New("--gossip-key and --gossip-key-file: give one"))
	} else if c.GossipKey != "" {
		if _, err := decodeGossipKeys(c.GossipKey, "--gossip-key"); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.validateSettings(refused)...)
	c.AuthToken = getenv(authTokenEnv)
	errs = append(errs, checkSecurityFlags(c)...)
	if c.RedisPasswordFile != "" {
		var err error
		if c.RedisPassword, err = readRedisPassword(c); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, nil
}

// apiConfig returns the API's configuration that the flags set.
func (c config) apiConfig() api.Config {
	return api.Config{
		Region:           c.Region,
		MaxKeyBytes:      c.MaxKeyBytes,
		MaxBatch:         c.MaxBatch,
		MaxRequestBytes:  c.MaxRequestBytes,
		MaxRequestMemory: int64(c.MaxRequestMemoryMiB) << 20,
		MaxHits:          c.MaxHits,
		MaxWindow:        c.MaxWindow,
		MaxLogLimit:      c.MaxLogLimit,
		MaxInlineLimit:   c.MaxInlineLimit,
		StreamTimeout:    c.StreamTimeout,
		Check: forwardauth.Config{
			Path:          c.CheckPath,
			KeyHeaders:    c.checkKeyHeaders(),
			DefaultRule:   c.CheckDefaultRule,
			DenyStatus:    c.CheckDenyStatus,
			LegacyHeaders: c.LegacyHeaders,
		},
		ShadowMode:     c.ShadowMode,
		RLSHeaders:     rlsHeaderSets[c.RLSHeaders],
		RLQSMaxBuckets: c.RLQSMaxBuckets,
		RLQSLifetime:   c.RLQSStreamLifetime,
	}
}

// storeConfig returns the store's configuration that the flags set
// (without Redis's TLS settings, which come from files: see redisTLS).
func (c config) storeConfig() region.Config {
	cfg := region.Config{
		Region: c.Region,
		Memory: region.MemoryConfig{MaxKeys: c.MaxKeys},
		// With gossip, each node on the in-memory store counts under a
		// replica of its own, so that a region's nodes add up.
		Replica: c.GossipAddr != "",
	}
	if c.RedisURL != "" {
		cfg.Redis = region.RedisConfig{URL: c.RedisURL, Password: c.RedisPassword, ServerClock: c.RedisClock}
		cfg.Failover = region.FailoverConfig{Policy: c.Policy, Timeout: c.StoreTimeout}
		if c.DenyCacheKeys > 0 {
			cfg.DenyCache = &region.DenyCacheConfig{MaxKeys: c.DenyCacheKeys}
		}
	}
	return cfg
}

// validateSettings runs the API's, the store's and, with gossip, gossip's
// own Validate on what the flags set, and returns their errors, each
// naming the flag that sets its field, at most one a flag, and none about
// a flag in refused.
func (c config) validateSettings(refused map[string]bool) []error {
	errs := flagErrors(c.apiConfig().Validate(), api.ErrConfig, refused)
	errs = append(errs, flagErrors(c.storeConfig().Validate(), region.ErrConfig, refused)...)
	if c.GossipAddr == "" {
		return errs
	}
	for _, e := range flagErrors(c.gossipSettings().Validate(), gossip.ErrConfig, refused) {
		if errors.Is(e, gossip.ErrNoKey) {
			if c.GossipKey != "" || c.GossipKeyFile != "" {
				continue // the keys come at start, where gossip.New judges again
			}
			e = gossipStartErr(e)
		}
		errs = append(errs, e)
	}
	return errs
}

// fieldFlags names the flag that sets each Config field a package's
// Validate may refuse.
var fieldFlags = map[string]string{
	"MaxKeyBytes":       "max-key-bytes",
	"MaxBatch":          "max-batch",
	"MaxRequestBytes":   "max-request-bytes",
	"MaxWindow":         "max-inline-window",
	"MaxInlineLimit":    "max-inline-limit",
	"Check.Path":        "check-path",
	"Check.DefaultRule": "check-default-rule",
	"Check.DenyStatus":  "check-deny-status",
	"Region":            "region",
	"DenyCache.MaxKeys": "deny-cache-keys",
	"Name":              "node-name",
	"BindAddr":          "gossip-addr",
	"AdvertiseAddr":     "gossip-advertise",
	"FlushInterval":     "flush-interval",
	"HeartbeatInterval": "gossip-heartbeat",
	"Suspicion":         "burst-guard-suspicion",
}

// flagErrors returns the errors err joins, as a package's Validate
// returns them ("<prefix>: <Field>: <problem>"), each naming the flag
// that sets its field instead ("--<flag>: <problem>"), less those about
// a flag in refused, to which it adds the flags it names; an error about
// a field no flag sets is returned as it is.
func flagErrors(err, prefix error, refused map[string]bool) []error {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		rest, _ := strings.CutPrefix(e.Error(), prefix.Error()+": ")
		field, problem, _ := strings.Cut(rest, ": ")
		if name, ok := fieldFlags[field]; ok {
			if refused[name] {
				continue
			}
			refused[name] = true
			e = fmt.Errorf("--%s: %s", name, problem)
		}
		out = append(out, e)
	}
	return out
}

// rlsHeaderSets are the values of --rls-headers.
var rlsHeaderSets = map[string]envoyrls.Headers{
	"none":  {},
	"draft": envoyrls.HeadersDraft,
	"x":     envoyrls.HeadersX,
}

// newLogger returns the logger c asks for, writing to w, with every value
// in sec masked.
func newLogger(c config, w io.Writer, sec *secrets) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel, ReplaceAttr: sec.replaceAttr}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// checkKeyHeaders splits --check-key-headers into its alternatives.
func (c config) checkKeyHeaders() []string {
	var out []string
	for _, h := range strings.Split(c.CheckKeyHeaders, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}
