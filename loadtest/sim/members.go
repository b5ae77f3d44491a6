package main

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
)

// Nodes joining and leaving a region, as memberlist tells the pool of them
// (internal/gossip's GuardView counts a region's alive members):
//
//   - A node that joins takes requests from its join on (a load balancer
//     routes to it once it is ready), and knows every member at once (the
//     join's push-pull carries the whole member list). Its guard refuses
//     them for guard.JoinHold (guard.View.Joining), as rlnode's does.
//   - The others learn of a join, or of a graceful leave, one gossip
//     interval (memberLagMs) later in its region, and that plus the
//     one-way delay in the others; of a crash, a suspicion timeout later
//     still. Until then they count the region's nodes as before, and
//     split its quota so. A joined node they count only from the instant
//     it announced (joinHoldMs after its join), all at once.
//   - A node that leaves or crashes takes no more requests. Its hits are
//     in its region's store; the sim's gossip is per region, so nothing
//     it admitted is lost unsent (a crashed node's unsent totals are, in
//     the real pool, until its region reconciles the bucket).
//
// A region keeps at least one node and has at most maxNodes.

// memberKind is what a memberChange does.
type memberKind uint8

const (
	memberJoin  memberKind = iota // a node joins
	memberLeave                   // a node leaves gracefully
	memberCrash                   // a node stops without a word
)

func (k memberKind) String() string { return [...]string{"join", "leave", "crash"}[k] }

// memberChange is a node of region Region joining or leaving AtMs from the
// run's start.
type memberChange struct {
	Region int
	AtMs   int64
	Kind   memberKind
}

func (m memberChange) String() string {
	return fmt.Sprintf("%v in %d at %d ms", m.Kind, m.Region, m.AtMs)
}

// memberLagMs is how long a region's members take to learn of a member
// joining or leaving: memberlist's gossip interval (rlnode's default,
// 200 ms).
const memberLagMs = 200

// maxNodes bounds a region's nodes.
const maxNodes = 4

// genMembers draws s's membership changes from a stream of their own
// (after the rest, so that every other part of a seed's schedule is the
// same as before they were drawn): one schedule in four has one or two.
func genMembers(s *schedule) {
	rm := rand.New(rand.NewPCG(s.Seed, 0x3e3be5))
	if rm.IntN(4) != 0 {
		return
	}
	span := int64(s.Windows) * s.Window.Milliseconds()
	for range 1 + rm.IntN(2) {
		m := memberChange{Region: rm.IntN(s.Regions), AtMs: rm.Int64N(span)}
		switch rm.IntN(4) { // half joins, a quarter each leaves and crashes
		case 2:
			m.Kind = memberLeave
		case 3:
			m.Kind = memberCrash
		}
		s.Members = append(s.Members, m)
	}
	// In time order, and each change possible: no region below one node
	// or above maxNodes.
	slices.SortStableFunc(s.Members, func(a, b memberChange) int { return cmp.Compare(a.AtMs, b.AtMs) })
	nodes := make([]int, s.Regions)
	for i := range nodes {
		nodes[i] = s.Nodes
	}
	for i, m := range s.Members {
		switch {
		case m.Kind != memberJoin && nodes[m.Region] <= 1:
			s.Members[i].Kind = memberJoin
		case m.Kind == memberJoin && nodes[m.Region] >= maxNodes:
			s.Members[i].Kind = memberLeave
		}
		if s.Members[i].Kind == memberJoin {
			nodes[m.Region]++
		} else {
			nodes[m.Region]--
		}
	}
}

// withoutMembers returns s without its membership changes.
func (s schedule) withoutMembers() schedule {
	s.Members = nil
	return s
}

// life is when a node is a member: from its join (math.MinInt64 for one
// there from the start) until it leaves (math.MaxInt64 while it has not),
// and whether it crashed.
type life struct {
	from, to int64
	crashed  bool
}

func (l life) aliveAt(t int64) bool { return t >= l.from && t < l.to }

