package gossip

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sort"
	"strings"
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

// maxReliableFrame is the largest frame sent over TCP; bigger batches are
// split.
const maxReliableFrame = 256 << 10

// maxUDPFrames is the most UDP packets one destination gets per flush;
// a larger batch goes over TCP instead.
const maxUDPFrames = 4

// Node is one member of the gossip pool: it replicates the local region's
// totals to the other regions and merges theirs into the local store.
//
// Every FlushInterval the dirty totals (from Dirty) go to every other
// region, each to the key's owner there: the live member of that region
// with the highest rendezvous score fnv(member name, key). The owner
// max-merges each received batch into its store in one call. After a bucket
// closes plus Grace, the node reads the closed bucket's full vector from its
// store and sends every region's total in it to every other region
// (reconciliation, over TCP, retried until it lands or the bucket expires);
// memberlist's push-pull carries the recently reconciled totals as
// anti-entropy. Totals only grow and merging keeps the maximum, so a
// duplicate, reordered or lost message never double-counts.
//
// A Node is safe for concurrent use. Create it with New and stop it with
// Close.
type Node struct {
	cfg   Config
	store Store
	log   *slog.Logger
	ml    *memberlist.Memberlist
	met   *metrics
	keys  *memberlist.Keyring // nil without encryption

	mu       sync.Mutex
	dirty    map[dref]uint64
	echo     map[dref]uint64            // the previous flush's totals, sent once more
	notice   map[ref]uint64             // first touches, for the local buddy
	touched  map[int64]map[ref]struct{} // bucket end (Unix ms) -> buckets
	nTouched int
	closing  bool

	memMu   sync.RWMutex
	members map[string]*member

	stateMu sync.Mutex
	recent  []region.Total // ring of recently reconciled totals, for push-pull
	next    int

	ageMu   sync.Mutex
	newest  map[string]time.Time     // remote region -> Sent of newest merged frame
	offsets map[string]time.Duration // peer -> clock offset (peer minus local)

	pendMu  sync.Mutex
	pending []*pending // reconciliation sends to retry

	inbox    chan []byte
	inboxB   atomic.Int64 // bytes of the frames in inbox
	stop     chan struct{}
	loops    sync.WaitGroup
	sends    sync.WaitGroup
	sendSem  chan struct{}
	stopOnce sync.Once
	closeErr error
	leaving  atomic.Bool
}

// member is a copy of one memberlist node as this node saw it last.
type member struct {
	node    memberlist.Node // copy, Meta included
	region  string
	api     string
	state   string // alive, dead, left
	since   time.Time
	isLocal bool
}

// New starts a node: it binds (or uses cfg.Transport), starts the flush,
// reconciliation and merge loops and, when cfg.Join is set, a background
// loop that joins the seeds. It never blocks on the network.
func New(cfg Config, store Store) (*Node, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: store is required", ErrConfig)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:     cfg,
		store:   store,
		log:     cfg.Logger.With("component", "gossip", "node", cfg.Name, "region", cfg.Region),
		met:     newMetrics(),
		dirty:   map[dref]uint64{},
		notice:  map[ref]uint64{},
		touched: map[int64]map[ref]struct{}{},
		members: map[string]*member{},
		recent:  make([]region.Total, 0, max(cfg.MaxStateBytes/16, 16)),
		newest:  map[string]time.Time{},
		offsets: map[string]time.Duration{},
		inbox:   make(chan []byte, cfg.InboxSize),
		stop:    make(chan struct{}),
		sendSem: make(chan struct{}, 8),
	}
	n.met.node = n
	mc, err := cfg.memberlistConfig()
	if err != nil {
		return nil, err
	}
	d := &delegate{n: n}
	mc.Delegate, mc.Events, mc.Ping = d, d, d
	n.keys = mc.Keyring
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("gossip: start memberlist: %w", err)
	}
	n.ml = ml
	n.goLoop(n.flushLoop)
	n.goLoop(n.reconcileLoop)
	n.goLoop(n.receiveLoop)
	n.goLoop(n.reconnectLoop)
	if len(cfg.Join) > 0 {
		n.goLoop(n.joinLoop)
	}
	n.log.Info("gossip node started", "addr", n.Addr())
	return n, nil
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
func (n *Node) Addr() string { return n.ml.LocalNode().Address() }

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Region returns the node's region.
func (n *Node) Region() string { return n.cfg.Region }

