package region

import (
	"math/bits"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// This file adapts the region-local algorithms (token bucket as GCRA, sliding
// log) of package window to the stores. It is a stand-in until
// window.DecideGCRA and window.DecideLog land; the stores call only these two
// functions.

// logEntry is one admitted request in a sliding log.
type logEntry struct {
	AtMs int64
	Hits uint64
}

// decideGCRA decides hits against a token bucket whose state is the
// theoretical arrival time tatUs (Unix µs; 0 means a full bucket). It returns
// the decision and the new TAT to store when the decision is allowed.
func decideGCRA(l window.Limit, nowMs, tatUs int64, hits uint64) (window.Decision, int64) {
	wUs := uint64(l.WindowMs()) * 1000
	nowUs := nowMs * 1000
	inc := int64(mulDivCeil(hits, wUs, l.Limit))
	tat := max(tatUs, nowUs)
	d := window.Decision{Limit: l.Limit}
	newTat := tat + inc
	if newTat-nowUs <= int64(wUs) {
		d.Allowed = true
	} else {
		newTat = tat
		wait := newTat + inc - int64(wUs) - nowUs
		d.RetryAfter = time.Duration((wait+999)/1000) * time.Millisecond
	}
	used := newTat - nowUs // µs of burst in use
	free := int64(wUs) - used
	per := int64(wUs) / int64(l.Limit)
	if per < 1 {
		per = 1
	}
	if free > 0 {
		d.Remaining = min(uint64(free/per), l.Limit)
	}
	d.ResetAfter = time.Duration((used+999)/1000) * time.Millisecond
	return d, newTat
}

// decideLog decides hits against the sliding log entries (oldest first).
func decideLog(l window.Limit, nowMs int64, log []logEntry, hits uint64) window.Decision {
	w := l.WindowMs()
	var sum uint64
	for _, e := range log {
		if e.AtMs > nowMs-w {
			sum += e.Hits
		}
	}
	d := window.Decision{Limit: l.Limit, Estimate: sum}
	if sum <= l.Limit && hits <= l.Limit-sum {
		d.Allowed = true
		sum += hits
	} else {
		// Wait until enough old entries leave the window.
		need := sum + hits - l.Limit
		var freed uint64
		for _, e := range log {
			if e.AtMs <= nowMs-w {
				continue
			}
			freed += e.Hits
			if freed >= need {
				d.RetryAfter = time.Duration(e.AtMs+w-nowMs) * time.Millisecond
				break
			}
		}
	}
	if sum < l.Limit {
		d.Remaining = l.Limit - sum
	}
	if len(log) > 0 || d.Allowed {
		last := nowMs
		if !d.Allowed && len(log) > 0 {
			last = log[len(log)-1].AtMs
		}
		d.ResetAfter = time.Duration(max(last+w-nowMs, 0)) * time.Millisecond
	}
	return d
}

// mulDivCeil returns ceil(a*b/c), saturating at the maximum uint64.
func mulDivCeil(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return ^uint64(0)
	}
	q, r := bits.Div64(hi, lo, c)
	if r != 0 {
		q++
	}
	return q
}
