package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"
	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
)

// Config configures a Node. A zero field takes [DefaultWANConfig]'s value,
// as documented on each; start from [LocalConfig] for nodes on one host.
type Config struct {
	// Name is the node's unique name in the pool, at most 255 bytes of
	// UTF-8. Required. Every frame the node sends carries it.
	Name string
	// Region is the node's region. Required, 1 to region.MaxReplicaOf (57)
	// bytes of UTF-8, so that its replicas' names (Region~id) hold it
	// whole. Other nodes accept counts from this node only for this region
	// and its replicas (exactly Region~id, see region.IsReplica), the one
	// it announced when it joined.
	Region string
	// BindAddr is the host:port to listen on for gossip, UDP and TCP.
	// The host is an IP, a name or empty: a name is resolved (with
	// Resolver) and every address it names is bound, and no other (see
	// bind.go); empty, 0.0.0.0 or :: is every interface. Default
	// "0.0.0.0:7946". Ignored when Transport is set.
	BindAddr string
	// AdvertiseAddr is the host:port other nodes reach this node at; a
	// name is resolved to its first address. Default: the first bound
	// address (a private IP when bound to every interface).
	AdvertiseAddr string
	// Resolver looks up host names in BindAddr and AdvertiseAddr, at most
	// 10 s in New. Default net.DefaultResolver.
	Resolver *net.Resolver
	// APIAddr is this node's API address, carried in its metadata with
	// Region so that a status page can list every node. Optional.
	APIAddr string
	// Join lists seed addresses (host:port). New returns at once; a
	// background loop retries with exponential backoff (JoinBackoff up to
	// 30 s) until one seed answers. See JoinTimeout and Node.Ready.
	Join []string
	// SecretKey, when set (16, 24 or 32 bytes), turns on memberlist's AES-GCM
	// encryption; peers without the key are refused.
	SecretKey []byte
	// Insecure allows gossip without SecretKey or SecretKeys on an address
	// other than loopback (every address BindAddr's host resolves to, and
	// AdvertiseAddr's, must be loopback otherwise). Without a key anyone who can reach the port can
	// join the pool, read every replicated key and report counts for a
	// region of their own: use it only in a lab. Without it, New refuses
	// to start keyless on such an address (ErrNoKey).
	Insecure bool
	// SecretKeys is a keyring for key rotation: the first key (or SecretKey
	// when set, then these) encrypts, every key is tried to decrypt. Rotate
	// a running pool with Node.InstallKey, UseKey and RemoveKey (or SetKeys);
	// see keyring.go for the procedure. Each key is 16, 24 or 32 bytes.
	SecretKeys [][]byte

	// OwnStore says that the node decides from a store of its own (the
	// in-memory store), not one it shares with its region's other nodes
	// (Redis). The store must then count this node's admissions under a
	// replica name of its own (Region~id, see region.Config.Replica), and
	// the node also sends its totals to the nodes of its own region that
	// have their own stores, and merges theirs, so that several nodes of
	// one region count together. Default false (a shared store: the
	// region's nodes see each other's counts in it).
	OwnStore bool

	// Epoch, when set, reads the store's epoch: a marker the store keeps
	// among its counts, created when absent (fresh is then true). A new
	// epoch means the store lost its counts (a Redis restarted empty or
	// flushed): the node then asks its peers for its region's totals and
	// max-merges them back (see repair.go). region.Stack.Epoch is one.
	// Default nil: no loss detection.
	Epoch func(ctx context.Context) (epoch string, fresh bool, err error)
	// EpochInterval is how often Epoch is read. Default 1 s.
	EpochInterval time.Duration

	// FlushInterval is how often dirty totals go to the other regions.
	// Default 20 ms.
	FlushInterval time.Duration
	// MaxStaleness is the longest a key's hits wait before they go to the
	// other regions when the key is far below its limit: a key's total
	// goes at the next flush once its hits not yet sent reach its
	// allowance (floor((limit/2 - estimate)/replicas), 0 at or above half
	// the limit), and at the latest MaxStaleness after its oldest unsent
	// hit (see urgency.go). Default 5 s; negative: every changed total
	// goes at the next flush, whatever its limit.
	MaxStaleness time.Duration
	// Grace is how long after a bucket closes its reconciliation runs.
	// Default one FlushInterval.
	Grace time.Duration
	// MaxDirty bounds the totals waiting to be sent; Dirty drops (and
	// counts) new keys beyond it. It also bounds the totals of open
	// buckets whose urgency is tracked; a total beyond that goes at the
	// next flush. Default 100000.
	MaxDirty int
	// MaxTouched bounds the buckets remembered for reconciliation.
	// Default 1000000.
	MaxTouched int
	// MaxStateBytes bounds the push-pull anti-entropy state. Default 64 KiB.
	MaxStateBytes int
	// RetryMargin is how long past one window after a bucket closes (when
	// its successor closes and no estimate reads it any more) its
	// reconciliation is retried and carried by push-pull, and totals for it
	// are still merged: match the store's TTL margin
	// (region.RedisConfig.TTLMargin, 10 s by default), so that a partition
	// shorter than the bucket's life still ends in agreement and a late
	// total never brings back a bucket the store has let expire.
	// Default 10 s.
	RetryMargin time.Duration
	// UDPBudget is the largest frame sent over UDP with SendBestEffort;
	// larger batches go over TCP with SendReliable. Default 1360 (memberlist's
	// 1400-byte UDPBufferSize less its user-message, CRC and encryption
	// overheads).
	UDPBudget int
	// InboxSize bounds the received frames waiting to be merged; frames
	// beyond it are dropped and counted. Default 4096.
	InboxSize int
	// MaxReplicas bounds, per member region, the replica names
	// (<region>~<id>: a node's failover fallback, see
	// region.FallbackRegion) whose totals are merged while their buckets
	// live: no bucket holds more than 1 + MaxReplicas entries per region.
	// Totals under a new replica name beyond it are dropped and counted.
	// Default 64.
	MaxReplicas int
	// InboxBytes bounds the bytes of the received frames waiting to be
	// merged (frames are up to MaxMessage each); frames beyond it are
	// dropped and counted as queue_full. Default 64 MiB.
	InboxBytes int

	// Memberlist timings. Defaults are memberlist.DefaultWANConfig tuned for
	// faster failure detection and anti-entropy: GossipInterval 200 ms,
	// ProbeInterval 2 s, ProbeTimeout 1 s, SuspicionMult 6,
	// PushPullInterval 10 s, TCPTimeout 10 s, GossipToTheDeadTime 60 s
	// ([LocalConfig] has shorter ones).
	GossipInterval      time.Duration
	ProbeInterval       time.Duration
	ProbeTimeout        time.Duration
	SuspicionMult       int
	PushPullInterval    time.Duration
	TCPTimeout          time.Duration
	GossipToTheDeadTime time.Duration
	// ReconnectInterval is how often the node tries to rejoin members it saw
	// die (a healed partition otherwise leaves two pools). Default 5 s.
	ReconnectInterval time.Duration
	// JoinTimeout is how long after New a node with Join set may go
	// without seeing a live member of another region before Ready reports
	// it not ready (a wrong gossip key, an unreachable seed). Default 30 s;
	// negative: never.
	JoinTimeout time.Duration
	// JoinBackoff is the first retry delay of the seed join loop, doubled up
	// to 30 s. Default 500 ms.
	JoinBackoff time.Duration

	// HeartbeatInterval is how often the node sends an empty frame to
	// every member of the other regions, so that they know it is alive
	// even when it has no totals to send. Default 100 ms.
	HeartbeatInterval time.Duration
	// Suspicion is how long a region may go unheard (no totals, no
	// heartbeat) before GuardView reports it silent. Default 1 s.
	Suspicion time.Duration
	// GuardMargin is added to the guard's horizon (FlushInterval plus the
	// measured one-way delay) for jitter and merge time. Default 20 ms;
	// negative: none.
	GuardMargin time.Duration
	// MaxClockSkew is the largest clock offset to a peer (measured from
	// ping acks, see Node.ClockOffsets) taken as normal; a larger one is
	// logged once and counted. Default 250 ms.
	MaxClockSkew time.Duration

	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the node's and memberlist's logs. Default
	// slog.Default().
	Logger *slog.Logger
	// Transport, when set, replaces memberlist's UDP/TCP transport (tests
	// wrap one in a FaultTransport). See Listen.
	Transport memberlist.NodeAwareTransport
}