// Dirty records the local region's new total for a key's bucket, as returned
// by the decision (region.Result.Local). An empty t.Region means the local
// region; another region is the local store's fallback region (see
// region.Failover), whose totals replicate like any region's. It never
// blocks on I/O: it updates a bounded map under a short lock. When MaxDirty keys wait already, a new key is dropped and
// counted: a later total or the reconciliation repairs it.
func (n *Node) Dirty(t region.Total) {
	if t.Count == 0 || len(t.Key) == 0 {
		return
	}
	if len(t.Key) > MaxKeyLen || t.Window < time.Millisecond || t.Window.Milliseconds() > maxWindowMs {
		n.met.drop("bad_total")
		return
	}
	if t.Region == "" {
		t.Region = n.cfg.Region
	}
	if len(t.Region) > MaxRegionLen {
		n.met.drop("bad_total")
		return
	}
	k := ref{t.Key, t.Window, t.Bucket}
	dk := dref{k, t.Region}
	due := (t.Bucket + 1) * t.Window.Milliseconds()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return
	}
	if c, ok := n.dirty[dk]; ok {
		if t.Count > c {
			n.dirty[dk] = t.Count
		}
	} else if len(n.dirty) >= n.cfg.MaxDirty {
		n.met.drop("dirty_full")
	} else {
		n.dirty[dk] = t.Count
	}
	set := n.touched[due]
	if set == nil {
		set = map[ref]struct{}{}
		n.touched[due] = set
	}
	if _, ok := set[k]; !ok {
		if n.nTouched >= n.cfg.MaxTouched {
			n.met.drop("touched_full")
			return
		}
		set[k] = struct{}{}
		n.nTouched++
		if len(n.notice) < n.cfg.MaxDirty {
			n.notice[k] = t.Count
		}
	}
}

func (n *Node) flushLoop() {
	tk := time.NewTicker(n.cfg.FlushInterval)
	defer tk.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tk.C:
			n.flush(false)
		}
	}
}

// flush sends the dirty totals to every other region and the first touches
// to the local buddy. A final flush (from Close) sends everything over TCP
// and waits for it, so that totals admitted before a graceful shutdown are
// not left to UDP.
func (n *Node) flush(final bool) {
	n.mu.Lock()
	var dirty map[dref]uint64
	var notice map[ref]uint64
	if len(n.dirty) > 0 {
		dirty, n.dirty = n.dirty, make(map[dref]uint64, len(n.dirty))
	}
	echo := n.echo
	n.echo = dirty // read-only from here on: n.dirty is a new map
	if len(n.notice) > 0 {
		notice, n.notice = n.notice, map[ref]uint64{}
	}
	n.mu.Unlock()
	// Every total goes out in two consecutive flushes, unless a newer one
	// supersedes it: a single lost UDP packet is then repaired one flush
	// interval later, even for a key that saw no more traffic, instead of at
	// the bucket's reconciliation. Keys that stay busy cost nothing more
	// (totals only grow, so the dirty one is the newer).
	totals := make([]region.Total, 0, len(dirty)+len(echo))
	for k, c := range dirty {
		totals = append(totals, region.Total{Key: k.key, Window: k.window, Bucket: k.bucket, Region: k.region, Count: c})
	}
	for k, c := range echo {
		if _, newer := dirty[k]; !newer {
			totals = append(totals, region.Total{Key: k.key, Window: k.window, Bucket: k.bucket, Region: k.region, Count: c})
		}
	}
	if len(totals) == 0 && len(notice) == 0 {
		return
	}
	v := n.view()
	if len(totals) > 0 {
		for _, ms := range v.remote {
			for dest, group := range route(totals, ms) {
				n.send(final, KindFlush, dest, group)
			}
		}
	}
	if len(notice) > 0 && len(v.local) > 0 {
		totals := n.totals(notice)
		for dest, group := range route(totals, v.local) {
			n.send(final, KindTouch, dest, group)
		}
	}
}

