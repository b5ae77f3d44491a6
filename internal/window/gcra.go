package window

import (
	"math"
	"time"
)

// The token bucket is computed as GCRA (the generic cell rate algorithm): its
// whole state is the theoretical arrival time TAT, the instant (Unix µs) at
// which the bucket would be full again, i.e. tokens in use = TAT - now, as
// time. With W the window in µs, L the limit and B the burst (the bucket's
// capacity in tokens, [Limit.Capacity]: L unless Limit.Burst is set), a
// token is worth W/L µs and every step is integer arithmetic on values below
// 2^53 once the two parameters below are known (the Redis script gets them
// precomputed):
//
//	inc = ceil(hits * W / L)       the request's cost, µs  (GCRAIncrement)
//	c   = ceil(W / L)              the cost of one hit, µs
//	D   = floor(B * W / L)         the time B tokens take to refill, µs
//	tol = min(B*c - D, c - 1)      rounding slack, µs (0 when L divides B*W)
//	cap = D + tol                  the most TAT - now may reach  (GCRACapacity)
//
//	tat  = max(TAT, now)           (TAT 0: no state, a full bucket)
//	next = tat + inc
//	allow iff next - now <= cap    then TAT = next; denied: TAT unchanged
//
// Without the slack, B single hits would cost B*c µs, up to B-1 µs more than
// D, and a full bucket would not admit B of them (7 per minute would admit
// 6). tol is that excess, kept below the cost of one hit, so the bucket never
// admits a hit that an exact token bucket would not admit tol µs later.
// When L > W (more than one hit per µs), each request costs at least 1 µs.
// With B = L (no burst set), D = W: the bucket refills in one window.

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
// of now, in µs: D + min(B*c - D, c - 1) with c = ceil(W_us/limit) and
// D = floor(B*W_us/limit), B the burst. l must be valid.
func (l Limit) GCRACapacity() int64 {
	w := uint64(l.Window.Microseconds())
	d := l.gcraRefill(w)
	return int64(d + l.gcraTol(w, d))
}

// gcraRefill returns D = floor(B*W/L), the µs that B tokens take to refill;
// a valid limit's burst keeps it below 2^53.
func (l Limit) gcraRefill(w uint64) uint64 {
	return MulDiv(l.Capacity(), w, l.Limit)
}

// gcraTol returns min(B*c - D, c - 1) with c = ceil(W/L) and d = D; B*c < D
// + B (B <= 1000*L bounds it, see [Limit.Validate]), so nothing overflows.
func (l Limit) gcraTol(w, d uint64) uint64 {
	c := MulDivCeil(1, w, l.Limit)
	return min(l.Capacity()*c-d, c-1)
}

// DecideGCRA decides a request for hits against a token bucket of
// l.Capacity() tokens (the burst) that refill at limit tokens per window,
// computed as GCRA (see GCRAIncrement and GCRACapacity for the formula).
// tatUs is the stored theoretical arrival time in Unix µs, 0 when there is
// none. It returns the decision and the state to store: the new TAT when
// allowed, tatUs unchanged when denied.
//
// Estimate is the tokens in use before the request, so the request is allowed
// iff Estimate + hits <= burst; Remaining is at most the burst, and Limit is
// l.Limit. hits should be from 1 to the burst (0 asks whether the bucket is
// over-full; more than the burst is never allowed). ResetAfter is the delay
// until the bucket is full again.
// nowMs must be after the epoch and below 2^53 µs (about 285 years): a TAT
// of 0 means no state, so a bucket whose TAT fell exactly on the epoch would
// read as full. l must be valid.
func (l Limit) DecideGCRA(nowMs int64, tatUs int64, hits uint64) (d Decision, newTatUs int64) {
	nowUs := nowMs * 1000
	w := uint64(l.Window.Microseconds())
	b := l.Capacity()
	refill := l.gcraRefill(w)
	tol := l.gcraTol(w, refill)
	capUs := int64(refill + tol)
	tat := tatUs
	if tat == 0 || tat < nowUs {
		tat = nowUs
	}
	d = Decision{Limit: l.Limit, Estimate: b - l.gcraTokens(capUs-(tat-nowUs), w)}
	newTatUs = tatUs
	if hits > b {
		d.RetryAfter = Never
	} else if next := tat + l.GCRAIncrement(hits); next-nowUs <= capUs {
		d.Allowed = true
		tat, newTatUs = next, next
	} else {
		// Allowed at the first instant t with tat + inc - t <= cap.
		d.RetryAfter = ceilMs(next - capUs - nowUs)
	}
	d.Remaining = l.gcraTokens(capUs-(tat-nowUs), w)
	// A request for the whole burst fits once tat + inc(B) - t <= cap
	// (for B = L: once tat - t <= tol).
	d.ResetAfter = ceilMs(tat + l.GCRAIncrement(b) - capUs - nowUs)
	return d, newTatUs
}

// gcraTokens returns the hits one request may take when avail µs of the
// capacity are free: the largest h with ceil(h*W/L) <= avail, at most the
// burst.
func (l Limit) gcraTokens(avail int64, w uint64) uint64 {
	if avail <= 0 {
		return 0
	}
	return min(MulDiv(uint64(avail), l.Limit, w), l.Capacity())
}

// ceilMs returns us µs rounded up to whole milliseconds, 0 when us <= 0.
func ceilMs(us int64) time.Duration {
	if us <= 0 {
		return 0
	}
	return time.Duration((us+999)/1000) * time.Millisecond
}
