package main

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/gossip"
	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// world is a deterministic multi-region cluster on a virtual clock (Unix
// ms): each region is one node with a real region.Memory store and a real
// guard.Guard; replication is the flush of dirty totals every flush
// interval to every other region, delivered after the pair's one-way delay
// unless the pair is partitioned; a region with nothing to send sends a
// heartbeat every config.Heartbeat, with the regions it does not hear; a
// region heard again after a silence is re-sent the open buckets' totals
// and relayed the other regions' (gossip's KindRelay, see relay). A
// region's store may restart empty, and its nodes then repair it as gossip
// does (restart.go: what is modelled and what is simplified).
type world struct {
	cfg     config
	regions []*node
	// jrng draws the messages' jitter, prng the pings' and drng the
	// demand frames' (config.Jitter), so that the demand frames leave the
	// other messages' draws as they were.
	jrng, prng, drng *rand.Rand
	// pings is, per pair (r, j), region r's recent round trips to j and
	// when it next measures one (config.Jitter).
	pings [][]pingRing
	q     events
	seq   int64
	now   int64
	// admitted holds every admission's instant per key, for the exact
	// trailing-window counts.
	admitted map[string][]int64
	// by holds, parallel to admitted, the region of each admission.
	by map[string][]int
	// denied holds every denial's instant per key, by the guard or the
	// store, for the false denials: those an exact sliding log of the
	// cluster's admissions would have admitted.
	denied map[string][]int64
	// how holds, parallel to denied, whether the denied request was part
	// of a burst (see requestBurst) and what denied it.
	how     map[string][]denial
	offered int
	guardNo int // denials by the guard
	reads   int // the guard's reads of a key's counts (Peeks)
}

// config is one simulated run.
type config struct {
	Regions int
	Delay   time.Duration // one-way, every pair (the least, with Jitter)
	// Jitter, when set, delays each message by Jitter x an exponential
	// draw more (at most 5 x Jitter), so that messages between a pair may
	// arrive out of order, and the horizon comes from measured round
	// trips, as rlnode's does (see oneWayOf).
	Jitter time.Duration
	// JitterSeed seeds the draws of Jitter.
	JitterSeed uint64
	// Margin is added to the horizon, as rlnode's --burst-guard-margin
	// is (20 ms by default there; 0 here, the least an operator may set
	// and the hardest case for the bounds).
	Margin    time.Duration
	Flush     time.Duration
	Suspicion time.Duration
	Guard     bool
	// Nodes is the number of nodes per region (0 means 1): they share the
	// region's store, as a regional Redis is shared, and each has a guard
	// of its own.
	Nodes int
	Limit window.Limit
	// Cut, when set, is called with (from, to, now ms) and reports whether
	// the pair is partitioned at that instant.
	Cut func(from, to int, nowMs int64) bool
	// Heartbeat is how often a region sends a frame to every other when it
	// has no totals to send, and with it the regions it does not hear
	// (gossip's heartbeat and KindUnheard): 0 means rlnode's default,
	// 100 ms. Frames with totals go on the flush ticks that have them.
	Heartbeat time.Duration
	// Reconcile sends, a flush interval after each bucket closes, every
	// region's own total of each bucket it admitted in to the others, as
	// gossip's reconciliation does (see restart.go: only runs with a store
	// restart set it).
	Reconcile bool
}

