// Package guard bounds what one region admits for a key before it can know
// what the other regions admitted: the burst guard and the partition share.
//
// A count admitted elsewhere reaches a region one flush interval plus the
// one-way delay later: the horizon H. While other regions are alive, a
// node admits for a key at most its quota of the headroom per horizon:
//
//	headroom = limit - estimate               (the store's global estimate)
//	share    = (w_self + f) / D,   D = sum_alive w_r + R*f,   f = weight(limit) / (R * Floor)
//	q_region = floor(headroom * (B + w_self + f) / D) - floor(headroom * B / D)
//	quota    = q_region / N (rounded down)    per horizon H, per node
//
// where w_r is the [weight] of region r's count and its demand (the hits
// its nodes refused, see [Demand]) in the current and previous buckets
// (the square root, so that regions of equal demand are drawn to equal
// shares), R the alive regions, N this region's alive nodes, and B the
// layout's [phase] times D plus the weights of the alive regions
// named before this one. Every region computes the same shares from the
// same replicated counts and demand, so the regions' quotas sum to the
// headroom (a region's own demand counts once the others can have heard
// it).
//
// What keeps the pool near the limit:
//
//   - What the others may have admitted in the previous horizon, unheard
//     yet, is taken off the headroom (pending), and this region's own
//     fresh admissions are left out of its weight.
//   - An alive region unheard for longer than a heartbeat and a horizon
//     (late: a split nobody has detected yet, say) may take its shares of
//     every horizon's headroom meanwhile: its share of the largest
//     headroom read since it turned late is held out of the quotas and
//     probes until it is heard again.
//   - On the default sliding window, a node admits first in the place of
//     its region's hits that leave the window (its part of them, within
//     reuseAge of their leaving), since the count does not grow by it;
//     every region holds what left of the others' hits within a horizon
//     and reuseAge out of the headroom it shares, since they may have
//     admitted in its place unheard. A region whose part of the count is
//     beyond its part of the regions' demand reuses only some of its own,
//     and holds the rest out of its own quota for as long, so that the
//     shares take it where every region sees it.
//   - The first request of a horizon is a probe, decided against a limit
//     lowered so that the store admits it only within this node's share;
//     a probe that no share can hold, and every hit of a limit smaller
//     than the pool's nodes, is staggered: decided against the limit
//     less its region's rotating base, once per node and slot, so that
//     the pool takes at most the headroom (and, of a limit smaller than
//     the pool, one hit more, which its bound of L + 1 allows).
//   - A region not heard from for the suspicion timeout (or, for a key,
//     for a quarter of its window) is silent and charged its share of the
//     limit, ceil(limit/R), by every side of a split, less what the
//     estimate still holds of it at the decision; and, after the store
//     lost its counts, what the results before the loss held of it, on
//     top, until it is heard again: no repair brings a silent region's
//     counts back.
//   - A crossed view (a cut link: [View.Crossed]) charges every other
//     region so, and each region keeps to its own share. A region quiet
//     for a key counts as silent in that key's view, so a quiet region
//     the other alive regions do not report unheard crosses it too.
//
// These bound the pool to about the limit without faults and to
// (1 + 1/R) x the limit during any split, as measured, not proven: the
// simulator's fault search (loadtest/sim) tries to break them, and
// docs/design.md, "The burst guard", has the formulas' reasons, the
// figures and what does not hold yet.
//
// The guard is pure: time and the pool's [View] are parameters. It keeps a
// small entry per key seen within the last horizon and is safe for
// concurrent use.
package guard
