package window

import "time"

// LogEntry is one admitted request in a sliding log: Hits hits at AtMs
// (Unix ms).
type LogEntry struct {
	AtMs int64
	Hits uint64
}

// DecideLog decides a request for hits against a sliding log, the exact
// algorithm: an entry is live while AtMs > now - W, and
//
//	allow iff sum(live hits) + hits <= limit
//
// log must be sorted by AtMs, oldest first; expired entries are ignored, so
// the caller may trim them at leisure. When the decision is allowed, the
// caller appends LogEntry{AtMs: nowMs, Hits: hits} (inserting it in order if
// the log holds entries later than nowMs, as clock skew may leave). Estimate is the sum of
// the live hits. RetryAfter is the instant the oldest entries whose expiry
// makes room for the request have expired; ResetAfter the instant the newest
// live entry (this request's, when allowed) has expired. hits should be from
// 1 to l.Limit (more than l.Limit is never allowed). DecideLog does not
// allocate; it takes O(log n) to find the live entries plus one pass over
// them.
func (l Limit) DecideLog(nowMs int64, log []LogEntry, hits uint64) Decision {
	w := l.WindowMs()
	live := log[liveFrom(log, nowMs-w):]
	var sum uint64
	last := nowMs - w // when the newest live entry with hits arrived
	for _, e := range live {
		sum = SatAdd(sum, e.Hits)
		if e.Hits > 0 {
			last = e.AtMs
		}
	}
	d := Decision{Limit: l.Limit, Estimate: sum}
	switch {
	case sum <= l.Limit && hits <= l.Limit-sum:
		d.Allowed = true
		sum += hits
		if hits > 0 {
			last = max(last, nowMs)
		}
	case hits > l.Limit:
		d.RetryAfter = Never
	default:
		// Drop the oldest entries until the request fits; it may come once
		// the last one dropped has expired, at AtMs + W.
		over := sum - (l.Limit - hits) // > 0 hits must leave the window
		for _, e := range live {
			if e.Hits >= over {
				d.RetryAfter = time.Duration(e.AtMs+w-nowMs) * time.Millisecond
				break
			}
			over -= e.Hits
		}
		if d.RetryAfter == 0 { // only when the sum saturated
			d.RetryAfter = time.Duration(last+w-nowMs) * time.Millisecond
		}
	}
	if sum < l.Limit {
		d.Remaining = l.Limit - sum
	}
	if r := last + w - nowMs; r > 0 {
		d.ResetAfter = time.Duration(r) * time.Millisecond
	}
	return d
}

// liveFrom returns the index of the first entry with AtMs > cut in a log
// sorted by AtMs.
func liveFrom(log []LogEntry, cut int64) int {
	lo, hi := 0, len(log)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if log[m].AtMs <= cut {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