// Defaults that rlnode's flags show.
const (
	DefaultFlushInterval = 20 * time.Millisecond
	// DefaultMaxStaleness is Config.MaxStaleness's default.
	DefaultMaxStaleness = 5 * time.Second
	DefaultBindAddr     = "0.0.0.0:7946"
	// DefaultJoinTimeout is Config.JoinTimeout's default.
	DefaultJoinTimeout = 30 * time.Second
)

// DefaultWANConfig returns the settings for a pool that spans regions:
// memberlist's DefaultWANConfig tuned for faster failure detection and
// anti-entropy, and the replication defaults documented on [Config]. Set
// Name and Region (and usually Join and a key) before New. Grace, left
// zero, follows FlushInterval.
func DefaultWANConfig() Config {
	return Config{
		BindAddr:            DefaultBindAddr,
		EpochInterval:       time.Second,
		FlushInterval:       DefaultFlushInterval,
		MaxStaleness:        DefaultMaxStaleness,
		MaxDirty:            100000,
		MaxTouched:          1000000,
		MaxStateBytes:       64 << 10,
		RetryMargin:         10 * time.Second,
		UDPBudget:           1360,
		InboxSize:           4096,
		MaxReplicas:         64,
		InboxBytes:          64 << 20,
		GossipInterval:      200 * time.Millisecond,
		ProbeInterval:       2 * time.Second,
		ProbeTimeout:        time.Second,
		SuspicionMult:       6,
		PushPullInterval:    10 * time.Second,
		TCPTimeout:          10 * time.Second,
		GossipToTheDeadTime: 60 * time.Second,
		ReconnectInterval:   5 * time.Second,
		JoinTimeout:         DefaultJoinTimeout,
		JoinBackoff:         500 * time.Millisecond,
		HeartbeatInterval:   DefaultHeartbeatInterval,
		Suspicion:           DefaultSuspicion,
		GuardMargin:         DefaultGuardMargin,
		MaxClockSkew:        250 * time.Millisecond,
		Now:                 time.Now,
		Logger:              slog.Default(),
	}
}

