// Command accuracy measures how closely a rate limit decides as an exact
// sliding log would, in both directions, at every decision. It offers a
// fresh key requests over a grid of limits, windows, arrival shapes and
// rates, records every decision (its instant, hits and answer) and judges
// each against an exact sliding log of the decider's own admissions:
//
//   - an unjustified denial is a denial although the hits admitted in the
//     trailing window (t-W, t], plus the request's, fit the limit;
//   - an unjustified admission is an admission although they did not.
//
// Each row also gives the steady-state admitted ratio, the hits admitted
// from 2W after the load began over those an independent exact sliding
// log admits of the same requests, and the trailing window at each
// admission (the hits admitted in (t-W, t] over the limit): p50, p99.9,
// max and the steady-state minimum.
//
// Arrivals are Poisson, even, bunched (even, held and released in clumps
// 100-350 ms apart, as a busy client delivers them) or on/off (Poisson
// bursts of W/10 to W/2 at the rate, quiet gaps of 0 to 2W), offered at
// each of -rates times the limit's rate. Every cell (limit, window,
// arrivals, rate) runs once per -phases entry, from a cold start at that
// phase of a bucket (on/off: one seed per phase). A cell stays under
// -decisions decisions: a simulated run lasts -windows windows or more, up
// to -max-windows, and when even -windows windows would exceed the bound,
// each request asks for several hits (the hits/req column), so that the
// offered rate stays as given.
//
// By default it simulates on a virtual clock with the real decision code
// of internal/window; -mode picks the counter: default (trails of marks,
// the API's default), two-bucket (the seeds' formula), subbuckets (K evenly
// weighted sub-buckets, -k, for comparison) or log (an exact sliding log).
// With -node it drives a running rlnode over its Connect JSON API instead,
// at the arrivals' wall-clock instants, each cell on keys of its own with
// -parallel cells at once, and takes each decision's instant from the
// node's answer (its stats' bucket x W + elapsedMs), so the judgement uses
// the node's clock. -grid-node sets a grid small enough for a node.
//
// Usage:
//
//	go run ./loadtest/accuracy [-mode default] [-limits 1,10,100,1000,100000] [-windows-list 1s,10s,1h] [-arrivals poisson,even,bunched,onoff] [-rates 0.5,0.9,2,10]
//	go run ./loadtest/accuracy -node http://127.0.0.1:8080 -grid-node
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
	"github.com/rlcluster/rlcluster/loadtest/accuracy/sliding"
	"github.com/rlcluster/rlcluster/loadtest/internal/command"
)

func main() { command.Main("accuracy", run) }

// The modes.
const (
	modeDefault    = "default"
	modeTwoBucket  = "two-bucket"
	modeLog        = "log"
	modeSubBuckets = "subbuckets"
	// modeStrict is accepted as default: the default never admits more
	// than the limit in one region, and the API's strict changes nothing.
	modeStrict = "strict"
)

// config is the command's flags.
type config struct {
	mode       string
	k          int64
	limits     []uint64
	windowsOf  []time.Duration // the windows of the grid (-windows-list)
	rates      []float64
	arrivals   []string
	phases     []float64
	onOff      int // on/off runs per cell; -1: one per phase
	windows    int // least length of a run, in windows (the node: the length)
	maxWindows int
	decisions  int
	byPhase    bool
	summary    bool
	parallel   int
	node       string
	remote     bool
	workers    int
	retries    int
	maxLag     time.Duration // 0: W/10
	timeout    time.Duration
}

// nodeGrid is -grid-node's grid: flags set on the command line win.
var nodeGrid = map[string]string{
	"limits":       "10,100,1000",
	"windows-list": "10s",
	"rates":        "0.5,0.9,2,10",
	"arrivals":     "poisson,even,bunched,onoff",
	"phases":       "0.5",
	"windows":      "3",
	"parallel":     "8",
	"workers":      "16",
	"retries":      "2",
}