// members applies changes (at startMs plus their AtMs) to w's regions: a
// join adds a node, a leave or a crash ends the newest alive one.
func (w *world) members(changes []memberChange, startMs int64) {
	for _, m := range changes {
		n := w.regions[m.Region]
		n.dynamic = true
		at := startMs + m.AtMs
		if m.Kind == memberJoin {
			w.addNode(n)
			n.life[len(n.life)-1].from = at
			continue
		}
		for k := len(n.life) - 1; k >= 0; k-- {
			if n.life[k].aliveAt(at) {
				n.life[k].to, n.life[k].crashed = at, m.Kind == memberCrash
				break
			}
		}
	}
}

// addNode adds a node to n, a member from the start.
func (w *world) addNode(n *node) {
	n.guards = append(n.guards, guard.New(guard.Config{}))
	n.sent = append(n.sent, map[region.BucketRef]region.Total{})
	n.repairs = append(n.repairs, nil)
	n.lost = append(n.lost, false)
	n.losses = append(n.losses, 0)
	n.hold = append(n.hold, 0)
	n.life = append(n.life, life{from: math.MinInt64, to: math.MaxInt64})
	n.fb = append(n.fb, nil)
	n.mirrors = append(n.mirrors, newStore(replica(n, len(n.fb)-1)))
	n.fbDirty = append(n.fbDirty, map[region.BucketRef]region.Total{})
}

// alive reports whether node k of region r is a member now.
func (w *world) alive(r, k int) bool { return w.regions[r].life[k].aliveAt(w.now) }

// pick returns the node of region r that decides a request assigned to
// node k: k itself in a region whose members never change, else its alive
// nodes in turn.
func (w *world) pick(r, k int) int {
	n := w.regions[r]
	if !n.dynamic {
		return k
	}
	var alive []int
	for i := range n.life {
		if n.life[i].aliveAt(w.now) {
			alive = append(alive, i)
		}
	}
	n.turn++
	return alive[n.turn%len(alive)]
}

// knownNodes is how many nodes region j has as node k of region r counts
// them now (see the top of this file).
func (w *world) knownNodes(r, k, j int) int {
	n := w.regions[j]
	if !n.dynamic {
		return len(n.guards)
	}
	lag := int64(memberLagMs)
	if j != r {
		lag += w.cfg.Delay.Milliseconds()
	}
	self := w.regions[r].life[k]
	c := 0
	for m, l := range n.life {
		if j == r && m == k {
			c++ // itself
			continue
		}
		joined := l.from <= self.from || w.now >= l.from+w.joinHoldMs() // longer than lag
		gone := l.to != math.MaxInt64 && (l.to <= self.from || w.now >= l.to+lag+w.lagOfLeave(l))
		if joined && !gone {
			c++
		}
	}
	return max(c, 1)
}

// lagOfLeave is how much later a crash is learned of than a graceful
// leave: the suspicion timeout.
func (w *world) lagOfLeave(l life) int64 {
	if l.crashed {
		return w.cfg.Suspicion.Milliseconds()
	}
	return 0
}

// grown is when the pool last grew by a joined node, counted by every
// member from its join plus joinHoldMs (guard.View.Grown; zero: never).
func (w *world) grown() time.Time {
	var at int64
	for _, n := range w.regions {
		for _, l := range n.life {
			if l.from != math.MinInt64 && l.aliveAt(w.now) {
				if c := l.from + w.joinHoldMs(); c <= w.now && c > at {
					at = c
				}
			}
		}
	}
	if at == 0 {
		return time.Time{}
	}
	return time.UnixMilli(at)
}

// joinHoldMs is how long after a node joins its members start counting
// it, all at the same instant, as it announces in its metadata
// (guard.CountFromHold); it holds its decisions until then.
func (w *world) joinHoldMs() int64 {
	return guard.CountFromHold(memberLagMs*time.Millisecond, w.cfg.Flush).Milliseconds()
}
