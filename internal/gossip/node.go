package gossip

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rlcluster/rlcluster/internal/region"
)

// Store is what replication needs of a regional store: [region.Store]
// implements it. Both methods may block on I/O until ctx is done; the Node
// calls them from its own goroutines, never from Dirty.
type Store interface {
	// Merge max-merges totals reported by other regions; a total for the
	// local region is ignored.
	Merge(ctx context.Context, totals []region.Total) error
	// Vectors returns the per-region counts of each bucket in refs, in order.
	Vectors(ctx context.Context, refs []region.BucketRef) ([][]region.Total, error)
}

var _ Store = region.Store(nil)

// ref names one bucket of a key, as a map key.
type ref struct {
	key    string
	window time.Duration
	bucket int64
}

// dref names one region's total of a bucket, as a map key.
type dref struct {
	ref
	region string
}

// Node is one member of the gossip pool: it replicates the local region's
// totals to the other regions and merges theirs into the local store.
//
// Every FlushInterval the dirty totals (from Dirty) go to every other
// region, each to the key's owner there: the live member of that region
// with the highest rendezvous score fnv(member name, key). The owner
// max-merges each received batch into its store in one call. After a bucket
// closes plus Grace, the node reads the closed bucket's vector from its
// store and sends its own region's totals in it (its own and its
// replicas') to every other region (reconciliation, over TCP, retried
// until it lands or the bucket expires); memberlist's push-pull carries
// the recently reconciled totals as anti-entropy. Totals only grow and
// merging keeps the maximum, so a duplicate, reordered or lost message
// never double-counts. A frame is merged only from a live member and only
// for its own region (see doc.go).
//
// The decision path reaches it through one interface it owns
// (decision.Pool): Regions, Dirty, Decided, GuardView and RemoteAges.
//
// A Node is safe for concurrent use. Create it with New and stop it with
// Close.
type Node struct {
	cfg   Config
	store Store
	log   *slog.Logger
	// logLim rate-limits the log lines network input causes (log.go).
	logLim *logLimiter
	ml     *memberlist.Memberlist
	addr   string // ml's advertised address, read once: UpdateNode rewrites its local node
	met    *metrics
	keys   *memberlist.Keyring // nil without encryption

	token      uint64       // random, announced in the metadata, carried by every frame
	fb         Fallbacker   // the store, when it may decide from a fallback (apart.go)
	onFallback atomic.Bool  // the store decides from its fallback, as announced
	started    time.Time    // cfg.Now() at New, for Ready
	joinedAt   atomic.Int64 // Unix ns of the first join of a seed (started until then), for GuardView's Joining
	// countFrom is when the members count this node among its region's
	// nodes (Unix ms), announced in its metadata: its first join's start
	// plus Config.joinCountHold, the same instant in every node's view
	// (see GuardView).
	countFrom  atomic.Int64
	seenRemote atomic.Bool               // a member of another region was seen alive
	acc        atomic.Pointer[Accuracy]  // told of every decision (Decided); nil: none
	demand     atomic.Pointer[demandBox] // the guard's demand (demand.go); nil: none

	// replicas is, per member region, the replica names (<region>~<id>)
	// accepted from it, each with the expiry of the newest bucket it was
	// reported in. Used only by the receive loop.
	replicas map[string]map[string]time.Time

	mu       sync.Mutex
	dirty    map[dref]tally
	echo     map[dref]tally             // the previous flush's urgent totals, sent once more
	urg      urgency                    // the replication policy's state (urgency.go)
	notice   map[ref]uint64             // first touches, for the local buddy
	touched  map[int64]map[ref]struct{} // bucket end (Unix ms) -> buckets
	nTouched int
	closing  bool

	memMu   sync.RWMutex
	members map[string]*member

	stateMu sync.Mutex
	recent  ring[region.Total] // recently reconciled totals, for push-pull

	ageMu   sync.Mutex
	newest  map[string]time.Time     // remote region -> Sent of newest merged frame
	offsets map[string]time.Duration // peer -> clock offset (peer minus local)
	skewed  map[string]bool          // peers whose offset exceeds MaxClockSkew

	freshMu sync.Mutex
	fresh   freshness // see freshness.go

	pendMu  sync.Mutex
	pending []*pending // reconciliation sends to retry

	rep repairState // self-repair and rejoin bookkeeping (repair.go)
	seq sequences   // sequence numbers sent and accepted (replay.go)

	inbox    chan []byte
	inboxB   atomic.Int64 // bytes of the frames in inbox
	stop     chan struct{}
	loops    sync.WaitGroup
	sends    sync.WaitGroup
	sendSem  chan struct{}
	stopOnce sync.Once
	closeErr error
	leaving  atomic.Bool
	stopping atomic.Bool // Close or kill began: memberlist's send errors are expected
}

