package window

import (
	"fmt"
	"slices"
	"time"
)

// limiter is one key's state under one algorithm, as a store would keep it:
// decide answers a request at nowMs and, when commit is set and the request
// is allowed, records it. With commit unset it is a pure look (used to check
// retry_after without other traffic).
type limiter interface {
	decide(nowMs int64, hits uint64, commit bool) Decision
}

// newLimiter returns an empty limiter for l's algorithm.
func newLimiter(l Limit) limiter {
	switch l.Algorithm {
	case TokenBucket:
		return &gcraState{l: l}
	case SlidingLog:
		return &logState{l: l}
	}
	return &counterState{l: l}
}

// counterState keeps the previous and current bucket's counts of a counter
// algorithm, as of bucket b.
type counterState struct {
	l Limit
	b int64
	c Counts
}

// at returns the counts seen at nowMs with no traffic since bucket s.b.
func (s *counterState) at(nowMs int64) Counts {
	return shift(s.c, s.b, Bucket(nowMs, s.l.Window))
}

// shift moves counts held as of bucket b to bucket b2 >= b with no traffic.
func shift(c Counts, b, b2 int64) Counts {
	switch b2 - b {
	case 0:
		return c
	case 1:
		return Counts{Prev: c.Cur}
	}
	return Counts{}
}

func (s *counterState) decide(nowMs int64, hits uint64, commit bool) Decision {
	c := s.at(nowMs)
	d := s.l.DecideCounter(nowMs, c, hits)
	if commit && d.Allowed {
		c.Cur += hits
		s.b, s.c = d.Bucket, c
	}
	return d
}

// gcraState keeps a token bucket's theoretical arrival time.
type gcraState struct {
	l     Limit
	tatUs int64
}

func (s *gcraState) decide(nowMs int64, hits uint64, commit bool) Decision {
	d, tat := s.l.DecideGCRA(nowMs, s.tatUs, hits)
	if !d.Allowed && tat != s.tatUs {
		panic(fmt.Sprintf("DecideGCRA denied but changed the state %d -> %d", s.tatUs, tat))
	}
	if commit {
		s.tatUs = tat
	}
	return d
}

// logState keeps a sliding log.
type logState struct {
	l   Limit
	log []LogEntry
}

func (s *logState) decide(nowMs int64, hits uint64, commit bool) Decision {
	d := s.l.DecideLog(nowMs, s.log, hits)
	if commit && d.Allowed {
		// Keep the log sorted even past entries from the future (skew).
		s.log = slices.Insert(s.log, liveFrom(s.log, nowMs), LogEntry{AtMs: nowMs, Hits: hits})
	}
	return d
}

// clone returns an independent copy of a limiter.
func clone(lim limiter) limiter {
	switch s := lim.(type) {
	case *counterState:
		c := *s
		return &c
	case *gcraState:
		c := *s
		return &c
	case *logState:
		c := *s
		c.log = append([]LogEntry(nil), s.log...)
		return &c
	case trailLimiter:
		return trailLimiter{s.s.clone()}
	}
	panic("unknown limiter")
}

// ms converts a duration to whole milliseconds.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// exactRetry checks the contract of d, the answer to hits at nowMs on lim:
// RetryAfter is 0 when allowed; when denied, the same request is allowed at
// now+RetryAfter and denied 1 ms earlier; ResetAfter is the earliest instant
// a request for the full limit is allowed (after this request, if it was
// allowed). The decisions are monotone in time without traffic, so the two
// neighbouring instants prove exactness. It returns "" or what is wrong.
func exactRetry(lim limiter, l Limit, nowMs int64, hits uint64, d Decision) string {
	if d.Allowed && d.RetryAfter != 0 {
		return fmt.Sprintf("allowed with RetryAfter %v", d.RetryAfter)
	}
	if !d.Allowed {
		if d.RetryAfter <= 0 {
			return fmt.Sprintf("denied with RetryAfter %v", d.RetryAfter)
		}
		if d.RetryAfter != Never {
			at := nowMs + ms(d.RetryAfter)
			if !lim.decide(at, hits, false).Allowed {
				return fmt.Sprintf("denied at now+RetryAfter (%v)", d.RetryAfter)
			}
			if lim.decide(at-1, hits, false).Allowed {
				return fmt.Sprintf("allowed at now+RetryAfter-1ms (%v)", d.RetryAfter)
			}
		}
	}
	// ResetAfter is measured on the state after the request.
	after := clone(lim)
	after.decide(nowMs, hits, true)
	at := nowMs + ms(d.ResetAfter)
	if !after.decide(at, l.Capacity(), false).Allowed {
		return fmt.Sprintf("full limit denied at now+ResetAfter (%v)", d.ResetAfter)
	}
	if d.ResetAfter > 0 && after.decide(at-1, l.Capacity(), false).Allowed {
		return fmt.Sprintf("full limit allowed at now+ResetAfter-1ms (%v)", d.ResetAfter)
	}
	// Remaining: a request for Remaining hits fits now, one more does not.
	if d.Remaining > 0 && !after.decide(nowMs, d.Remaining, false).Allowed {
		return fmt.Sprintf("Remaining %d denied right after", d.Remaining)
	}
	if d.Remaining < l.Limit && after.decide(nowMs, d.Remaining+1, false).Allowed {
		return fmt.Sprintf("Remaining+1 = %d allowed right after", d.Remaining+1)
	}
	return ""
}
