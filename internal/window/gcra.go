package window

import (
	"math"
	"time"
)

// The token bucket is computed as GCRA (the generic cell rate algorithm): its
// whole state is the theoretical arrival time TAT, the instant (Unix µs) at
// which the bucket would be full again, i.e. tokens in use = TAT - now, as
// time. With W the window in µs and L the limit, a token is worth W/L µs and
// every step is integer arithmetic on values below 2^53 once the two
// parameters below are known (the Redis script gets them precomputed):
//
//	inc = ceil(hits * W / L)       the request's cost, µs  (GCRAIncrement)
//	c   = ceil(W / L)              the cost of one hit, µs
//	tol = min(L*c - W, c - 1)      rounding slack, µs (0 when L divides W)
//	cap = W + tol                  the most TAT - now may reach  (GCRACapacity)
//
//	tat  = max(TAT, now)           (TAT 0: no state, a full bucket)
//	next = tat + inc
//	allow iff next - now <= cap    then TAT = next; denied: TAT unchanged
//
// Without the slack, L single hits would cost L*c µs, up to L-1 µs more than
// W, and a full bucket would not admit L of them (7 per minute would admit
// 6). tol is that excess, kept below the cost of one hit, so the bucket never
// admits a hit that an exact token bucket would not admit tol µs later.
// When L > W (more than one hit per µs), each request costs at least 1 µs.

// GCRAIncrement returns the cost of a request for hits in µs of the token
// bucket: ceil(hits * W_us / limit), exact in 128 bits, saturating at the
// maximum int64. l must be valid.
func (l Limit) GCRAIncrement(hits uint64) int64 {
	inc := MulDivCeil(hits, uint64(l.Window.Microseconds()), l.Limit)
	if inc > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(inc)
}

// GCRACapacity returns the most the theoretical arrival time may run ahead
// of now, in µs: W_us + min(limit*c - W_us, c - 1) with c = ceil(W_us/limit).
// l must be valid.
func (l Limit) GCRACapacity() int64 {
	w := uint64(l.Window.Microseconds())
	return int64(w + l.gcraTol(w))
}

// gcraTol returns min(L*c - W, c - 1) with c = ceil(W/L); L*c < W + L, so
// nothing overflows.
func (l Limit) gcraTol(w uint64) uint64 {
	c := MulDivCeil(1, w, l.Limit)
	return min(l.Limit*c-w, c-1)
}

// DecideGCRA decides a request for hits against a token bucket of limit
// tokens that refill evenly over the window, with a burst of limit, computed
// as GCRA (see GCRAIncrement and GCRACapacity for the formula). tatUs is the
// stored theoretical arrival time in Unix µs, 0 when there is none. It
// returns the decision and the state to store: the new TAT when allowed, tatUs
// unchanged when denied.
//
// Estimate is the tokens in use before the request, so the request is allowed
// iff Estimate + hits <= limit. hits should be from 1 to l.Limit (0 asks
// whether the bucket is over-full; more than l.Limit is never allowed).
// nowMs must be after the epoch and below 2^53 µs (about 285 years): a TAT
// of 0 means no state, so a bucket whose TAT fell exactly on the epoch would
// read as full. l must be valid.
func (l Limit) DecideGCRA(nowMs int64, tatUs int64, hits uint64) (d Decision, newTatUs int64) {
	nowUs := nowMs * 1000
	w := uint64(l.Window.Microseconds())
	tol := l.gcraTol(w)
	capUs := int64(w + tol)
	tat := tatUs
	if tat == 0 || tat < nowUs {
		tat = nowUs
	}
	d = Decision{Limit: l.Limit, Estimate: l.Limit - l.gcraTokens(capUs-(tat-nowUs), w)}
	newTatUs = tatUs
	if hits > l.Limit {
		d.RetryAfter = Never
	} else if next := tat + l.GCRAIncrement(hits); next-nowUs <= capUs {
		d.Allowed = true
		tat, newTatUs = next, next
	} else {
		// Allowed at the first instant t with tat + inc - t <= cap.
		d.RetryAfter = ceilMs(next - capUs - nowUs)
	}
	d.Remaining = l.gcraTokens(capUs-(tat-nowUs), w)
	// A request for limit hits costs W: it fits once tat - t <= tol.
	d.ResetAfter = ceilMs(tat - int64(tol) - nowUs)
	return d, newTatUs
}

// gcraTokens returns the hits one request may take when avail µs of the
// capacity are free: the largest h with ceil(h*W/L) <= avail, at most L.
func (l Limit) gcraTokens(avail int64, w uint64) uint64 {
	if avail <= 0 {
		return 0
	}
	return min(MulDiv(uint64(avail), l.Limit, w), l.Limit)
}

// ceilMs returns us µs rounded up to whole milliseconds, 0 when us <= 0.
func ceilMs(us int64) time.Duration {
	if us <= 0 {
		return 0
	}
	return time.Duration((us+999)/1000) * time.Millisecond
}