// send sends totals to dest: at once over TCP when reliable, else with
// sendAsync.
func (n *Node) send(reliable bool, kind Kind, dest *member, totals []region.Total) {
	if !reliable {
		n.sendAsync(kind, dest, totals)
		return
	}
	if err := n.sendReliable(kind, dest, totals); err != nil {
		n.log.Warn("final flush", "to", dest.node.Name, "err", err)
	}
}

func (n *Node) totals(m map[ref]uint64) []region.Total {
	out := make([]region.Total, 0, len(m))
	for k, c := range m {
		out = append(out, region.Total{Key: k.key, Window: k.window, Bucket: k.bucket, Region: n.cfg.Region, Count: c})
	}
	return out
}

// sendAsync sends totals to dest without blocking the caller for long: over
// UDP when they fit in a few packets, otherwise over TCP on a bounded set of
// goroutines (a batch that finds them all busy is dropped and counted).
func (n *Node) sendAsync(kind Kind, dest *member, totals []region.Total) {
	frames, err := Encode(kind, n.cfg.Now(), n.cfg.Region, totals, n.cfg.UDPBudget)
	if err != nil {
		n.met.drop("encode")
		n.log.Warn("encode batch", "err", err)
		return
	}
	udp := len(frames) <= maxUDPFrames
	for _, f := range frames {
		udp = udp && len(f) <= n.cfg.UDPBudget
	}
	if udp {
		for _, f := range frames {
			if err := n.ml.SendBestEffort(&dest.node, f); err != nil {
				n.met.drop("send_error")
				continue
			}
			n.met.sent(kind, len(f))
		}
		return
	}
	select {
	case n.sendSem <- struct{}{}:
	default:
		n.met.drop("send_busy")
		return
	}
	n.sends.Add(1)
	go func() {
		defer n.sends.Done()
		defer func() { <-n.sendSem }()
		if err := n.sendReliable(kind, dest, totals); err != nil {
			n.log.Debug("reliable send", "to", dest.node.Name, "err", err)
		}
	}()
}

// sendReliable sends totals to dest over TCP, in frames of at most 256 KiB.
func (n *Node) sendReliable(kind Kind, dest *member, totals []region.Total) error {
	frames, err := Encode(kind, n.cfg.Now(), n.cfg.Region, totals, maxReliableFrame)
	if err != nil {
		n.met.drop("encode")
		return err
	}
	for _, f := range frames {
		if err := n.ml.SendReliable(&dest.node, f); err != nil {
			n.met.drop("send_error")
			return fmt.Errorf("send %s to %s: %w", kind, dest.node.Name, err)
		}
		n.met.sent(kind, len(f))
	}
	return nil
}

// view is the live membership, grouped for routing.
type view struct {
	remote map[string][]*member // region -> alive members
	local  []*member            // alive members of the local region but self
}

func (n *Node) view() view {
	v := view{remote: map[string][]*member{}}
	n.memMu.RLock()
	defer n.memMu.RUnlock()
	for _, m := range n.members {
		if m.state != "alive" || m.isLocal || m.region == "" {
			continue
		}
		if m.region == n.cfg.Region {
			v.local = append(v.local, m)
		} else {
			v.remote[m.region] = append(v.remote[m.region], m)
		}
	}
	return v
}

func (n *Node) receiveLoop() {
	for {
		select {
		case <-n.stop:
			return
		case b := <-n.inbox:
			n.inboxB.Add(-int64(len(b)))
			n.handle(b)
		}
	}
}

// enqueue queues a received frame for the merge loop without blocking.
func (n *Node) enqueue(b []byte) {
	if len(b) > MaxMessage {
		n.met.drop("oversized")
		return
	}
	if n.inboxB.Add(int64(len(b))) > int64(n.cfg.InboxBytes) {
		n.inboxB.Add(-int64(len(b)))
		n.met.drop("queue_full")
		return
	}
	c := append([]byte(nil), b...)
	select {
	case n.inbox <- c:
	default:
		n.inboxB.Add(-int64(len(b)))
		n.met.drop("queue_full")
	}
}