// New starts a node: it binds (or uses cfg.Transport), starts the flush,
// reconciliation and merge loops and, when cfg.Join is set, a background
// loop that joins the seeds. It blocks on the network only to resolve
// host names in cfg.BindAddr and cfg.AdvertiseAddr (at most 10 s).
func New(cfg Config, store Store) (*Node, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: store is required", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := &Node{
		cfg:     cfg,
		store:   store,
		log:     cfg.Logger.With("component", "gossip", "node", cfg.Name, "region", cfg.Region),
		met:     newMetrics(),
		dirty:   map[dref]tally{},
		notice:  map[ref]uint64{},
		touched: map[int64]map[ref]struct{}{},
		members: map[string]*member{},
		recent:  newRing[region.Total](max(cfg.MaxStateBytes/16, 16)),
		newest:  map[string]time.Time{},
		offsets: map[string]time.Duration{},
		skewed:  map[string]bool{},
		inbox:   make(chan []byte, cfg.InboxSize),
		stop:    make(chan struct{}),
		sendSem: make(chan struct{}, 8),
		token:   randomToken(),
		started: cfg.Now(),

		replicas: map[string]map[string]time.Time{},
	}
	n.met.node = n
	n.joinedAt.Store(n.started.UnixNano())
	n.countFrom.Store(n.started.Add(n.cfg.joinCountHold()).UnixMilli())
	if fb, ok := store.(Fallbacker); ok {
		n.fb = fb
		n.onFallback.Store(fb.OnFallback()) // announced in the first metadata
	}
	n.initRepair()
	n.logLim = newLogLimiter(cfg.Now, n.met.logSuppressed)
	mc, err := cfg.memberlistConfig(n.stopping.Load, n.logLim)
	if err != nil {
		return nil, err
	}
	b, err := cfg.bind(context.Background(), mc.Keyring != nil, n.logLim)
	if err != nil {
		return nil, err
	}
	if b.transport != nil {
		mc.Transport = b.transport
	}
	if b.advertise != "" {
		mc.AdvertiseAddr = b.advertise
	}
	d := &delegate{n: n}
	mc.Delegate, mc.Events, mc.Ping = d, d, d
	n.keys = mc.Keyring
	ml, err := memberlist.Create(mc)
	if err != nil {
		if b.transport != nil {
			_ = b.transport.Shutdown()
		}
		return nil, fmt.Errorf("gossip: start memberlist: %w", err)
	}
	n.ml = ml
	n.addr = ml.LocalNode().Address()
	n.goLoop(n.flushLoop)
	n.goLoop(n.reconcileLoop)
	n.goLoop(n.receiveLoop)
	n.goLoop(n.reconnectLoop)
	n.goLoop(n.heartbeatLoop)
	n.goLoop(n.probeLoop)
	n.goLoop(n.rejoinLoop)
	if len(cfg.Join) > 0 {
		n.goLoop(n.joinLoop)
	}
	if cfg.Epoch != nil {
		n.goLoop(n.epochLoop)
	}
	if cfg.OwnStore {
		// A store of its own starts empty: ask every member that comes
		// alive within the repair window for this node's region's totals.
		n.RequestRepair("a store of its own starts empty")
	}
	n.log.Info("gossip node started", "addr", n.Addr())
	return n, nil
}

// every calls f every interval until the node stops.
func (n *Node) every(interval time.Duration, f func()) {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tk.C:
			f()
		}
	}
}

