package main

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/rlcluster/rlcluster/internal/window"
	"github.com/rlcluster/rlcluster/loadtest/accuracy/sliding"
)

// counter is what a mode decides with, for one limit.
type counter struct {
	mode  string
	limit window.Limit    // default, two-bucket, log
	sub   sliding.Counter // subbuckets
}

// newCounter returns the counter mode simulates for l, with k sub-buckets
// for subbuckets (0: the default K).
func newCounter(mode string, k int64, l window.Limit) (counter, error) {
	out := counter{mode: mode}
	switch mode {
	case modeDefault, modeLog:
	case modeTwoBucket:
		l.Algorithm = window.SlidingWindowTwoBucket
	case modeSubBuckets:
		out.sub = sliding.Default(l)
		if k != 0 {
			out.sub.K = k
		}
		if err := out.sub.Validate(); err != nil {
			return out, fmt.Errorf("counter for -mode %s -k %d, %d per %v: %w", mode, k, l.Limit, l.Window, err)
		}
	default:
		return out, fmt.Errorf("unknown -mode %q (want default, two-bucket, subbuckets or log)", mode)
	}
	if err := l.Validate(); err != nil {
		return out, fmt.Errorf("counter for %d per %v: %w", l.Limit, l.Window, err)
	}
	out.limit = l
	return out, nil
}

// cell is one (limit, window, arrivals, rate) of the grid and its plan.
type cell struct {
	cnt     counter
	shape   string
	rate    float64
	hits    uint64 // per request
	windows int    // length of each run
	runs    []runSpec
}

// runSpec is one run of a cell: a cold start at phase, or an on/off seed.
type runSpec struct {
	phase float64
	seed  uint64
}

// runName says which run r is, for -by-phase and errors.
func (c cell) runName(r runSpec) string {
	if c.shape == shapeOnOff {
		return fmt.Sprintf("%s seed %d", c.shape, r.seed)
	}
	return fmt.Sprintf("%s @%.2f", c.shape, r.phase)
}

// arrivals returns run r's requests from the bucket that starts at start.
func (c cell) arrivals(r runSpec, start int64) []arrival {
	l := c.cnt.limit
	rng := rand.New(rand.NewPCG(r.seed, uint64(r.phase*1000)))
	switch c.shape {
	case shapeOnOff:
		return onOff(l, start, c.rate, c.hits, c.windows, rng)
	case shapeBunched:
		return bunch(coldStart(l, start, r.phase, c.rate, c.hits, c.windows, nil), rng)
	case shapeEven:
		return coldStart(l, start, r.phase, c.rate, c.hits, c.windows, nil)
	}
	return coldStart(l, start, r.phase, c.rate, c.hits, c.windows, rng)
}

// cells returns the grid's cells, planned: runs of at least c.windows
// windows, longer (simulated, up to c.maxWindows) while the cell stays
// under c.decisions, with requests of more hits when even the shortest
// runs would exceed it.
func (c config) cells() ([]cell, error) {
	var out []cell
	for _, lim := range c.limits {
		for _, w := range c.windowsOf {
			cnt, err := newCounter(c.mode, c.k, window.Limit{Limit: lim, Window: w})
			if err != nil {
				return nil, err
			}
			for _, shape := range c.arrivals {
				for _, rate := range c.rates {
					cl := cell{cnt: cnt, shape: shape, rate: rate}
					n := len(c.phases)
					if shape == shapeOnOff && c.onOff > 0 {
						n = c.onOff
					}
					for i := range n {
						r := runSpec{seed: uint64(i + 1)}
						if shape != shapeOnOff {
							r = runSpec{phase: c.phases[i], seed: 1}
						}
						cl.runs = append(cl.runs, r)
					}
					cl.hits, cl.windows = c.plan(lim, rate, n)
					out = append(out, cl)
				}
			}
		}
	}
	return out, nil
}

// plan returns the hits per request and the windows per run of a cell of
// runs runs at rate times a limit of lim.
func (c config) plan(lim uint64, rate float64, runs int) (hits uint64, windows int) {
	perRun := float64(c.decisions) / float64(runs)
	perWindow := rate * float64(lim) // hits offered per window
	h := max(1, math.Ceil(perWindow*float64(c.windows)/perRun))
	hits = divisorFrom(lim, uint64(min(h, float64(lim))))
	windows = c.windows
	if c.node == "" {
		windows = int(min(float64(c.maxWindows), max(float64(c.windows), perRun/(perWindow/float64(hits)))))
	}
	return hits, windows
}

// divisorFrom returns the least divisor of lim from h up to 2h (so that
// requests of that many hits can fill the limit exactly), or h.
func divisorFrom(lim, h uint64) uint64 {
	for d := h; d <= 2*h && d <= lim; d++ {
		if lim%d == 0 {
			return d
		}
	}
	return h
}