// handle decodes one frame and merges its totals into the store in one call.
func (n *Node) handle(b []byte) {
	m, err := Decode(b)
	if err != nil {
		n.met.drop(dropReason(err))
		return
	}
	n.met.received(m.Kind, len(b))
	if m.Kind == KindTouch {
		if m.From == n.cfg.Region {
			n.remember(m.Totals)
		}
		return
	}
	remote := m.Totals[:0:0]
	now := n.cfg.Now()
	expired := 0
	for _, t := range m.Totals {
		switch {
		case t.Region == n.cfg.Region:
		case !now.Before(n.expiry(t.Window, t.Bucket)):
			expired++ // late: the bucket is gone from every estimate
		default:
			remote = append(remote, t)
		}
	}
	if expired > 0 {
		n.met.drop("expired")
	}
	if len(remote) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := n.store.Merge(ctx, remote)
		cancel()
		if err != nil {
			n.met.drop("store_error")
			n.log.Warn("merge remote totals", "from", m.From, "n", len(remote), "err", err)
			return
		}
		n.met.merged(len(remote))
	}
	if m.From != n.cfg.Region {
		n.ageMu.Lock()
		if m.Sent.After(n.newest[m.From]) {
			n.newest[m.From] = m.Sent
		}
		n.ageMu.Unlock()
	}
}

// remember adds buckets another node of this region touched to the
// reconciliation set, so that they are reconciled even if that node dies.
func (n *Node) remember(ts []region.Total) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range ts {
		k := ref{t.Key, t.Window, t.Bucket}
		due := (t.Bucket + 1) * t.Window.Milliseconds()
		set := n.touched[due]
		if set == nil {
			set = map[ref]struct{}{}
			n.touched[due] = set
		}
		if _, ok := set[k]; ok {
			continue
		}
		if n.nTouched >= n.cfg.MaxTouched {
			n.met.drop("touched_full")
			return
		}
		set[k] = struct{}{}
		n.nTouched++
	}
}

func dropReason(err error) string {
	switch {
	case errors.Is(err, ErrOversized):
		return "oversized"
	case errors.Is(err, ErrVersion):
		return "version"
	case errors.Is(err, ErrKind):
		return "kind"
	}
	return "malformed"
}

func (n *Node) joinLoop() {
	backoff := n.cfg.JoinBackoff
	for {
		k, err := n.ml.Join(n.cfg.Join)
		if k > 0 {
			n.log.Info("joined gossip pool", "contacted", k, "members", n.ml.NumMembers())
			return
		}
		n.log.Warn("join gossip seeds failed, retrying", "seeds", n.cfg.Join, "in", backoff, "err", err)
		select {
		case <-n.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// reconnectLoop rejoins members seen dead within the last hour: after a
// partition heals, each side would otherwise keep the other for dead.
func (n *Node) reconnectLoop() {
	tk := time.NewTicker(n.cfg.ReconnectInterval)
	defer tk.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tk.C:
		}
		var addrs []string
		now := time.Now()
		n.memMu.RLock()
		for _, m := range n.members {
			if m.state == "dead" && now.Sub(m.since) < time.Hour {
				addrs = append(addrs, m.node.Address())
			}
		}
		n.memMu.RUnlock()
		for _, a := range addrs {
			select {
			case <-n.stop:
				return
			default:
			}
			if _, err := n.ml.Join([]string{a}); err == nil {
				n.log.Info("rejoined member", "addr", a)
			}
		}
	}
}

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
		if err := n.ml.UpdateNode(timeout / 2); err != nil {
			n.log.Debug("announce leave", "err", err)
		}
		if err := n.ml.Leave(timeout / 2); err != nil {
			n.closeErr = fmt.Errorf("gossip: leave: %w", err)
		}
		if err := n.ml.Shutdown(); err != nil && n.closeErr == nil {
			n.closeErr = fmt.Errorf("gossip: shutdown: %w", err)
		}
		n.log.Info("gossip node left")
	})
	return n.closeErr
}