type node struct {
	name   string
	idx    int
	store  *region.Memory
	guards []*guard.Guard                    // one per node of the region
	next   int                               // the node the next request goes to
	dirty  map[region.BucketRef]region.Total // the newest own total of each bucket
	heard  []int64                           // per region: last frame received (ms), -inf when never
	back   []int64                           // per region: when it was heard again after a silence (ms)
	// own is the latest own total (count and trail) per key of the
	// buckets an estimate reads (the current and the previous), re-sent
	// whole to a region heard from again after it was silent.
	own    map[region.BucketRef]region.Total
	resend map[int]bool
	// heardRefs is the buckets of the totals merged from other regions,
	// whose totals of the regions other than the receiver's are relayed
	// with own to a region heard from again (see relay).
	heardRefs map[region.BucketRef]bool
	// unheard is, per region, the silent regions its last frame named
	// and when it arrived (ms).
	unheard   map[int][]string
	unheardAt map[int]int64
	// beatAt is when the region's next heartbeat is due (ms).
	beatAt int64
	// sent is, per node of the region, the latest own total of each
	// bucket from that node's admissions: what its gossip node holds
	// dirty or sent last, which it merges back after a loss (restart.go).
	sent []map[region.BucketRef]region.Total
	// touched is the buckets this region admitted in, each reconciled
	// once it closes (config.Reconcile).
	touched map[region.BucketRef]bool
	// repairs is, per node, its open repair (nil when none).
	repairs []*repair
	// lost is, per node, whether the store lost its counts since the
	// node last read its epoch; hold, until when (ms) the node holds its
	// decisions after it found a loss (restart.go).
	lost []bool
	// losses is, per node, how many times it found that the store had
	// lost its counts (guard.View.Losses).
	losses []uint64
	hold   []int64
	// life is, per node, when it is a member (members.go); dynamic is
	// whether the region's members change during the run, and turn the
	// count of requests its alive nodes took in turn.
	life    []life
	dynamic bool
	turn    int
	// fb is, per node, its fallback store while it decides from one
	// (fallback.go), else nil, and mirror that store, which outlives its
	// outages and mirrors the node's store decisions; fbDirty its
	// replica's totals not sent yet, and ownRep every replica's latest,
	// re-sent with own.
	fb      []*region.Memory
	mirrors []*region.Memory
	fbDirty []map[region.BucketRef]region.Total
	ownRep  map[repRef]region.Total
}

// repRef names a replica's total of a bucket.
type repRef struct {
	region.BucketRef
	replica string
}

type event struct {
	at  int64
	seq int64
	// kind: 0 request, 1 flush tick, 2 delivery, or one of restart.go's
	// (a store's loss, its detection, repair requests and answers,
	// reconciliation).
	kind int
	to   int
	node int // the node of region to that decides a request (or a repair's)
	key  string
	hits uint64
	// burst marks a request of a burst, for the false denials of paced
	// traffic.
	burst bool
	from  int
	// fromNode is the node of region from that sent a repair request or
	// answer.
	fromNode int
	// bucket is the bucket of key that a reconciliation closes.
	bucket int64
	tot    []region.Total
	// relay is the totals of other regions that the sender relays (see
	// world.relay).
	relay []region.Total
	// unheard is the sender's silent regions when it sent the frame.
	unheard []string
	// dem is a node's demand (evDemand).
	dem []guard.Demand
}

type events []*event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func newWorld(cfg config, startMs int64) *world {
	w := &world{cfg: cfg, admitted: map[string][]int64{}, by: map[string][]int{}, denied: map[string][]int64{}, how: map[string][]denial{}, now: startMs}
	w.jrng, w.prng = rand.New(rand.NewPCG(cfg.JitterSeed, 0x7177e4)), rand.New(rand.NewPCG(cfg.JitterSeed, 0x9146))
	w.drng = rand.New(rand.NewPCG(cfg.JitterSeed, 0xde3a4d))
	w.pings = make([][]pingRing, cfg.Regions)
	for r := range w.pings {
		w.pings[r] = make([]pingRing, cfg.Regions)
		for j := range w.pings[r] {
			p := &w.pings[r][j]
			for range rttSamples { // measured before the start
				p.rtt[p.n%rttSamples] = 2*cfg.Delay.Milliseconds() + jitterMs(w.prng, cfg.Jitter) + jitterMs(w.prng, cfg.Jitter)
				p.n++
			}
			p.next = startMs + int64(r*131+j*37)%2000
		}
	}
	for i := range cfg.Regions {
		n := &node{name: fmt.Sprintf("r%02d", i), idx: i, dirty: map[region.BucketRef]region.Total{}, heard: make([]int64, cfg.Regions), back: make([]int64, cfg.Regions),
			own: map[region.BucketRef]region.Total{}, resend: map[int]bool{}, heardRefs: map[region.BucketRef]bool{}, unheard: map[int][]string{}, unheardAt: map[int]int64{},
			touched: map[region.BucketRef]bool{}}
		n.store = newStore(n.name)
		for range max(cfg.Nodes, 1) {
			w.addNode(n)
		}
		for j := range n.heard {
			n.heard[j] = startMs // all alive at the start (joined earlier)
		}
		w.regions = append(w.regions, n)
		// Flush ticks at a deterministic phase per region, and
		// heartbeats on the first tick after a phase of their own.
		first := startMs + int64(i*7)%cfg.Flush.Milliseconds()
		n.beatAt = first + int64(i*37)%w.heartbeat().Milliseconds()
		w.push(&event{at: first, kind: 1, to: i})
	}
	return w
}