// LocalConfig returns [DefaultWANConfig] with memberlist's timings for
// nodes on one host or a fast LAN (loopback tests, a demo on one
// machine): failures detected, seeds retried and state exchanged within a
// second or two rather than tens of seconds.
func LocalConfig() Config {
	c := DefaultWANConfig()
	c.GossipInterval = 50 * time.Millisecond
	c.ProbeInterval = 300 * time.Millisecond
	c.ProbeTimeout = 250 * time.Millisecond
	c.SuspicionMult = 3
	c.PushPullInterval = time.Second
	c.TCPTimeout = 2 * time.Second
	c.GossipToTheDeadTime = 5 * time.Second
	c.ReconnectInterval = 300 * time.Millisecond
	c.JoinBackoff = 50 * time.Millisecond
	return c
}

// withDefaults returns c with each zero field set to DefaultWANConfig's
// value, and a zero Grace to FlushInterval.
func (c Config) withDefaults() Config {
	d := DefaultWANConfig()
	cv, dv := reflect.ValueOf(&c).Elem(), reflect.ValueOf(d)
	for i := range cv.NumField() {
		if f := cv.Field(i); f.IsZero() {
			f.Set(dv.Field(i))
		}
	}
	if c.Grace == 0 {
		c.Grace = c.FlushInterval
	}
	return c
}

// ErrConfig is wrapped by every error of [Config.Validate], and so by
// every configuration error from New.
var ErrConfig = errors.New("gossip: invalid config")

// ErrNoKey is returned by New (wrapping ErrConfig) for a node without a key
// on an address other than loopback, unless Config.Insecure is set.
var ErrNoKey = errors.New("gossip: a gossip key is required off loopback (make one: head -c 32 /dev/urandom | base64)")