// kill stops the node abruptly, as a crash would: no flush, no leave.
func (n *Node) kill() {
	n.stopOnce.Do(func() {
		n.mu.Lock()
		n.closing = true
		n.mu.Unlock()
		close(n.stop)
		_ = n.ml.Shutdown()
		n.loops.Wait()
		n.sends.Wait()
	})
}

// RegionAge is how fresh this node's view of one remote region is.
type RegionAge struct {
	Region string
	// Newest is the sender's clock on the newest frame merged from the
	// region; zero when nothing has been merged yet.
	Newest time.Time
	// Age is Now() minus Newest (0 when Newest is zero or in the future).
	Age time.Duration
}

// Ages returns, per remote region known to the membership or heard from,
// the age of the newest totals merged from it, sorted by region. An idle
// region's age grows: it sends nothing when nothing changes.
func (n *Node) Ages() []RegionAge {
	now := n.cfg.Now()
	seen := map[string]time.Time{}
	n.memMu.RLock()
	for _, m := range n.members {
		if m.region != "" && m.region != n.cfg.Region {
			seen[m.region] = time.Time{}
		}
	}
	n.memMu.RUnlock()
	n.ageMu.Lock()
	for r, t := range n.newest {
		seen[r] = t
	}
	n.ageMu.Unlock()
	out := make([]RegionAge, 0, len(seen))
	for r, t := range seen {
		a := RegionAge{Region: r, Newest: t}
		if !t.IsZero() && now.After(t) {
			a.Age = now.Sub(t)
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	return out
}

// Member is one node of the pool as this node sees it.
type Member struct {
	Name    string
	Region  string
	APIAddr string
	// Addr is the gossip host:port.
	Addr string
	// State is "alive", "dead" (failed) or "left" (gracefully).
	State string
	// Since is when this node saw the member enter State.
	Since time.Time
	// Local is true for this node itself.
	Local bool
}

// Members returns every node this node knows, sorted by region and name.
func (n *Node) Members() []Member {
	n.memMu.RLock()
	out := make([]Member, 0, len(n.members))
	for _, m := range n.members {
		out = append(out, Member{Name: m.node.Name, Region: m.region, APIAddr: m.api, Addr: m.node.Address(),
			State: m.state, Since: m.since, Local: m.isLocal})
	}
	n.memMu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Region != out[j].Region {
			return out[i].Region < out[j].Region
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// ClockOffsets returns the estimated clock offset of each peer (peer minus
// local), from the timestamps in memberlist's ping acks corrected by half
// the round trip.
func (n *Node) ClockOffsets() map[string]time.Duration {
	n.ageMu.Lock()
	defer n.ageMu.Unlock()
	out := make(map[string]time.Duration, len(n.offsets))
	for k, v := range n.offsets {
		out[k] = v
	}
	return out
}

// Listen returns memberlist's UDP/TCP transport bound to addr (host:port;
// port 0 picks a free one), for wrapping in a FaultTransport and passing as
// Config.Transport.
func Listen(addr string, logger *slog.Logger) (*memberlist.NetTransport, error) {
	h, p, err := splitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("gossip: listen %q: %w", addr, err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	var lastErr error
	for range 10 {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{h}, BindPort: p, Logger: newStdLogger(logger),
		})
		if err == nil {
			return nt, nil
		}
		lastErr = err
		if p != 0 {
			break
		}
	}
	return nil, fmt.Errorf("gossip: listen %q: %w", addr, lastErr)
}

// newStdLogger adapts memberlist's "[LEVEL] msg" log lines to slog.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	lvl := slog.LevelInfo
	for _, c := range []struct {
		prefix string
		lvl    slog.Level
	}{{"[DEBUG] ", slog.LevelDebug}, {"[INFO] ", slog.LevelInfo}, {"[WARN] ", slog.LevelWarn}, {"[ERR] ", slog.LevelError}} {
		if strings.HasPrefix(s, c.prefix) {
			s, lvl = strings.TrimPrefix(s, c.prefix), c.lvl
			break
		}
	}
	w.l.Log(context.Background(), lvl, s, "component", "memberlist")
	return len(p), nil
}