func parse(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("accuracy", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.mode, "mode", modeDefault, "counter: default, two-bucket, subbuckets or log (an exact sliding log); strict is taken as default")
	fs.Int64Var(&c.k, "k", 0, "sub-buckets per window for -mode subbuckets (0: 100, or the most up to 100 that split the window into whole ms)")
	limits := fs.String("limits", "1,10,100,1000,100000", "the limits of the grid, per window, comma-separated")
	limit := fs.Uint64("limit", 0, "deprecated: one limit, as -limits N")
	windowsOf := fs.String("windows-list", "1s,10s,1h", "the windows of the grid, comma-separated")
	win := fs.Duration("window", 0, "deprecated: one window, as -windows-list D")
	rates := fs.String("rates", "0.5,0.9,2,10", "offered rates, times the limit's rate (on/off: the rate within a burst)")
	arrivals := fs.String("arrivals", "poisson,even,bunched,onoff", "arrival shapes: poisson, even (or constant), bunched (even, released in clumps 100-350 ms apart), onoff (Poisson bursts of W/10 to W/2, gaps of 0 to 2W)")
	phases := fs.String("phases", "0.1,0.5,0.9", "phases of the bucket at which each cell's runs start cold (on/off: one seed per phase)")
	fs.IntVar(&c.onOff, "onoff", -1, "on/off runs per cell (-1: one per phase; 0 drops onoff from -arrivals)")
	fs.IntVar(&c.windows, "windows", 10, "least length of a run, in windows (against -node: its length)")
	fs.IntVar(&c.maxWindows, "max-windows", 100000, "most length of a simulated run, in windows: runs grow towards -decisions up to it")
	fs.IntVar(&c.decisions, "decisions", 200000, "most decisions per cell (its runs together); requests ask for several hits when -windows windows of single hits would exceed it")
	fs.BoolVar(&c.byPhase, "by-phase", false, "one row per run (phase or on/off seed) instead of one per cell")
	fs.BoolVar(&c.summary, "summary", false, "also print one row per limit and window, the worst over its arrivals and rates")
	fs.IntVar(&c.parallel, "parallel", 1, "cells run at once (against -node: keys driven at once)")
	fs.StringVar(&c.node, "node", "", "base URL of a running rlnode to drive instead of simulating, on loopback (e.g. http://127.0.0.1:8080)")
	fs.BoolVar(&c.remote, "remote", false, "allow a -node that is not on loopback")
	fs.IntVar(&c.workers, "workers", 64, "concurrent requests in flight per cell against -node")
	fs.IntVar(&c.retries, "retries", 0, "against -node, run a cell's run again (on a fresh key) up to this many times when its requests went out more than W/10 behind their schedule, as on a busy machine, or a request failed")
	fs.DurationVar(&c.maxLag, "max-lag", 0, "against -node, the most a request may go out behind its schedule before its run is dropped as late (0: W/10)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "against -node, the longest the grid may take; a grid planned to take longer is refused before it starts")
	gridNode := fs.Bool("grid-node", false, "a grid small enough for a node: -limits 10,100,1000 -windows-list 10s -rates 0.5,0.9,2,10 -phases 0.5 -windows 3 -parallel 8 -workers 16 -retries 2 (flags given win)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("parse: unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *gridNode {
		for name, v := range nodeGrid {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return c, fmt.Errorf("parse -grid-node: %w", err)
				}
			}
		}
	}
	switch {
	case set["limit"] && set["limits"]:
		return c, errors.New("parse: -limit and -limits both given (-limit is deprecated)")
	case set["window"] && set["windows-list"]:
		return c, errors.New("parse: -window and -windows-list both given (-window is deprecated)")
	}
	var err error
	if set["limit"] {
		*limits = strconv.FormatUint(*limit, 10)
	}
	if set["window"] {
		*windowsOf = win.String()
	}
	if c.limits, err = uints(*limits); err != nil {
		return c, fmt.Errorf("parse -limits: %w", err)
	}
	if c.windowsOf, err = durations(*windowsOf); err != nil {
		return c, fmt.Errorf("parse -windows-list: %w", err)
	}
	if c.rates, err = floats(*rates); err != nil {
		return c, fmt.Errorf("parse -rates: %w", err)
	}
	if c.phases, err = floats(*phases); err != nil {
		return c, fmt.Errorf("parse -phases: %w", err)
	}
	for _, p := range c.phases {
		if p >= 1 {
			return c, fmt.Errorf("parse -phases: %g is not below 1", p)
		}
	}
	for _, a := range strings.Split(*arrivals, ",") {
		switch a = strings.TrimSpace(a); a {
		case "constant":
			a = shapeEven
		case "on/off":
			a = shapeOnOff
		case shapePoisson, shapeEven, shapeBunched, shapeOnOff:
		default:
			return c, fmt.Errorf("parse -arrivals: %q is not poisson, even, bunched or onoff", a)
		}
		if a == shapeOnOff && c.onOff == 0 {
			continue
		}
		if !slices.Contains(c.arrivals, a) {
			c.arrivals = append(c.arrivals, a)
		}
	}
	if len(c.arrivals) == 0 {
		return c, errors.New("parse -arrivals: none left (-onoff 0 drops onoff)")
	}
	if c.mode == modeStrict {
		c.mode = modeDefault
	}
	switch c.mode {
	case modeDefault, modeTwoBucket, modeLog, modeSubBuckets:
	default:
		return c, fmt.Errorf("parse -mode: unknown %q (want default, two-bucket, subbuckets or log)", c.mode)
	}
	switch {
	case c.windows < 3:
		return c, errors.New("parse -windows: at least 3, so that a steady state follows the cold start")
	case c.maxWindows < c.windows:
		return c, errors.New("parse -max-windows: at least -windows")
	case c.decisions < 1:
		return c, errors.New("parse -decisions: at least 1")
	case c.parallel < 1:
		return c, errors.New("parse -parallel: at least 1")
	case c.workers < 1:
		return c, errors.New("parse -workers: at least 1")
	case c.onOff < -1:
		return c, errors.New("parse -onoff: -1, 0 or more")
	case c.maxLag < 0:
		return c, errors.New("parse -max-lag: not negative")
	}
	if c.node != "" {
		if c.mode != modeDefault && c.mode != modeTwoBucket {
			return c, fmt.Errorf("parse -mode: a node runs default or two-bucket, not %s", c.mode)
		}
		if err := checkNode(c.node, c.remote); err != nil {
			return c, err
		}
	}
	return c, nil
}