func (w *world) push(e *event) {
	w.seq++
	e.seq = w.seq
	heap.Push(&w.q, e)
}

// request schedules a hit for key in region r at atMs, on the region's
// nodes in turn.
func (w *world) request(r int, atMs int64, key string) { w.enqueue(r, atMs, key, false) }

// requestBurst is request for a hit that is part of a burst.
func (w *world) requestBurst(r int, atMs int64, key string) { w.enqueue(r, atMs, key, true) }

func (w *world) enqueue(r int, atMs int64, key string, burst bool) {
	n := w.regions[r]
	w.push(&event{at: atMs, kind: 0, to: r, node: n.next, key: key, hits: 1, burst: burst})
	n.next = (n.next + 1) % len(n.guards)
}

// run processes events until untilMs.
func (w *world) run(untilMs int64) {
	for w.q.Len() > 0 && w.q[0].at <= untilMs {
		e := heap.Pop(&w.q).(*event)
		w.now = e.at
		switch e.kind {
		case 0:
			w.decide(e)
		case 1:
			w.flush(e.to)
			w.push(&event{at: e.at + w.cfg.Flush.Milliseconds(), kind: 1, to: e.to})
		case 2:
			n := w.regions[e.to]
			if e.at-n.heard[e.from] > w.cfg.Suspicion.Milliseconds() {
				n.resend[e.from] = true // it was silent: send it the open buckets again
				n.back[e.from] = e.at
			}
			if n.resend[e.from] && n.back[e.from] == e.at {
				w.askAgain(e.to, e.from)
			}
			n.heard[e.from] = e.at
			if len(e.unheard) > 0 {
				// A KindUnheard frame: the note holds for unheardTTL.
				n.unheard[e.from], n.unheardAt[e.from] = e.unheard, e.at
			}
			if len(e.tot) > 0 {
				_ = n.store.Merge(context.Background(), e.tot)
				w.mergeApart(e.to, e.tot)
				w.heardOf(e.to, e.tot)
			}
			if len(e.relay) > 0 {
				// Only of the regions this one does not hear (gossip's
				// mergeRemote).
				rel := make([]region.Total, 0, len(e.relay))
				for _, t := range e.relay {
					if k := w.regionIndex(t.Region); k >= 0 && w.now-n.heard[k] > w.cfg.Suspicion.Milliseconds() {
						rel = append(rel, t)
					}
				}
				_ = n.store.Merge(context.Background(), rel)
				w.mergeApart(e.to, rel)
				w.heardOf(e.to, rel)
			}
		default:
			w.restartEvent(e)
		}
	}
}

// view is what region r's gossip node would report at now, as its node 0
// counts the regions' nodes.
func (w *world) view(r int) *guard.View { return w.viewOf(r, 0) }

// viewOf is what node k of region r's gossip node would report at now.
func (w *world) viewOf(r, k int) *guard.View {
	n := w.regions[r]
	v := &guard.View{Region: n.name, Nodes: w.knownNodes(r, k, r)}
	maxDelay := time.Duration(0)
	for j, o := range w.regions {
		if j == r {
			v.Alive = append(v.Alive, o.name)
			continue
		}
		ow := w.oneWayOf(r, j)
		if w.now-n.heard[j] <= w.cfg.Suspicion.Milliseconds() && n.heard[j]-n.back[j] >= guard.RejoinHold(w.cfg.Flush, ow).Milliseconds() {
			v.Alive = append(v.Alive, o.name)
			maxDelay = max(maxDelay, ow)
		} else {
			v.Silent = append(v.Silent, o.name)
		}
	}
	v.Horizon = w.cfg.Flush + maxDelay + w.margin()
	v.Suspicion = w.cfg.Suspicion
	v.Heartbeat = w.heartbeat()
	v.Grown = w.grown()
	v.Losses = n.losses[k]
	// A node on its fallback counts apart (fallback.go): the region's
	// nodes take turns in the stagger.
	for m := range n.life {
		if n.life[m].aliveAt(w.now) {
			v.Apart = v.Apart || n.fb[m] != nil
			if m < k {
				v.NodeRank++
			}
		}
	}
	if from := n.life[k].from; from != math.MinInt64 && v.Nodes > 1 {
		if left := from + w.joinHoldMs() - w.now; left > 0 { // the announced instant: past JoinHold, the delays here being under JoinOneWay
			v.Joining = time.Duration(left) * time.Millisecond
		}
	}
	v.RegionNodes = make(map[string]int, len(v.Alive))
	for j, o := range w.regions {
		if slices.Contains(v.Alive, o.name) {
			v.RegionNodes[o.name] = w.knownNodes(r, k, j)
		}
	}
	v.Ages = make(map[string]time.Duration, len(w.regions))
	for j, o := range w.regions {
		if j != r {
			v.Ages[o.name] = time.Duration(w.now-n.heard[j]) * time.Millisecond
		}
		if at, ok := n.unheardAt[j]; ok && len(n.unheard[j]) > 0 && w.now-at <= unheardTTL.Milliseconds() {
			if v.Unheard == nil {
				v.Unheard = map[string][]string{}
			}
			v.Unheard[o.name] = n.unheard[j]
		}
	}
	return v
}

