package main

import (
	"math/rand/v2"

	"github.com/rlcluster/rlcluster/internal/window"
)

// arrival is one request: hits asked at the instant at (Unix ms).
type arrival struct {
	at   int64
	hits uint64
}

// decision is one request and its answer: hits asked at the instant at
// (Unix ms on the decider's clock) and whether they were admitted.
type decision struct {
	at      int64
	hits    uint64
	allowed bool
}

// The arrival shapes.
const (
	shapePoisson = "poisson" // exponentially spaced
	shapeEven    = "even"    // evenly spaced
	shapeBunched = "bunched" // evenly spaced, held and released in clumps
	shapeOnOff   = "onoff"   // Poisson bursts and quiet gaps
)

// The scenarios' arrival patterns are those of internal/window's accuracy
// tests: keep the two in step.

// coldStart returns requests of hits hits each, offered at rate times the
// limit's rate, from phase of the bucket that starts at start, for n
// windows: evenly spaced, or Poisson when r is set.
func coldStart(l window.Limit, start int64, phase, rate float64, hits uint64, n int, r *rand.Rand) []arrival {
	w := l.WindowMs()
	from := start + int64(phase*float64(w))
	gap := float64(w) * float64(hits) / (rate * float64(l.Limit)) // ms between requests
	var out []arrival
	end := from + int64(n)*w
	if r == nil {
		for i := 0; ; i++ {
			t := from + int64(float64(i)*gap)
			if t >= end {
				return out
			}
			out = append(out, arrival{t, hits})
		}
	}
	for t := float64(from); int64(t) < end; t += r.ExpFloat64() * gap {
		out = append(out, arrival{int64(t), hits})
	}
	return out
}

// onOff returns bursts of Poisson requests of hits hits each at peak times
// the limit's rate, each lasting from W/10 to W/2 and followed by a quiet
// gap from 0 to 2W, for n windows from start.
func onOff(l window.Limit, start int64, peak float64, hits uint64, n int, r *rand.Rand) []arrival {
	w := l.WindowMs()
	gap := float64(w) * float64(hits) / (peak * float64(l.Limit))
	var out []arrival
	end := start + int64(n)*w
	for t := float64(start + r.Int64N(w)); int64(t) < end; {
		stop := t + float64(w/10+r.Int64N(w*4/10))
		for ; t < stop && int64(t) < end; t += r.ExpFloat64() * gap {
			out = append(out, arrival{int64(t), hits})
		}
		t += float64(r.Int64N(2 * w))
	}
	return out
}

// bunch holds each arrival until the next release instant, releases coming
// 100 to 350 ms apart: what a busy client or proxy that batches requests
// delivers (the node harness saw such delays on a loaded machine).
func bunch(arr []arrival, r *rand.Rand) []arrival {
	if len(arr) == 0 {
		return arr
	}
	out := make([]arrival, len(arr))
	rel := arr[0].at
	for i, a := range arr {
		for rel < a.at {
			rel += 100 + r.Int64N(250)
		}
		out[i] = arrival{rel, a.hits}
	}
	return out
}

// decider answers requests for one key at non-decreasing instants.
type decider func(nowMs int64, hits uint64) bool

