// Command accuracy measures how closely a rate limit holds in every trailing
// window: for each scenario it computes, from the log of decisions, the exact
// count admitted in the window (t-W, t] that ends at every admission t, as a
// share of the limit, and prints p50, p99.9, max and the steady-state minimum
// (over the admissions from 2W after the load began) as a table.
//
// Scenarios: a fresh key offered 1x, 2x and 10x the limit's rate, evenly
// spaced or Poisson, starting cold at phases 0.1 to 0.9 of a bucket; and
// on/off bursts at 10x (bursts of W/10 to W/2, quiet gaps of 0 to 2W).
//
// By default it simulates on a virtual clock with the real decision code of
// internal/window; -mode picks the counter: default (half-buckets weighted
// over their hits' span, the API's default), strict (the same state, a half
// counted whole while any of its hits is in the window), two-bucket (the
// seeds' formula), subbuckets (K evenly weighted sub-buckets, -k, for
// comparison) or log (an exact sliding log, the reference). With -node it
// drives a running rlnode over its Connect JSON API instead, at the
// scenarios' wall-clock instants (constant arrivals only), asking for the
// mode's algorithm (default, strict or two-bucket), and takes each
// admission's instant from the node's answer (its bucket and elapsedMs), so
// the trailing-window counts are exact on the node's clock.
//
// Usage:
//
//	go run ./loadtest/accuracy [-mode default] [-k 100] [-limit 1000] [-window 4s] [-rates 1,2,10] [-arrivals constant,poisson] [-phases 0.1,...,0.9] [-onoff 5] [-windows 6]
//	go run ./loadtest/accuracy -node http://127.0.0.1:8080 -mode strict -rates 10 -windows 4
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
	"github.com/rlcluster/rlcluster/loadtest/internal/command"
)

func main() { command.Main("accuracy", run) }

// config is the command's flags.
type config struct {
	mode     string
	k        int64
	limit    uint64
	window   time.Duration
	rates    []float64
	arrivals []string
	phases   []float64
	onOff    int
	windows  int
	node     string
	workers  int
	retries  int
}

func parse(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("accuracy", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.mode, "mode", "default", "counter: default, strict, two-bucket, subbuckets or log (exact sliding log)")
	fs.Int64Var(&c.k, "k", 0, "sub-buckets per window for -mode subbuckets (0: 100, or the most up to 100 that split the window into whole ms)")
	fs.Uint64Var(&c.limit, "limit", 1000, "the limit, per window")
	fs.DurationVar(&c.window, "window", 4*time.Second, "the window")
	rates := fs.String("rates", "1,2,10", "offered rates of the cold starts, times the limit's rate")
	arrivals := fs.String("arrivals", "constant,poisson", "arrivals of the cold starts: constant, poisson, bunched (constant, released in clumps 100-350 ms apart), comma-separated")
	phases := fs.String("phases", "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9", "phases of the bucket at which the cold starts begin")
	fs.IntVar(&c.onOff, "onoff", 5, "on/off burst runs (seeds), each 4x -windows long")
	fs.IntVar(&c.windows, "windows", 6, "length of each cold start, in windows")
	fs.StringVar(&c.node, "node", "", "base URL of a running rlnode to drive instead of simulating (e.g. http://127.0.0.1:8080)")
	fs.IntVar(&c.workers, "workers", 64, "concurrent requests in flight against -node")
	fs.IntVar(&c.retries, "retries", 0, "against -node, run a scenario again (on a fresh key) up to this many times when its requests went out more than W/10 behind their schedule, as on a busy machine")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.rates, err = floats(*rates); err != nil {
		return c, fmt.Errorf("parse -rates: %w", err)
	}
	if c.phases, err = floats(*phases); err != nil {
		return c, fmt.Errorf("parse -phases: %w", err)
	}
	for _, a := range strings.Split(*arrivals, ",") {
		if a != "constant" && a != "poisson" && a != "bunched" {
			return c, fmt.Errorf("parse -arrivals: %q is not constant, poisson or bunched", a)
		}
		c.arrivals = append(c.arrivals, a)
	}
	if c.node != "" && (c.mode == "subbuckets" || c.mode == "log") {
		return c, fmt.Errorf("parse -mode: a node runs default, strict or two-bucket, not %s", c.mode)
	}
	if c.node != "" && (len(c.arrivals) != 1 || c.arrivals[0] != "constant") {
		c.arrivals = []string{"constant"}
	}
	if c.windows < 3 {
		return c, errors.New("parse -windows: at least 3, so that a steady state follows the cold start")
	}
	return c, nil
}

func floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || x <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, x)
	}
	return out, nil
}

// counter is what a mode decides with.
type counter struct {
	mode  string
	limit window.Limit   // default, strict, two-bucket, log
	sub   window.Sliding // subbuckets
}

// counter returns the counter the mode simulates.
func (c config) counter() (counter, error) {
	l := window.Limit{Limit: c.limit, Window: c.window}
	out := counter{mode: c.mode}
	switch c.mode {
	case "default", "log":
	case "strict":
		l.Strict = true
	case "two-bucket":
		l.Algorithm = window.SlidingWindowTwoBucket
	case "subbuckets":
		out.sub = window.DefaultSliding(l)
		if c.k != 0 {
			out.sub.K = c.k
		}
		if err := out.sub.Validate(); err != nil {
			return out, fmt.Errorf("counter for -mode %s -k %d: %w", c.mode, c.k, err)
		}
	default:
		return out, fmt.Errorf("unknown -mode %q (want default, strict, two-bucket, subbuckets or log)", c.mode)
	}
	if err := l.Validate(); err != nil {
		return out, fmt.Errorf("counter for -mode %s: %w", c.mode, err)
	}
	out.limit = l
	return out, nil
}