// unheardTTL is how long a region's report of the regions it does not
// hear holds, as gossip.Node.GuardView keeps it at rlnode's default
// heartbeat (--gossip-heartbeat, 100 ms).
var unheardTTL = guard.UnheardHold(gossip.DefaultHeartbeatInterval)

func (w *world) decide(e *event) {
	n := w.regions[e.to]
	w.offered++
	now := time.UnixMilli(w.now)
	l := w.cfg.Limit
	var v *guard.View
	var g *guard.Guard
	sl := l
	nk := w.pick(e.to, e.node%len(n.guards))
	if w.cfg.Guard {
		v = w.viewOf(e.to, nk)
		if rp := n.repairs[nk]; n.hold[nk] > w.now && rp != nil && rp.holding() {
			v.Restoring = time.Duration(n.hold[nk]-w.now) * time.Millisecond
		}
		g = n.guards[nk]
		if g.NeedsRead(now, e.key, l, v) {
			w.reads++
			peek := make([]region.Result, 1)
			_ = n.store.Check(context.Background(), []region.Request{{Key: e.key, Limit: l, Hits: e.hits, Now: now, Peek: true}}, peek)
			g.Learn(now, e.key, l, v, &peek[0])
		}
		r, lim, _ := g.AdmitReason(now, e.key, l, e.hits, v)
		if r != guard.Admitted {
			w.guardNo++
			w.deny(e, causeOf[r])
			return
		}
		sl.Limit = lim
	}
	req := []region.Request{{Key: e.key, Limit: sl, Hits: e.hits, Now: now}}
	res := make([]region.Result, 1)
	if fb := n.fb[nk]; fb != nil {
		_ = fb.Check(context.Background(), req, res)
	} else if n.lost[nk] {
		// The store's scripts are gone with its counts: the node reads
		// the epoch before the decision runs again, and holds it.
		w.requestRepair(e.to, nk)
		res[0] = region.Result{Decision: window.Decision{Limit: l.Limit, RetryAfter: time.Millisecond}, Held: true}
	} else {
		_ = n.store.Check(context.Background(), req, res)
		w.mirror(e.to, nk, req[0], res[0])
	}
	by := byStore
	if w.cfg.Guard && g.Done(now, e.key, l, e.hits, v, &res[0]) > 0 {
		by = byCut
	}
	if res[0].Held {
		by = byHeld
	}
	if !res[0].Allowed {
		w.deny(e, by)
		return
	}
	w.admitted[e.key] = append(w.admitted[e.key], w.now)
	w.by[e.key] = append(w.by[e.key], e.to)
	k := region.BucketRef{Key: e.key, Window: l.Window, Bucket: res[0].Bucket}
	if n.fb[nk] != nil {
		// Counted under the node's replica, sent at the next flush.
		t := region.Total{Key: e.key, Window: l.Window, Bucket: k.Bucket, Region: replica(n, nk), Count: res[0].Local, Trail: res[0].LocalTrail}
		n.fbDirty[nk][k] = t
		return
	}
	t := region.Total{Key: e.key, Window: l.Window, Bucket: k.Bucket, Region: n.name, Count: res[0].Local, Trail: res[0].LocalTrail}
	// Gossip max-merges a node's dirty totals until they are sent: a
	// count lower than the one waiting (its store lost its counts since)
	// does not replace it.
	if d, ok := n.dirty[k]; !ok || d.Count < t.Count {
		n.dirty[k] = t
	}
	n.own[k] = t
	n.sent[nk][k] = t
	delete(n.sent[nk], region.BucketRef{Key: e.key, Window: l.Window, Bucket: k.Bucket - 2})
	if w.cfg.Reconcile && !n.touched[k] {
		n.touched[k] = true
		_, end := window.BucketSpan(k.Window, k.Bucket)
		w.push(&event{at: end + w.cfg.Flush.Milliseconds(), kind: evReconcile, to: e.to, key: e.key, bucket: k.Bucket})
	}
	delete(n.own, region.BucketRef{Key: e.key, Window: l.Window, Bucket: k.Bucket - 2})
}