// Validate reports whether New accepts c, with its zero fields taking
// their defaults: nil, or an [errors.Join] of one error per problem, each
// wrapping [ErrConfig] and naming its field ("gossip: invalid config:
// Suspicion: 1.5s, want at least twice the heartbeat interval, 2s"), and
// [ErrNoKey] for a keyless node off loopback. New calls it.
func (c Config) Validate() error {
	grace := c.Grace // as set: a zero one follows FlushInterval, judged itself
	c = c.withDefaults()
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, a...)))
	}
	switch {
	case c.Name == "":
		bad("Name", "required")
	case !utf8.ValidString(c.Name) || len(c.Name) > maxNodeName:
		bad("Name", "%d bytes, want at most %d bytes of UTF-8", len(c.Name), maxNodeName)
	}
	switch {
	case c.Region == "":
		bad("Region", "required")
	case !utf8.ValidString(c.Region):
		bad("Region", "%q is not UTF-8", c.Region)
	case !validRegion(c.Region):
		bad("Region", "%d bytes, want at most %d with gossip (a node's replica, <region>~<id>, must hold the region's whole name)",
			len(c.Region), region.MaxReplicaOf)
	}
	if c.Transport == nil {
		if _, _, err := splitHostPort(c.BindAddr); err != nil {
			bad("BindAddr", "%q: %v", c.BindAddr, err)
		}
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			bad("AdvertiseAddr", "%q: %v", c.AdvertiseAddr, err)
		}
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		bad("SecretKey", "must be 16, 24 or 32 bytes, got %d", len(c.SecretKey))
	}
	for i, k := range c.SecretKeys {
		if err := CheckKey(k); err != nil {
			bad(fmt.Sprintf("SecretKeys[%d]", i), "%v", err)
		}
	}
	if len(c.keys()) == 0 && !c.Insecure && c.Transport == nil {
		// A name is checked once resolved, in New (bind.go); an IP or an
		// empty host can be refused here.
		if h, _, err := splitHostPort(c.BindAddr); err == nil && (net.ParseIP(h) != nil || h == "") {
			if ips, any, _ := bindHosts(context.Background(), nil, h); notLoopback(ips, any) != "" {
				errs = append(errs, fmt.Errorf("%w: %w: address %s is not loopback", ErrConfig, ErrNoKey, c.BindAddr))
			}
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"FlushInterval", c.FlushInterval}, {"Grace", grace}, {"RetryMargin", c.RetryMargin},
		{"GossipInterval", c.GossipInterval}, {"ProbeInterval", c.ProbeInterval}, {"ProbeTimeout", c.ProbeTimeout},
		{"PushPullInterval", c.PushPullInterval}, {"TCPTimeout", c.TCPTimeout}, {"GossipToTheDeadTime", c.GossipToTheDeadTime},
		{"ReconnectInterval", c.ReconnectInterval}, {"JoinBackoff", c.JoinBackoff}, {"EpochInterval", c.EpochInterval},
		{"HeartbeatInterval", c.HeartbeatInterval},
	} {
		if d.v < 0 {
			bad(d.field, "%v, want 0 (the default) or more", d.v)
		}
	}
	if c.MaxDirty < 0 || c.MaxTouched < 0 || c.MaxStateBytes < 0 || c.InboxSize < 0 || c.InboxBytes < 0 || c.SuspicionMult < 0 {
		bad("sizes", "must not be negative")
	}
	if c.UDPBudget < 64 || c.UDPBudget > 65000 {
		bad("UDPBudget", "%d, want 64 to 65000 bytes", c.UDPBudget)
	}
	if c.HeartbeatInterval >= 0 && c.Suspicion < 2*c.HeartbeatInterval {
		bad("Suspicion", "%v, want at least twice the heartbeat interval, %v", c.Suspicion, 2*c.HeartbeatInterval)
	}
	return errors.Join(errs...)
}

func splitHostPort(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return h, port, nil
}

// joinCountHold is how long after a node begins to join its members start
// counting it (Node.countFrom): guard.CountFromHold.
func (c Config) joinCountHold() time.Duration {
	return guard.CountFromHold(c.GossipInterval, c.FlushInterval+max(c.GuardMargin, 0))
}

// memberlistConfig builds memberlist's config from c (with defaults).
// quiet, when it returns true, demotes memberlist's errors to debug, and
// lim rate-limits its lines (see newStdLogger).
func (c Config) memberlistConfig(quiet func() bool, lim *logLimiter) (*memberlist.Config, error) {
	mc := memberlist.DefaultWANConfig()
	mc.Name = c.Name
	if c.Transport != nil {
		mc.Transport = c.Transport
	}
	if c.AdvertiseAddr != "" {
		_, p, _ := splitHostPort(c.AdvertiseAddr)
		mc.AdvertisePort = p // the host, resolved, is set by New
	}
	if keys := c.keys(); len(keys) > 0 {
		kr, err := memberlist.NewKeyring(keys[1:], keys[0])
		if err != nil {
			return nil, fmt.Errorf("%w: keyring: %v", ErrConfig, err)
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	mc.GossipInterval = c.GossipInterval
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.PushPullInterval = c.PushPullInterval
	mc.TCPTimeout = c.TCPTimeout
	mc.GossipToTheDeadTime = c.GossipToTheDeadTime
	mc.Logger = newStdLogger(c.Logger, quiet, lim)
	return mc, nil
}