// row is one scenario's result.
type row struct {
	sc  scenario
	st  stats
	lag int64 // against a node: the latest request's delay, ms
	// against a node: its decisions made by the in-memory fallback during
	// the scenario (Redis slower than the node's store timeout)
	fallback uint64
	retried  int // against a node: runs dropped for late requests
}

func run(ctx context.Context, args []string, out io.Writer) error {
	c, err := parse(args, out)
	if err != nil {
		return err
	}
	s, err := c.counter()
	if err != nil {
		return err
	}
	rows, err := measure(ctx, c, s)
	if err != nil {
		return err
	}
	what := "mode " + c.mode
	switch {
	case c.mode == "subbuckets":
		what = fmt.Sprintf("mode subbuckets (K=%d, sub-buckets of %d ms)", s.sub.K, s.sub.SubMs())
	case c.node != "":
		what = fmt.Sprintf("node %s, mode %s", c.node, c.mode)
	case c.mode == "log":
		what = "exact sliding log"
	}
	fmt.Fprintf(out, "%s; limit %d per %v; trailing-window count at each admission / limit\n\n", what, c.limit, c.window)
	report(out, rows)
	return nil
}

// measure runs every scenario, simulated or against the node.
func measure(ctx context.Context, c config, s counter) ([]row, error) {
	onOff := c.onOff
	if c.node != "" {
		onOff = 0
	}
	var client *http.Client
	if c.node != "" {
		client = &http.Client{
			Timeout:   5 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: c.workers, MaxConnsPerHost: c.workers},
		}
	}
	var rows []row
	runID := time.Now().UnixNano()
	for i, sc := range scenarios(c.rates, c.phases, c.arrivals, onOff) {
		var admitted []int64
		var from, lag int64
		var fb uint64
		retried := 0
		if c.node != "" {
			before, err := fallbacks(ctx, client, c.node)
			if err != nil {
				return nil, fmt.Errorf("scenario %s: %w", sc.name, err)
			}
			for try := 0; ; try++ {
				key := fmt.Sprintf("accuracy-%d-%d-%d", runID, i, try)
				admitted, from, lag, err = nodeRun(ctx, client, c.node, s.limit, sc, c.windows, c.workers, key)
				if err == nil || !errors.Is(err, errLate) || try >= c.retries {
					break
				}
				retried++
				if before, err = fallbacks(ctx, client, c.node); err != nil {
					break
				}
			}
			if err != nil {
				return nil, fmt.Errorf("scenario %s: %w", sc.name, err)
			}
			after, err := fallbacks(ctx, client, c.node)
			if err != nil {
				return nil, fmt.Errorf("scenario %s: %w", sc.name, err)
			}
			fb = after - min(before, after)
		} else {
			admitted, from = simulate(s, sc, c.windows)
		}
		steadyFrom := from + 2*s.limit.WindowMs()
		if sc.onOff {
			steadyFrom = 1 << 62 // bursts have no steady state
		}
		rows = append(rows, row{sc: sc, st: trailing(admitted, c.window, c.limit, steadyFrom), lag: lag, fallback: fb, retried: retried})
	}
	return rows, nil
}

// report prints the rows as a Markdown table and the worst figures.
func report(out io.Writer, rows []row) {
	fmt.Fprintln(out, "| scenario | admitted | p50 | p99.9 | max | steady min |")
	fmt.Fprintln(out, "| --- | ---: | ---: | ---: | ---: | ---: |")
	worst, constMin, poissonMin := 0.0, 2.0, 2.0
	var lag int64
	var fb uint64
	retried := 0
	for _, r := range rows {
		lag = max(lag, r.lag)
		fb += r.fallback
		retried += r.retried
		m := "-"
		if r.st.steadyMin >= 0 {
			m = fmt.Sprintf("%.3f", r.st.steadyMin)
			if r.sc.rate > 1 && !r.sc.onOff && !r.sc.bunched {
				if r.sc.poisson {
					poissonMin = min(poissonMin, r.st.steadyMin)
				} else {
					constMin = min(constMin, r.st.steadyMin)
				}
			}
		}
		worst = max(worst, r.st.max)
		name := r.sc.name
		if r.fallback > 0 {
			name += fmt.Sprintf(" (%d decided by the fallback)", r.fallback)
		}
		fmt.Fprintf(out, "| %s | %d | %.3f | %.3f | %.3f | %s |\n", name, r.st.admitted, r.st.p50, r.st.p999, r.st.max, m)
	}
	fmt.Fprintf(out, "\nworst max %.3f", worst)
	if constMin <= 1 {
		fmt.Fprintf(out, "; steady min at 2x and more: %.3f (constant)", constMin)
	}
	if poissonMin <= 1 {
		fmt.Fprintf(out, ", %.3f (Poisson)", poissonMin)
	}
	if lag > 0 {
		fmt.Fprintf(out, "; requests went out up to %d ms late", lag)
	}
	if retried > 0 {
		fmt.Fprintf(out, "; %d runs of scenarios dropped and run again for requests more than W/10 late", retried)
	}
	if fb > 0 {
		fmt.Fprintf(out, "; %d decisions were made by the node's in-memory fallback (its store answered later than --store-timeout)", fb)
	}
	fmt.Fprintln(out)
}