// deny records that e's request was denied, and by what (see
// world.denied).
func (w *world) deny(e *event, by cause) {
	w.denied[e.key] = append(w.denied[e.key], w.now)
	w.how[e.key] = append(w.how[e.key], denial{burst: e.burst, by: by})
}

// denial is how a request was denied: whether it was part of a burst,
// and what denied it.
type denial struct {
	burst bool
	by    cause
}

// cause is what denied a request, for the false denials' breakdown: the
// store, or the guard before it, by the guard's reason.
type cause uint8

const (
	byStore     cause = iota // the store, against the full limit (or one lowered by a silent region's charge)
	byShare                  // the guard: this node's quota of the horizon was spent
	byStagger                // the guard: not this node's turn in the stagger
	byCharged                // the guard: the silent regions' charge left no room
	byRestoring              // the guard: the store was restoring lost counts
	byCut                    // the store, against a limit the guard lowered, which the full limit would have admitted
	byHeld                   // the store held the decision: it had just lost its counts
	byJoining                // the guard: this node joined too recently for the others to know it
	nCauses
)

// causeNames are the causes' column names.
var causeNames = [nCauses]string{"store", "share", "stagger", "charged", "restoring", "cut", "held", "joining"}

// causeOf is the cause of a guard's refusal, by its reason.
var causeOf = [...]cause{guard.Share: byShare, guard.Stagger: byStagger, guard.Charged: byCharged, guard.Restoring: byRestoring, guard.Cut: byCut, guard.Joining: byJoining}

func (w *world) flush(r int) {
	n := w.regions[r]
	var tot []region.Total
	for _, t := range n.dirty {
		tot = append(tot, t)
	}
	clear(n.dirty)
	sort.Slice(tot, func(i, j int) bool { return tot[i].Key < tot[j].Key })
	if len(tot) > 0 {
		w.mergeApart(r, tot) // the region's nodes on fallbacks learn its others' admissions
	}
	// The replicas' totals of its nodes on fallbacks: to its store, to its
	// other fallbacks, and on to every region.
	var rep []region.Total
	for k, d := range n.fbDirty {
		for ref, t := range d {
			rep = append(rep, t)
			if n.ownRep == nil {
				n.ownRep = map[repRef]region.Total{}
			}
			n.ownRep[repRef{ref, t.Region}] = t
			delete(n.ownRep, repRef{region.BucketRef{Key: ref.Key, Window: ref.Window, Bucket: ref.Bucket - 2}, t.Region})
		}
		clear(n.fbDirty[k])
	}
	if len(rep) > 0 {
		slices.SortFunc(rep, func(a, b region.Total) int {
			return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Region, b.Region), cmp.Compare(a.Bucket, b.Bucket))
		})
		_ = n.store.Merge(context.Background(), rep)
		w.mergeApart(r, rep)
		tot = append(tot, rep...)
	}
	if w.cfg.Guard {
		w.sendDemand(r)
	}
	beat := w.now >= n.beatAt
	for n.beatAt <= w.now {
		n.beatAt += w.heartbeat().Milliseconds()
	}
	var unheard []string
	if w.cfg.Guard && beat {
		unheard = w.view(r).Silent
	}
	for j := range w.regions {
		if j == r || (w.cfg.Cut != nil && w.cfg.Cut(r, j, w.now)) {
			continue
		}
		if len(tot) == 0 && !n.resend[j] && !beat {
			continue // nothing to send, and no heartbeat due
		}
		send, relay := tot, []region.Total(nil)
		if n.resend[j] {
			delete(n.resend, j)
			send = append([]region.Total(nil), tot...)
			for _, t := range n.own {
				send = append(send, t)
			}
			for _, t := range n.ownRep {
				send = append(send, t)
			}
			relay = w.relay(r, j)
		}
		w.push(&event{at: w.now + w.delayMs(), kind: 2, to: j, from: r, tot: send, relay: relay, unheard: unheard})
	}
}

