package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// scenario is one arrival pattern against a fresh key.
type scenario struct {
	name    string
	rate    float64 // offered rate, times the limit's rate (on/off: the peak)
	poisson bool
	bunched bool    // constant arrivals held and released in clumps
	phase   float64 // where in the bucket the load starts (cold starts)
	onOff   bool
	seed    uint64
}

// The scenarios' arrival patterns are those of internal/window's accuracy
// test: keep the two in step.

// coldStart returns one-hit arrivals at rate times the limit's rate, from
// phase of the bucket that starts at start, for n windows: evenly spaced, or
// Poisson when r is set.
func coldStart(l window.Limit, start int64, phase, rate float64, n int, r *rand.Rand) []int64 {
	w := l.WindowMs()
	from := start + int64(phase*float64(w))
	gap := float64(w) / (rate * float64(l.Limit)) // ms between requests
	var out []int64
	end := from + int64(n)*w
	for t := float64(from); int64(t) < end; {
		out = append(out, int64(t))
		if r != nil {
			t += r.ExpFloat64() * gap
		} else {
			t += gap
		}
	}
	return out
}

// onOff returns bursts at peak times the limit's rate lasting from W/10 to
// W/2, each followed by a quiet gap from 0 to 2W, for n windows.
func onOff(l window.Limit, start int64, peak float64, n int, r *rand.Rand) []int64 {
	w := l.WindowMs()
	gap := float64(w) / (peak * float64(l.Limit))
	var out []int64
	end := start + int64(n)*w
	for t := float64(start + r.Int64N(w)); int64(t) < end; {
		stop := t + float64(w/10+r.Int64N(w*4/10))
		for ; t < stop && int64(t) < end; t += r.ExpFloat64() * gap {
			out = append(out, int64(t))
		}
		t += float64(r.Int64N(2 * w))
	}
	return out
}

// arrivals returns sc's arrival instants (Unix ms) for windows windows from
// the bucket that starts at start.
func (sc scenario) arrivals(l window.Limit, start int64, windows int) []int64 {
	r := rand.New(rand.NewPCG(sc.seed, uint64(sc.phase*1000)))
	if sc.onOff {
		return onOff(l, start, sc.rate, windows*4, r)
	}
	if sc.bunched {
		return bunch(coldStart(l, start, sc.phase, sc.rate, windows, nil), r)
	}
	if !sc.poisson {
		r = nil
	}
	return coldStart(l, start, sc.phase, sc.rate, windows, r)
}

// bunch holds each arrival until the next release instant, releases coming
// 100 to 350 ms apart: what a busy client or proxy that batches requests
// delivers (the node harness saw such delays on a loaded machine).
func bunch(arr []int64, r *rand.Rand) []int64 {
	if len(arr) == 0 {
		return arr
	}
	out := make([]int64, len(arr))
	rel := arr[0]
	for i, a := range arr {
		for rel < a {
			rel += 100 + r.Int64N(250)
		}
		out[i] = rel
	}
	return out
}

// scenarios returns the cold starts (each rate, constant and Poisson, each
// phase) and seeds on/off runs at 10x.
func scenarios(rates, phases []float64, arrivals []string, onOffRuns int) []scenario {
	var out []scenario
	for _, rate := range rates {
		for _, a := range arrivals {
			for _, p := range phases {
				out = append(out, scenario{
					name: fmt.Sprintf("cold %gx %s @%.2f", rate, a, p),
					rate: rate, poisson: a == "poisson", bunched: a == "bunched", phase: p, seed: 1,
				})
			}
		}
	}
	for s := 1; s <= onOffRuns; s++ {
		out = append(out, scenario{name: fmt.Sprintf("on/off 10x seed %d", s), rate: 10, onOff: true, seed: uint64(s)})
	}
	return out
}

// decider answers one-hit requests for one key at non-decreasing instants.
type decider func(nowMs int64) bool

// newDecider returns a fresh key's decider for a counter.
func newDecider(c counter) decider {
	if c.mode == "log" {
		var q []int64
		w := c.limit.WindowMs()
		return func(t int64) bool {
			for len(q) > 0 && q[0] <= t-w {
				q = q[1:]
			}
			if uint64(len(q)) >= c.limit.Limit {
				return false
			}
			q = append(q, t)
			return true
		}
	}
	if c.mode == "subbuckets" {
		s := c.sub
		cs := make([]uint64, s.K+1)
		var j int64
		return func(t int64) bool {
			if n := s.SubBucket(t) - j; n > 0 {
				if n > s.K {
					clear(cs)
				} else {
					copy(cs, cs[n:])
					clear(cs[s.K+1-n:])
				}
				j += n
			}
			d := s.Decide(t, cs, 1)
			if d.Allowed {
				cs[s.K]++
			}
			return d.Allowed
		}
	}
	// The stores' state: one region's halves of the previous and current
	// bucket (the two-bucket counter reads only their counts).
	l := c.limit
	w := l.WindowMs()
	prev, cur := make([]window.Trail, 1), make([]window.Trail, 1)
	b := int64(-1 << 40)
	return func(t int64) bool {
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
			d = l.DecideCounter(t, window.Counts{Prev: prev[0].Count(), Cur: cur[0].Count()}, 1)
		} else {
			d = l.DecideTrails(t, prev, cur, 0, 1)
		}
		if d.Allowed {
			cur[0].Add(t-b*w, w, 1, l.Exact())
		}
		return d.Allowed
	}
}

// simulate plays sc on a virtual clock against the real window code and
// returns the instants of the admitted requests.
func simulate(c counter, sc scenario, windows int) (admitted []int64, loadStart int64) {
	w := c.limit.WindowMs()
	start := (1_700_000_000_000/w + 1) * w
	arr := sc.arrivals(c.limit, start, windows)
	if len(arr) == 0 {
		return nil, start
	}
	d := newDecider(c)
	for _, t := range arr {
		if d(t) {
			admitted = append(admitted, t)
		}
	}
	return admitted, arr[0]
}

// stats are the trailing-window counts at every admission, as a share of
// the limit.
type stats struct {
	admitted       int
	p50, p999, max float64
	steadyMin      float64 // over admissions from 2W after the load began; -1 if none
}

// trailing computes, for every admission t (sorted instants, one hit each),
// the exact count admitted in (t-W, t] and summarizes it.
func trailing(admitted []int64, w time.Duration, limit uint64, steadyFrom int64) stats {
	wm := w.Milliseconds()
	st := stats{admitted: len(admitted), steadyMin: -1}
	ratios := make([]float64, 0, len(admitted))
	lo := 0
	for i, t := range admitted {
		for admitted[lo] <= t-wm {
			lo++
		}
		x := float64(i+1-lo) / float64(limit)
		ratios = append(ratios, x)
		if t >= steadyFrom && (st.steadyMin < 0 || x < st.steadyMin) {
			st.steadyMin = x
		}
	}
	if len(ratios) == 0 {
		return st
	}
	slices.Sort(ratios)
	st.p50 = ratios[len(ratios)/2]
	st.p999 = ratios[len(ratios)*999/1000]
	st.max = ratios[len(ratios)-1]
	return st
}