// checkNode refuses a node URL that is not http(s) on loopback, unless
// remote.
func checkNode(raw string, remote bool) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("parse -node: %q is not an http:// or https:// URL", raw)
	}
	if remote {
		return nil
	}
	h := u.Hostname()
	if ip := net.ParseIP(h); h == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("parse -node: %s is not on loopback (pass -remote to drive it anyway)", h)
}

func floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || x <= 0 || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, x)
	}
	return out, nil
}

func uints(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		x, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil || x < 1 || x > window.MaxLimit {
			return nil, fmt.Errorf("%q is not a limit from 1 to 2^53", f)
		}
		out = append(out, x)
	}
	return out, nil
}

func durations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < window.MinWindow || d > window.MaxWindow || d%time.Millisecond != 0 {
			return nil, fmt.Errorf("%q is not a window from 1s to 168h in whole ms", f)
		}
		out = append(out, d)
	}
	return out, nil
}

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

// row is one cell's (or, with -by-phase, one run's) result.
type row struct {
	cell  cell
	label string // the arrivals column
	v     verdict
	lag   int64 // against a node: the latest request's delay, ms
	// against a node: decisions made by its in-memory fallback while the
	// cell ran (Redis slower than the node's store timeout); with
	// -parallel, those of the cells that ran beside it count too
	fallback uint64
	retried  int // against a node: runs dropped for late or failed requests
}

