package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"
	"github.com/rlcluster/rlcluster/internal/region"
)

// Config configures a Node. Zero fields mean the documented default.
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
	// PushPullInterval 10 s, TCPTimeout 10 s, GossipToTheDeadTime 60 s.
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

// Defaults.
const (
	DefaultFlushInterval = 20 * time.Millisecond
	// DefaultMaxStaleness is Config.MaxStaleness's default.
	DefaultMaxStaleness = 5 * time.Second
	DefaultBindAddr     = "0.0.0.0:7946"
)

func (c Config) withDefaults() Config {
	d := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	i := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if c.BindAddr == "" {
		c.BindAddr = DefaultBindAddr
	}
	d(&c.FlushInterval, DefaultFlushInterval)
	d(&c.Grace, c.FlushInterval)
	d(&c.MaxStaleness, DefaultMaxStaleness)
	d(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	d(&c.Suspicion, DefaultSuspicion)
	d(&c.GuardMargin, DefaultGuardMargin)
	d(&c.RetryMargin, 10*time.Second)
	i(&c.MaxDirty, 100000)
	i(&c.MaxTouched, 1000000)
	i(&c.MaxStateBytes, 64<<10)
	i(&c.UDPBudget, 1360)
	i(&c.InboxSize, 4096)
	i(&c.InboxBytes, 64<<20)
	i(&c.MaxReplicas, 64)
	d(&c.GossipInterval, 200*time.Millisecond)
	d(&c.ProbeInterval, 2*time.Second)
	d(&c.ProbeTimeout, time.Second)
	i(&c.SuspicionMult, 6)
	d(&c.PushPullInterval, 10*time.Second)
	d(&c.TCPTimeout, 10*time.Second)
	d(&c.GossipToTheDeadTime, 60*time.Second)
	d(&c.ReconnectInterval, 5*time.Second)
	d(&c.JoinBackoff, 500*time.Millisecond)
	d(&c.EpochInterval, time.Second)
	d(&c.MaxClockSkew, 250*time.Millisecond)
	d(&c.JoinTimeout, 30*time.Second)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ErrConfig is wrapped by every configuration error from New.
var ErrConfig = errors.New("gossip: invalid config")

// ErrNoKey is returned by New (wrapping ErrConfig) for a node without a key
// on an address other than loopback, unless Config.Insecure is set.
var ErrNoKey = errors.New("gossip: a gossip key is required off loopback (make one: head -c 32 /dev/urandom | base64)")

func (c Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	if c.Name == "" {
		return bad("name is required")
	}
	if !validRegion(c.Region) {
		return bad("region must be 1 to %d bytes of UTF-8 (so that its replicas' names, region~id, hold it whole), got %q", region.MaxReplicaOf, c.Region)
	}
	if !utf8.ValidString(c.Name) || len(c.Name) > maxNodeName {
		return bad("name must be at most %d bytes of UTF-8, got %q", maxNodeName, c.Name)
	}
	if c.Transport == nil {
		if _, _, err := splitHostPort(c.BindAddr); err != nil {
			return bad("bind address %q: %v", c.BindAddr, err)
		}
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			return bad("advertise address %q: %v", c.AdvertiseAddr, err)
		}
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return bad("secret key must be 16, 24 or 32 bytes, got %d", len(c.SecretKey))
	}
	for i, k := range c.SecretKeys {
		if err := CheckKey(k); err != nil {
			return bad("secret key %d: %v", i+1, err)
		}
	}
	if len(c.keys()) == 0 && !c.Insecure && c.Transport == nil {
		// A name is checked once resolved, in New (bind.go); an IP or an
		// empty host can be refused here.
		if h, _, _ := splitHostPort(c.BindAddr); net.ParseIP(h) != nil || h == "" {
			if ips, any, _ := bindHosts(context.Background(), nil, h); notLoopback(ips, any) != "" {
				return fmt.Errorf("%w: %w: address %s is not loopback", ErrConfig, ErrNoKey, c.BindAddr)
			}
		}
	}
	for _, p := range []time.Duration{c.FlushInterval, c.Grace, c.RetryMargin, c.GossipInterval, c.ProbeInterval,
		c.ProbeTimeout, c.PushPullInterval, c.TCPTimeout, c.GossipToTheDeadTime, c.ReconnectInterval, c.JoinBackoff, c.EpochInterval} {
		if p < 0 {
			return bad("durations must not be negative")
		}
	}
	if c.MaxDirty < 0 || c.MaxTouched < 0 || c.MaxStateBytes < 0 || c.InboxSize < 0 || c.InboxBytes < 0 || c.SuspicionMult < 0 {
		return bad("sizes must not be negative")
	}
	if c.UDPBudget < 64 || c.UDPBudget > 65000 {
		return bad("UDP budget must be from 64 to 65000 bytes, got %d", c.UDPBudget)
	}
	return nil
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