// newDecider returns a fresh key's decider for a counter.
func newDecider(c counter) decider {
	switch c.mode {
	case modeLog:
		l := window.Limit{Limit: c.limit.Limit, Window: c.limit.Window, Algorithm: window.SlidingLog}
		w := l.WindowMs()
		var log []window.LogEntry
		return func(t int64, hits uint64) bool {
			i := 0
			for i < len(log) && log[i].AtMs <= t-w {
				i++
			}
			log = log[i:]
			d := l.DecideLog(t, log, hits)
			if d.Allowed {
				log = append(log, window.LogEntry{AtMs: t, Hits: hits})
			}
			return d.Allowed
		}
	case modeSubBuckets:
		s := c.sub
		cs := make([]uint64, s.K+1)
		var j int64
		return func(t int64, hits uint64) bool {
			if n := s.SubBucket(t) - j; n > 0 {
				if n > s.K {
					clear(cs)
				} else {
					copy(cs, cs[n:])
					clear(cs[s.K+1-n:])
				}
				j += n
			}
			d := s.Decide(t, cs, hits)
			if d.Allowed {
				cs[s.K] += hits
			}
			return d.Allowed
		}
	}
	// The stores' state: one region's trails of the previous and current
	// bucket (the two-bucket counter reads only their counts).
	l := c.limit
	w := l.WindowMs()
	prev, cur := make([]window.Trail, 1), make([]window.Trail, 1)
	b := int64(-1 << 40)
	return func(t int64, hits uint64) bool {
		switch nb := window.Bucket(t, l.Window); {
		case nb == b+1:
			prev[0], cur[0] = cur[0], window.Trail(nil)
			b = nb
		case nb > b+1:
			prev[0], cur[0] = window.Trail(nil), window.Trail(nil)
			b = nb
		}
		var d window.Decision
		if l.Algorithm == window.SlidingWindowTwoBucket {
			d = l.DecideCounter(t, window.Counts{Prev: prev[0].Count(), Cur: cur[0].Count()}, hits)
		} else {
			d = l.DecideTrails(t, prev, cur, 0, hits)
		}
		if d.Allowed {
			cur[0].Add(t-b*w, w, hits, l.Exact())
		}
		return d.Allowed
	}
}

// simulate plays arrivals on a virtual clock against a fresh key of the
// counter, with the real window code, and returns every decision.
func simulate(c counter, arr []arrival) []decision {
	d := newDecider(c)
	out := make([]decision, len(arr))
	for i, a := range arr {
		out[i] = decision{a.at, a.hits, d(a.at, a.hits)}
	}
	return out
}

// verdict is what one run's decisions show, judged against exact sliding
// logs that the code under test has no part in.
type verdict struct {
	decisions, denials int
	// badDeny counts denials although the hits the decider admitted in
	// the trailing window (t-W, t], plus the request's, fit the limit;
	// badAdmit admissions although they did not.
	badDeny, badAdmit int
	admitted          uint64    // hits admitted
	ratios            []float64 // at each admission, the hits admitted in (t-W, t] over the limit
	steadyMin         float64   // the least of ratios from steadyFrom on; -1 if none
	// steady is the hits the decider admitted from steadyFrom on, and
	// logSteady those an independent exact sliding log admits of the same
	// requests.
	steady, logSteady uint64
}

// exactWindow is an exact sliding log of admitted hits: a queue with a running
// sum.
type exactWindow struct {
	w   int64
	q   []arrival
	sum uint64
}

// count returns the hits in (now-W, now].
func (e *exactWindow) count(now int64) uint64 {
	i := 0
	for i < len(e.q) && e.q[i].at <= now-e.w {
		e.sum -= e.q[i].hits
		i++
	}
	e.q = e.q[i:]
	return e.sum
}

func (e *exactWindow) add(a arrival) {
	e.q = append(e.q, a)
	e.sum += a.hits
}

// judge judges decisions, in the order the decider took them (instants
// non-decreasing), for a limit per window of wMs: each against the
// decider's own admissions so far, and all of them against an independent
// exact log offered the same requests.
func judge(ds []decision, limit uint64, wMs, steadyFrom int64) verdict {
	v := verdict{decisions: len(ds), steadyMin: -1, ratios: make([]float64, 0, len(ds))}
	own, ref := &exactWindow{w: wMs}, &exactWindow{w: wMs}
	for _, d := range ds {
		a := arrival{d.at, d.hits}
		n := own.count(d.at)
		fits := n+d.hits <= limit
		if d.allowed {
			if !fits {
				v.badAdmit++
			}
			own.add(a)
			v.admitted += d.hits
			x := float64(n+d.hits) / float64(limit)
			v.ratios = append(v.ratios, x)
			if d.at >= steadyFrom {
				v.steady += d.hits
				if v.steadyMin < 0 || x < v.steadyMin {
					v.steadyMin = x
				}
			}
		} else {
			v.denials++
			if fits {
				v.badDeny++
			}
		}
		if ref.count(d.at)+d.hits <= limit {
			ref.add(a)
			if d.at >= steadyFrom {
				v.logSteady += d.hits
			}
		}
	}
	return v
}