// merge adds run v to the row.
func (r *row) merge(v verdict) {
	if v.steadyMin >= 0 && (r.v.steadyMin < 0 || v.steadyMin < r.v.steadyMin) {
		r.v.steadyMin = v.steadyMin
	}
	r.v.decisions += v.decisions
	r.v.denials += v.denials
	r.v.badDeny += v.badDeny
	r.v.badAdmit += v.badAdmit
	r.v.admitted += v.admitted
	r.v.ratios = append(r.v.ratios, v.ratios...)
	r.v.steady += v.steady
	r.v.logSteady += v.logSteady
}

func run(ctx context.Context, args []string, out io.Writer) error {
	c, err := parse(args, out)
	if err != nil {
		return err
	}
	cells, err := c.cells()
	if err != nil {
		return err
	}
	start := time.Now()
	rows, err := measure(ctx, c, cells)
	if len(rows) == 0 {
		return err
	}
	what := "simulated, mode " + c.mode
	switch {
	case c.node != "":
		what = fmt.Sprintf("node %s, mode %s", c.node, c.mode)
	case c.mode == modeSubBuckets && len(cells) > 0:
		what += fmt.Sprintf(" (K=%d)", cells[0].cnt.sub.K)
	}
	fmt.Fprintf(out, "%s; %d cells; runs start cold at phases %s of a bucket (on/off: one seed each); %v\n\n",
		what, len(cells), joinFloats(c.phases), time.Since(start).Round(time.Second))
	report(out, rows)
	if c.summary {
		fmt.Fprintln(out)
		summarize(out, rows)
	}
	return err
}

