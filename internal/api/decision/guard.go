package decision

import (
	"context"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// guarded reports whether the burst guard applies to r: a consuming
// request of a counter algorithm with global scope, the ones that
// replicate across regions.
func (d *Decider) guarded(r *Request) bool {
	return d.guard != nil && !r.Store.Peek && r.Store.Limit.Algorithm.Counted() && r.Scope == rules.ScopeGlobal
}

// guardRead reads, with one Peek of the store, the counts of the
// guarded requests' keys that the guard has no store result for at this
// node (see guard.Guard.NeedsRead), and tells the guard: without them its
// first probe of such a key would be decided by an equal share of the
// headroom, while the regions that know the key's weights give this
// region only its floor share. A failed read is left to the decision
// itself, which fails the same way or decides on an equal share.
func (d *Decider) guardRead(ctx context.Context, reqs []Request) {
	var idx []int
	for i := range reqs {
		r := &reqs[i]
		if d.guarded(r) && d.guard.NeedsRead(r.Store.Now, r.Store.Key, r.Store.Limit) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	peeks, res := make([]region.Request, len(idx)), make([]region.Result, len(idx))
	for j, i := range idx {
		peeks[j] = reqs[i].Store
		peeks[j].Peek = true
	}
	if err := d.cfg.Store.Check(ctx, peeks, res); err != nil {
		return
	}
	for j, i := range idx {
		d.guard.Learn(reqs[i].Store.Now, reqs[i].Store.Key, reqs[i].Store.Limit, &res[j])
	}
}

// guardBefore asks the guard about every guarded request: a request it
// refuses gets its outcome in out and skip[i] set; one it lets through is
// decided against the limit the guard returns (less a minority's charge
// for silent regions). It returns nil when no request is guarded.
func (d *Decider) guardBefore(reqs []Request, sreqs []region.Request, out []Outcome) (tickets []guard.Ticket, skip []bool) {
	for i := range reqs {
		r := &reqs[i]
		if !d.guarded(r) {
			continue
		}
		if tickets == nil {
			tickets, skip = make([]guard.Ticket, len(reqs)), make([]bool, len(reqs))
		}
		t, ok, retry := d.guard.Admit(r.Store.Now, r.Store.Key, r.Store.Limit, r.Store.Hits)
		if !ok {
			skip[i] = true
			out[i] = d.guardDenial(r, retry)
			out[i].Remaining = t.Room // what the node's share holds still
			continue
		}
		tickets[i] = t
		sreqs[i].Limit.Limit = t.StoreLimit
	}
	return tickets, skip
}

// guardDenial records r as denied by the guard, retryable after retry.
func (d *Decider) guardDenial(r *Request, retry time.Duration) Outcome {
	return d.record(r, region.Result{Decision: window.Decision{
		Limit: r.Store.Limit.Limit, RetryAfter: retry, ResetAfter: max(retry, time.Millisecond),
	}}, byGuard)
}

// decideGuarded is Decide's store step when the guard is on: the store
// decides the requests the guard let through, in one call, the guard is
// told each answer, and every answer reports the full limit (a minority's
// charge, or a probe's share, lowers what it admits, not the limit callers
// see). A store's denial that the guard claims (a probe decided against a
// limit lowered to this region's share, which the full limit would have
// admitted) is answered as a guard denial.
func (d *Decider) decideGuarded(ctx context.Context, reqs []Request, sreqs []region.Request, res []region.Result, out []Outcome, tickets []guard.Ticket, skip []bool) error {
	idx := make([]int, 0, len(reqs))
	for i := range reqs {
		if !skip[i] {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	if len(idx) < len(reqs) {
		sub := make([]region.Request, len(idx))
		for j, i := range idx {
			sub[j] = sreqs[i]
		}
		sreqs, res = sub, res[:len(idx)]
	}
	if err := d.cfg.Store.Check(ctx, sreqs, res); err != nil {
		for _, i := range idx {
			if d.guarded(&reqs[i]) {
				r := region.Result{} // nothing admitted: release the reservation
				d.guard.Done(&tickets[i], &r)
			}
		}
		decided := make([]Request, len(idx)) // the guard's denials are counted already
		for j, i := range idx {
			decided[j] = reqs[i]
		}
		return d.storeFailed(ctx, decided, err)
	}
	for j, i := range idx {
		r := res[j]
		if d.guarded(&reqs[i]) {
			if retry := d.guard.Done(&tickets[i], &r); retry > 0 && !r.Allowed {
				out[i] = d.guardDenial(&reqs[i], retry)
				continue
			}
			r.Limit = reqs[i].Store.Limit.Limit
		}
		out[i] = d.record(&reqs[i], r, byStore)
	}
	return nil
}

// NodeShare returns this node's share of r's headroom, as the burst
// guard divides it for r's key among the regions and their nodes (1
// without a guard, or for a request it does not guard): the part of a
// limit that this node's quota leases size their demand against.
func (d *Decider) NodeShare(r Request) float64 {
	if !d.guarded(&r) {
		return 1
	}
	return d.guard.Share(r.Store.Now, r.Store.Key, r.Store.Limit)
}

// Refused tells the burst guard of hits of r's key that quota leases'
// clients refused (their reports' denied requests), so that the region
// weighs by its demand in the guard's shares as it does by its own
// refusals.
func (d *Decider) Refused(r Request, hits uint64) {
	if d.guarded(&r) {
		d.guard.Refused(r.Store.Now, r.Store.Key, r.Store.Limit, hits)
	}
}