// sendDemand sends what region r's nodes were refused since their last
// flush to every node of the pool, as gossip does with each flush: to
// the region's other nodes at once, to the other regions after the
// one-way delay, unless their link is cut.
func (w *world) sendDemand(r int) {
	n := w.regions[r]
	now := time.UnixMilli(w.now)
	for k, g := range n.guards {
		ds := g.DirtyDemand(now)
		if len(ds) == 0 || !w.alive(r, k) {
			continue
		}
		for j := range w.regions {
			at := w.now + w.cfg.Delay.Milliseconds() + jitterMs(w.drng, w.cfg.Jitter)
			if j == r {
				at = w.now
			} else if w.cfg.Cut != nil && w.cfg.Cut(r, j, w.now) {
				continue
			}
			w.push(&event{at: at, kind: evDemand, to: j, from: r, fromNode: k, dem: ds})
		}
	}
}

// delayMs is a message's one-way delay: config.Delay, and its jitter.
func (w *world) delayMs() int64 { return w.cfg.Delay.Milliseconds() + jitterMs(w.jrng, w.cfg.Jitter) }

// jitterMs draws a message's jitter of j: j times an exponential draw, at
// most 5 j; 0 when j is.
func jitterMs(rng *rand.Rand, j time.Duration) int64 {
	if j <= 0 {
		return 0
	}
	return int64(min(rng.ExpFloat64(), 5) * float64(j.Milliseconds()))
}

// margin is what the horizon adds for jitter (config.Margin).
func (w *world) margin() time.Duration { return max(w.cfg.Margin, 0) }

// pingRing is a region's last rttSamples round trips to another, as
// gossip keeps them, and when it measures the next (ms).
type pingRing struct {
	rtt  [rttSamples]int64
	n    int
	next int64
}

// rttSamples is how many round trips the horizon is taken from, as in
// gossip.
const rttSamples = 16

// oneWayOf is the one-way delay region r's horizon allows for region j:
// config.Delay without jitter; with it, half the largest of r's last
// rttSamples round trips to j, which memberlist's probes measure, one
// random member every probe interval (2 s): for one region's, every
// 2 s x (members - 1) / (its nodes) on average. A probe across a cut
// measures nothing. The world starts with every region measured.
func (w *world) oneWayOf(r, j int) time.Duration {
	if w.cfg.Jitter <= 0 {
		return w.cfg.Delay
	}
	nodes := max(w.cfg.Nodes, 1)
	every := 2000 * int64(w.cfg.Regions*nodes-1) / int64(nodes)
	p := &w.pings[r][j]
	for p.next <= w.now {
		if !w.cut(r, j) {
			p.rtt[p.n%rttSamples] = 2*w.cfg.Delay.Milliseconds() + jitterMs(w.prng, w.cfg.Jitter) + jitterMs(w.prng, w.cfg.Jitter)
			p.n++
		}
		p.next += every
	}
	return time.Duration(slices.Max(p.rtt[:])/2) * time.Millisecond
}

// heartbeat is the interval of the regions' heartbeats (config.Heartbeat).
func (w *world) heartbeat() time.Duration {
	return cmp.Or(w.cfg.Heartbeat, gossip.DefaultHeartbeatInterval)
}

// heardOf records the buckets of tot, merged by region r, for relay.
func (w *world) heardOf(r int, tot []region.Total) {
	for _, t := range tot {
		w.regions[r].heardRefs[region.BucketRef{Key: t.Key, Window: t.Window, Bucket: t.Bucket}] = true
	}
}

// regionIndex is the index of the region a total's region name (a region
// or its replica) counts for, or -1.
func (w *world) regionIndex(name string) int {
	base, _, _ := strings.Cut(name, "~")
	return slices.IndexFunc(w.regions, func(n *node) bool { return n.name == base })
}

// relay is what region r's store holds of the regions other than r and
// j in the buckets it heard of that an estimate still reads, sent with
// r's own totals to j, heard from again after a silence: j may have been
// cut from a region that r heard, and would charge it as silent only its
// share, not what it admitted meanwhile.
func (w *world) relay(r, j int) []region.Total {
	n := w.regions[r]
	var refs []region.BucketRef
	for ref := range n.heardRefs {
		if _, end := window.BucketSpan(ref.Window, ref.Bucket); end+ref.Window.Milliseconds() <= w.now {
			delete(n.heardRefs, ref)
			continue
		}
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(a, b region.BucketRef) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Window, b.Window), cmp.Compare(a.Bucket, b.Bucket))
	})
	vs, _ := n.store.Vectors(context.Background(), refs)
	var out []region.Total
	for _, v := range vs {
		for _, t := range v {
			if base, _, _ := strings.Cut(t.Region, "~"); t.Count > 0 && base != n.name && base != w.regions[j].name {
				out = append(out, t)
			}
		}
	}
	return out
}

