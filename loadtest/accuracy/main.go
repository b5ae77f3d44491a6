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
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
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