func (n *Node) goLoop(f func()) {
	n.loops.Add(1)
	go func() {
		defer n.loops.Done()
		f()
	}()
}

// Addr returns the host:port other nodes reach this node at (the address to
// give others as a seed).
func (n *Node) Addr() string { return n.addr }

// self names this node in the frames it sends.
func (n *Node) self() Sender {
	return Sender{Node: n.cfg.Name, Region: n.cfg.Region, Token: n.token}
}

// randomToken returns a random non-zero token.
func randomToken() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if t := binary.BigEndian.Uint64(b[:]); t != 0 {
			return t
		}
	}
}

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Region returns the node's region.
func (n *Node) Region() string { return n.cfg.Region }

// Close leaves the pool gracefully: it stops the loops, sends the pending
// dirty totals, hands the buckets awaiting reconciliation to the local
// region's other nodes, broadcasts its leave (waiting until ctx is done at
// most) and shuts memberlist down.
func (n *Node) Close(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.mu.Lock()
		n.closing = true
		var touched []region.Total
		for _, set := range n.touched {
			for k := range set {
				touched = append(touched, region.Total{Key: k.key, Window: k.window, Bucket: k.bucket, Region: n.cfg.Region, Count: 1})
			}
		}
		n.mu.Unlock()
		close(n.stop)
		n.loops.Wait()
		n.flush(true)
		if v := n.view(); len(touched) > 0 && len(v.local) > 0 {
			for dest, group := range route(touched, v.local) {
				if err := n.sendReliable(KindTouch, dest, group); err != nil {
					n.log.Warn("hand off reconciliation", "to", dest.node.Name, "err", err)
				}
			}
		}
		n.sends.Wait()
		timeout := 5 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		// Announce the leave in the metadata first, so that peers record
		// "left" rather than "dead" and do not try to reconnect.
		n.leaving.Store(true)
		n.stopping.Store(true)
		if err := n.broadcast(n.ml.UpdateNode, timeout/2); err != nil {
			n.log.Debug("announce leave", "err", err)
		}
		if err := n.broadcast(n.ml.Leave, timeout/2); err != nil {
			n.closeErr = fmt.Errorf("gossip: leave: %w", err)
		}
		if err := n.ml.Shutdown(); err != nil && n.closeErr == nil {
			n.closeErr = fmt.Errorf("gossip: shutdown: %w", err)
		}
		n.log.Info("gossip node left")
	})
	return n.closeErr
}

// broadcast runs f (memberlist's UpdateNode or Leave: each waits until its
// broadcast has gone out or timeout passes) and returns its error, but
// returns nil at once when no other member is alive or suspect, checked
// every 20 ms: when every node stops at once, the last one has nobody left
// to tell and f would wait out its whole timeout.
func (n *Node) broadcast(f func(time.Duration) error, timeout time.Duration) error {
	if !n.othersAlive() {
		return nil
	}
	done := make(chan error, 1)
	// When this returns early, f goes on waiting until its timeout (it
	// cannot be cancelled) and its result is dropped.
	go func() {
		// Shutdown may come first when this returns early: memberlist's
		// Leave then panics ("leave after shutdown"), harmlessly.
		defer func() { _ = recover() }()
		done <- f(timeout)
	}()
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tk.C:
			if !n.othersAlive() {
				return nil
			}
		}
	}
}

// othersAlive reports whether memberlist holds another member alive or
// suspect (one that a broadcast could still reach).
func (n *Node) othersAlive() bool {
	for _, m := range n.ml.Members() {
		if m.Name != n.cfg.Name && (m.State == memberlist.StateAlive || m.State == memberlist.StateSuspect) {
			return true
		}
	}
	return false
}

// kill stops the node abruptly, as a crash would: no flush, no leave.
func (n *Node) kill() {
	n.stopOnce.Do(func() {
		n.mu.Lock()
		n.closing = true
		n.mu.Unlock()
		n.stopping.Store(true)
		close(n.stop)
		_ = n.ml.Shutdown()
		n.loops.Wait()
		n.sends.Wait()
	})
}