// measure runs every cell, simulated or against the node, c.parallel at
// once, and returns their rows in the cells' order. When some cells fail
// (or ctx ends), it returns the rows of the others with the error.
func measure(ctx context.Context, c config, cells []cell) ([]row, error) {
	var nd *nodeDriver
	if c.node != "" {
		var err error
		if nd, err = newNodeDriver(c, cells); err != nil {
			return nil, err
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	res := make([][]row, len(cells))
	errs := make([]error, len(cells))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(c.parallel, len(cells)) {
		wg.Go(func() {
			for i := range next {
				if nd != nil {
					res[i], errs[i] = nd.cell(ctx, i, cells[i], c.byPhase)
				} else {
					res[i] = simulateCell(cells[i], c.byPhase)
				}
			}
		})
	}
dispatch:
	for _, i := range spread(cells) {
		select {
		case next <- i:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(next)
	wg.Wait()
	var rows []row
	failed := 0
	for i, r := range res {
		rows = append(rows, r...)
		if errs[i] != nil {
			failed++
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		err = fmt.Errorf("%d of %d cells failed: %w", failed, len(cells), err)
	}
	if ctx.Err() != nil {
		err = errors.Join(fmt.Errorf("measure: %w", ctx.Err()), err)
	}
	return rows, err
}

// spread returns the order to run cells in: heaviest and lightest
// alternately, so that cells run in parallel do not all offer the most.
func spread(cells []cell) []int {
	idx := make([]int, len(cells))
	for i := range idx {
		idx[i] = i
	}
	load := func(i int) float64 { return cells[i].rate * float64(cells[i].cnt.limit.Limit) / float64(cells[i].hits) }
	slices.SortStableFunc(idx, func(a, b int) int {
		la, lb := load(a), load(b)
		switch {
		case la > lb:
			return -1
		case la < lb:
			return 1
		}
		return 0
	})
	out := make([]int, 0, len(idx))
	for lo, hi := 0, len(idx)-1; lo <= hi; lo, hi = lo+1, hi-1 {
		out = append(out, idx[lo])
		if lo != hi {
			out = append(out, idx[hi])
		}
	}
	return out
}

// simulateCell plays a cell's runs on the virtual clock.
func simulateCell(cl cell, byPhase bool) []row {
	w := cl.cnt.limit.WindowMs()
	start := (1_700_000_000_000/w + 1) * w
	var rows []row
	for _, r := range cl.runs {
		arr := cl.arrivals(r, start)
		var v verdict
		if len(arr) > 0 {
			v = judge(simulate(cl.cnt, arr), cl.cnt.limit.Limit, w, arr[0].at+2*w)
		} else {
			v = verdict{steadyMin: -1}
		}
		rows = addRun(rows, cl, r, v, byPhase)
	}
	return rows
}

// addRun adds run r's verdict to rows: a row of its own with byPhase, else
// merged into the cell's one row.
func addRun(rows []row, cl cell, r runSpec, v verdict, byPhase bool) []row {
	if byPhase || len(rows) == 0 {
		label := cl.shape
		if byPhase {
			label = cl.runName(r)
		}
		return append(rows, row{cell: cl, label: label, v: v})
	}
	rows[0].merge(v)
	return rows
}

// figures are a row's summary figures.
type figures struct {
	denyShare, admitShare float64
	ratio                 float64 // steady admitted / exact log's; -1 if the log admitted none
	p50, p999, max        float64
}

func (r row) figures() figures {
	f := figures{ratio: -1}
	if n := float64(r.v.decisions); n > 0 {
		f.denyShare = float64(r.v.badDeny) / n
		f.admitShare = float64(r.v.badAdmit) / n
	}
	if r.v.logSteady > 0 {
		f.ratio = float64(r.v.steady) / float64(r.v.logSteady)
	}
	if len(r.v.ratios) > 0 {
		s := slices.Clone(r.v.ratios)
		slices.Sort(s)
		f.p50, f.p999, f.max = s[len(s)/2], s[len(s)*999/1000], s[len(s)-1]
	}
	return f
}

// cellName names a row's cell for the summary.
func (r row) cellName() string {
	l := r.cell.cnt.limit
	return fmt.Sprintf("%d per %s, %s %gx", l.Limit, fmtWindow(l.Window), r.label, r.cell.rate)
}

// report prints the rows as a Markdown table and the worst figures.
func report(out io.Writer, rows []row) {
	fmt.Fprintln(out, "| limit | window | arrivals | rate | hits/req | decisions | unjustified denials | unjustified admissions | steady vs exact log | p50 | p99.9 | max | steady min |")
	fmt.Fprintln(out, "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	type worst struct {
		x    float64
		name string
	}
	deny, admit, maxW := worst{-1, ""}, worst{-1, ""}, worst{-1, ""}
	ratio, steadyMin := worst{2, ""}, worst{2, ""}
	var lag int64
	var fb uint64
	retried := 0
	for _, r := range rows {
		f := r.figures()
		lag = max(lag, r.lag)
		fb += r.fallback
		retried += r.retried
		if f.denyShare > deny.x {
			deny = worst{f.denyShare, r.cellName()}
		}
		if f.admitShare > admit.x {
			admit = worst{f.admitShare, r.cellName()}
		}
		if f.max > maxW.x {
			maxW = worst{f.max, r.cellName()}
		}
		ratioS, minS := "-", "-"
		if f.ratio >= 0 {
			ratioS = fmt.Sprintf("%.4f", f.ratio)
			if r.cell.rate >= 2 && f.ratio < ratio.x {
				ratio = worst{f.ratio, r.cellName()}
			}
		}
		if r.v.steadyMin >= 0 && r.cell.shape != shapeOnOff {
			minS = fmt.Sprintf("%.3f", r.v.steadyMin)
			if r.cell.rate >= 2 && r.v.steadyMin < steadyMin.x {
				steadyMin = worst{r.v.steadyMin, r.cellName()}
			}
		}
		label := r.label
		if r.fallback > 0 {
			label += fmt.Sprintf(" (%d by the fallback)", r.fallback)
		}
		l := r.cell.cnt.limit
		fmt.Fprintf(out, "| %d | %s | %s | %gx | %d | %d | %s | %s | %s | %.3f | %.3f | %.3f | %s |\n",
			l.Limit, fmtWindow(l.Window), label, r.cell.rate, r.cell.hits, r.v.decisions,
			share(r.v.badDeny, r.v.decisions), share(r.v.badAdmit, r.v.decisions), ratioS, f.p50, f.p999, f.max, minS)
	}
	fmt.Fprintf(out, "\nworst: unjustified denials %s; unjustified admissions %s; trailing max %s",
		worstShare(deny.x, deny.name), worstShare(admit.x, admit.name), worstFig(maxW.x, maxW.name, 3))
	if ratio.name != "" {
		fmt.Fprintf(out, "; steady vs exact log at 2x and more %s", worstFig(ratio.x, ratio.name, 4))
	}
	if steadyMin.name != "" {
		fmt.Fprintf(out, "; steady min at 2x and more (not on/off) %s", worstFig(steadyMin.x, steadyMin.name, 3))
	}
	if lag > 0 {
		fmt.Fprintf(out, "; requests went out up to %d ms late", lag)
	}
	if retried > 0 {
		fmt.Fprintf(out, "; %d runs dropped and run again on fresh keys (requests more than W/10 late, or a request that failed)", retried)
	}
	if fb > 0 {
		fmt.Fprintf(out, "; %d decisions were made by the node's in-memory fallback (its store answered later than --store-timeout)", fb)
	}
	fmt.Fprintln(out)
}

// summarize prints one row per limit and window: the worst of its rows.
func summarize(out io.Writer, rows []row) {
	fmt.Fprintln(out, "| limit | window | decisions | unjustified denials at 0.5x | at 0.9x | at 2x and more | unjustified admissions | steady vs exact log at 2x and more, least | trailing max |")
	fmt.Fprintln(out, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	type group struct {
		l                           window.Limit
		decisions                   int
		deny05, deny09, denyHi, adm float64
		ratio, max                  float64
	}
	var groups []*group
	for _, r := range rows {
		l := r.cell.cnt.limit
		if len(groups) == 0 || groups[len(groups)-1].l != l {
			groups = append(groups, &group{l: l, ratio: -1})
		}
		g, f := groups[len(groups)-1], r.figures()
		g.decisions += r.v.decisions
		switch {
		case r.cell.rate <= 0.5:
			g.deny05 = max(g.deny05, f.denyShare)
		case r.cell.rate <= 0.9:
			g.deny09 = max(g.deny09, f.denyShare)
		case r.cell.rate >= 2:
			g.denyHi = max(g.denyHi, f.denyShare)
			if f.ratio >= 0 && (g.ratio < 0 || f.ratio < g.ratio) {
				g.ratio = f.ratio
			}
		}
		g.adm = max(g.adm, f.admitShare)
		g.max = max(g.max, f.max)
	}
	p := func(x float64) string {
		if x == 0 {
			return "0"
		}
		return pct(x)
	}
	for _, g := range groups {
		ratio := "-"
		if g.ratio >= 0 {
			ratio = fmt.Sprintf("%.4f", g.ratio)
		}
		fmt.Fprintf(out, "| %d | %s | %d | %s | %s | %s | %s | %s | %.3f |\n", g.l.Limit, fmtWindow(g.l.Window), g.decisions,
			p(g.deny05), p(g.deny09), p(g.denyHi), p(g.adm), ratio, g.max)
	}
}

// share formats n of total as a count and a percentage.
func share(n, total int) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", n, pct(float64(n)/float64(total)))
}

func pct(x float64) string {
	if x > 0 && x < 0.00001 {
		return "<0.001%"
	}
	return fmt.Sprintf("%.3f%%", 100*x)
}

func worstShare(x float64, name string) string {
	if x <= 0 {
		return "0"
	}
	return pct(x) + " (" + name + ")"
}

func worstFig(x float64, name string, prec int) string {
	if name == "" {
		return "-"
	}
	return strconv.FormatFloat(x, 'f', prec, 64) + " (" + name + ")"
}

// fmtWindow writes a window as 1s, 10s, 1h, 1h30m.
func fmtWindow(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func joinFloats(fs []float64) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(s, ", ")
}