// stats are a run's accuracy figures: the exact count admitted in the
// trailing window (t-W, t] at each admission t, over the limit.
type stats struct {
	Max       float64 // over every key and admission
	SteadyMin float64 // over admissions from steadyFrom on (NaN when none)
	// Median and P999 are over the admissions from steadyFrom on (NaN
	// when none).
	Median, P999 float64
	Admitted     int
	Offered      int
	GuardDeny    int
	GuardReads   int // store reads the guard asked for before deciding
	// PerRegion is the admissions from steadyFrom on, per region.
	PerRegion []int
}

// Spread is the largest per-region admission count from the steady
// state on over the smallest, less 1 (0: even; NaN when a region admitted
// nothing).
func (st stats) Spread() float64 {
	if len(st.PerRegion) == 0 {
		return math.NaN()
	}
	lo, hi := slices.Min(st.PerRegion), slices.Max(st.PerRegion)
	if lo == 0 {
		return math.NaN()
	}
	return float64(hi)/float64(lo) - 1
}

func (w *world) stats(steadyFromMs int64) stats {
	st := stats{SteadyMin: math.NaN(), Median: math.NaN(), P999: math.NaN(), Offered: w.offered, GuardDeny: w.guardNo, GuardReads: w.reads,
		PerRegion: make([]int, w.cfg.Regions)}
	wm := w.cfg.Limit.WindowMs()
	lim := float64(w.cfg.Limit.Limit)
	var steady []float64
	for key, ts := range w.admitted {
		st.Admitted += len(ts)
		by := w.by[key]
		lo := 0
		for i, t := range ts {
			for ts[lo] <= t-wm {
				lo++
			}
			// Admissions at the same instant as t count in full.
			hi := i
			for hi+1 < len(ts) && ts[hi+1] == t {
				hi++
			}
			r := float64(hi-lo+1) / lim
			st.Max = max(st.Max, r)
			if t >= steadyFromMs {
				steady = append(steady, r)
				st.PerRegion[by[i]]++
			}
		}
	}
	if len(steady) > 0 {
		slices.Sort(steady)
		st.SteadyMin = steady[0]
		st.Median = steady[len(steady)/2]
		st.P999 = steady[min(len(steady)*999/1000, len(steady)-1)]
	}
	return st
}

// epoch is the simulation's start: a whole number of every window used.
const epoch = int64(1_700_000_000_000) / 86_400_000 * 86_400_000

// scenario is one row of the table.
type scenario struct {
	Name    string
	Regions int
	Delay   time.Duration
	Window  time.Duration
	Limit   uint64
	Strict  bool // the strict counter instead of the default
	Nodes   int  // nodes per region (0: 1)
	// Margin is the guard's margin (config.Margin).
	Margin time.Duration
	// Algorithm is the counter (0: the default sliding window).
	Algorithm window.Algorithm
	run       func(w *world) (steadyFromMs int64)
	Keys      int
}

// burst releases limit requests at the same instant in every region, at a
// phase of the bucket, then nothing.
func burst(w *world) int64 {
	t := epoch + w.cfg.Limit.WindowMs()/3
	for i := range w.cfg.Limit.Limit {
		for r := range w.cfg.Regions {
			w.request(r, t+int64(i)/50, "k") // 100 in 2 ms per region
		}
	}
	w.run(t + 3*w.cfg.Limit.WindowMs())
	return math.MaxInt64
}

// steady offers rate x the limit's rate from the regions in from, evenly
// spaced, for n windows; the steady state starts after 2 windows.
func steady(rate float64, n int, from ...int) func(w *world) int64 {
	return steadyLead(rate, n, 0, from...)
}

// steadyLead is steady with every region but the first of from starting
// lead later, as clients in different regions seldom start at once.
func steadyLead(rate float64, n int, lead time.Duration, from ...int) func(w *world) int64 {
	return func(w *world) int64 {
		wm := w.cfg.Limit.WindowMs()
		gap := float64(wm) / (rate * float64(w.cfg.Limit.Limit))
		start := epoch + wm/7
		end := start + int64(n)*wm
		for i, r := range from {
			off := float64(r) * gap / float64(len(from))
			if i > 0 {
				off += float64(lead.Milliseconds())
			}
			w.offer(r, float64(start)+off, gap*float64(len(from)), end)
		}
		w.run(end + w.cfg.Limit.WindowMs())
		return start + 2*wm
	}
}

// busyBeside is steadyLead's load for 12 windows with the first region
// offered 10x the limit alone and the second and third rate times the
// limit each, evenly, from lead after the first.
func busyBeside(rate float64, lead time.Duration) func(w *world) int64 {
	return func(w *world) int64 {
		wm := w.cfg.Limit.WindowMs()
		start := epoch + wm/7
		end := start + 12*wm
		w.offer(0, float64(start), float64(wm)/(10*float64(w.cfg.Limit.Limit)), end)
		gap := float64(wm) / (rate * float64(w.cfg.Limit.Limit))
		for _, r := range []int{1, 2} {
			w.offer(r, float64(start+lead.Milliseconds())+float64(r)*gap/2, gap, end)
		}
		w.run(end + wm)
		return start + 2*wm
	}
}

// offer queues a request for key "k" in region r at first (ms) and every
// every ms after it, until end.
func (w *world) offer(r int, first, every float64, end int64) {
	for t := first; int64(t) < end; t += every {
		w.request(r, int64(t), "k")
	}
}

// evenScenario is three regions offered 10x a limit per 10 s evenly, for 12
// windows.
func evenScenario(delay time.Duration, limit uint64) scenario {
	return scenario{Name: "even", Regions: 3, Delay: delay, Window: 10 * time.Second, Limit: limit, run: steady(10, 12, 0, 1, 2)}
}

// perWindow returns, for each of the first n windows from the load's
// start (steady's), what each region admitted of key k in it.
func (w *world) perWindow(k string, n int) [][]int {
	wm := w.cfg.Limit.WindowMs()
	start := epoch + wm/7
	out := make([][]int, n)
	for i := range out {
		out[i] = make([]int, w.cfg.Regions)
	}
	for i, t := range w.admitted[k] {
		if j := (t - start) / wm; j >= 0 && j < int64(n) {
			out[j][w.by[k][i]]++
		}
	}
	return out
}

// partition offers 10x from every region for 6 windows and cuts region 0
// from the others from window 2 to window 4.
func partition(w *world) int64 {
	wm := w.cfg.Limit.WindowMs()
	start := epoch + wm/7
	from, to := start+2*wm, start+4*wm
	w.cfg.Cut = func(a, b int, now int64) bool {
		return (a == 0) != (b == 0) && now >= from && now < to
	}
	all := make([]int, w.cfg.Regions)
	for i := range all {
		all[i] = i
	}
	return steady(10, 6, all...)(w)
}

// zipf offers Poisson traffic over keys with Zipf popularity (s = 1.1) from
// every region: n requests over 4 windows, each key's limit the same.
func zipf(n, keyCount int) func(w *world) int64 {
	return func(w *world) int64 {
		rng := rand.New(rand.NewPCG(7, 11))
		keys := uint64(keyCount)
		z := rand.NewZipf(rng, 1.1, 1, keys-1)
		wm := w.cfg.Limit.WindowMs()
		span := 4 * wm
		for i := range n {
			t := epoch + int64(i)*span/int64(n)
			w.request(rng.IntN(w.cfg.Regions), t, fmt.Sprintf("k%d", z.Uint64()))
		}
		w.run(epoch + span + wm)
		return math.MaxInt64
	}
}

// result is one row: a scenario run with and without the guard.
type result struct {
	scenario
	Off, On stats
}

func runScenario(sc scenario) result {
	return result{scenario: sc, Off: runGuard(sc, false), On: runGuard(sc, true)}
}

// runGuard runs sc once, with the guard or without it.
func runGuard(sc scenario, guard bool) stats {
	_, st := runWorld(sc, guard)
	return st
}

// runWorld is runGuard, with the world it ran.
func runWorld(sc scenario, guard bool) (*world, stats) {
	cfg := config{Regions: sc.Regions, Nodes: sc.Nodes, Delay: sc.Delay, Flush: 20 * time.Millisecond,
		Suspicion: 500 * time.Millisecond, Guard: guard, Limit: window.Limit{Limit: sc.Limit, Window: sc.Window, Strict: sc.Strict, Algorithm: sc.Algorithm},
		Margin: sc.Margin}
	w := newWorld(cfg, epoch)
	from := sc.run(w)
	return w, w.stats(from)
}
