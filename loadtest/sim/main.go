// Command sim is a deterministic simulation of a multi-region rlcluster:
// a virtual clock and network (a one-way delay per region pair,
// partitions), each region one node with the real in-memory store
// (internal/region: the window math of internal/window and the max-merge of
// replicated totals) and the real burst guard (internal/guard), replicating
// every flush interval (20 ms) that has totals to send, with a heartbeat
// every 100 ms (rlnode's default) in between.
//
// For each scenario it prints, without and with the guard, the largest
// exact count admitted in any trailing window over the limit (max) and,
// for steady load, the smallest from two windows after the load began
// (min):
//
//   - burst: the limit's worth of requests released at the same instant
//     in every region;
//   - single: one region offered 10x the limit's rate, the others idle;
//   - all: every region offered 10x together;
//   - partition: every region at 10x, region 0 cut off for two windows
//     (also on the strict counter, which never errs in one region);
//   - zipf: Poisson requests over many keys with Zipf popularity.
//
// Usage:
//
//	go run ./loadtest/sim              # 3 and 10 regions, 60 and 100 ms, 1e4 keys
//	go run ./loadtest/sim -keys 1000000 -requests 5000000
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	keys := flag.Int("keys", 10000, "keys of the zipf scenario")
	even := flag.String("even", "", "run only three regions 60 ms apart offered 10x this limit evenly for 12 windows (LIMIT/WINDOW, e.g. 10/1s), and print per-region admissions and the trailing window at admissions")
	lead := flag.Duration("lead", 0, "with -even, start the load of the second and third regions this much after the first's")
	nodes := flag.Int("nodes", 1, "with -even, nodes per region (1 to 10)")
	others := flag.Float64("others", 0, "with -even, offer the first region 10x the limit alone and the second and third this many times the limit's rate each (0: a third of 10x each)")
	reqs := flag.Int("requests", 200000, "requests of the zipf scenario")
	n := flag.Int("search", 0, "run this many random fault schedules instead of the scenarios, and print the worst per class")
	from := flag.Uint64("seed", 1, "the first seed of -search")
	procs := flag.Int("procs", runtime.GOMAXPROCS(0), "schedules of -search run at once")
	list := flag.Bool("list", false, "with -search, also list every schedule that went over its bound")
	restarts := flag.Bool("restarts", false, "with -search, run only the schedules (of the -search seeds) that have store restarts")
	members := flag.Bool("members", false, "with -search, run only the schedules (of the -search seeds) that have nodes joining or leaving")
	fallbacks := flag.Bool("fallbacks", false, "with -search, run only the schedules (of the -search seeds) that have nodes on their fallbacks")
	jitter := flag.Bool("jitter", false, "with -search, run only the schedules (of the -search seeds) that have message jitter")
	margin := flag.Duration("margin", 0, "with -search or -even, the burst guard's margin, added to every horizon as rlnode's --burst-guard-margin is (20ms by default there; 0, the least an operator may set and the hardest case for the bounds)")
	flag.Parse()
	if *margin < 0 {
		fmt.Fprintln(os.Stderr, "sim: -margin: want 0 or more")
		os.Exit(2)
	}
	if *even != "" {
		if err := printEven(os.Stdout, *even, evenOpts{Lead: *lead, Nodes: *nodes, Others: *others, Margin: *margin}); err != nil {
			fmt.Fprintln(os.Stderr, "sim:", err)
			os.Exit(2)
		}
		return
	}
	if *n > 0 {
		prep := func(s *schedule) bool {
			s.Margin = *margin
			return (!*restarts || len(s.Restarts) > 0) && (!*members || len(s.Members) > 0) && (!*fallbacks || len(s.Fallbacks) > 0) && (!*jitter || s.Jitter > 0)
		}
		printSearch(os.Stdout, *from, *n, *procs, *list, prep)
		return
	}
	table(os.Stdout, scenarios(*keys, *reqs))
}

// evenOpts are printEven's options (the -even flags).
type evenOpts struct {
	// Lead starts the second and third regions' load this much after the
	// first's.
	Lead time.Duration
	// Nodes is the nodes per region (1 to 10).
	Nodes int
	// Others, when positive, offers the first region 10x the limit alone
	// and the second and third Others times the limit's rate each: one
	// busy region beside two lighter ones, rather than even load.
	Others float64
	// Margin is the guard's margin (config.Margin).
	Margin time.Duration
}

// printEven runs evenScenario at the limit spec gives (LIMIT/WINDOW) with
// o, and prints what it admitted per region, from the third window on and
// window by window, and the trailing window at its admissions from the
// third window on.
func printEven(w io.Writer, spec string, o evenOpts) error {
	ls, ws, ok := strings.Cut(spec, "/")
	lim, err := strconv.ParseUint(ls, 10, 64)
	if !ok || err != nil || lim == 0 {
		return fmt.Errorf("-even %q: want LIMIT/WINDOW, such as 10/1s", spec)
	}
	win, err := time.ParseDuration(ws)
	if err != nil || win < time.Millisecond {
		return fmt.Errorf("-even %q: bad window: want a duration of 1ms or more, such as 1s", spec)
	}
	if o.Lead < 0 {
		return fmt.Errorf("-lead %v: want 0 or more", o.Lead)
	}
	if o.Nodes < 1 || o.Nodes > 10 {
		return fmt.Errorf("-nodes %d: want 1 to 10", o.Nodes)
	}
	if o.Others < 0 || o.Others > 10 {
		return fmt.Errorf("-others %v: want 0 to 10", o.Others)
	}
	sc := evenScenario(60*time.Millisecond, lim)
	sc.Window = win
	sc.Nodes = o.Nodes
	sc.Margin = o.Margin
	sc.run = steadyLead(10, 12, o.Lead, 0, 1, 2)
	if o.Others > 0 {
		sc.run = busyBeside(o.Others, o.Lead)
	}
	wd, st := runWorld(sc, true)
	fmt.Fprintf(w, "three regions 60 ms apart")
	if o.Nodes > 1 {
		fmt.Fprintf(w, " of %d nodes each", o.Nodes)
	}
	if o.Others > 0 {
		fmt.Fprintf(w, ", the first offered 10x a limit of %d per %v and the second and third %gx each, evenly", lim, win, o.Others)
	} else {
		fmt.Fprintf(w, " offered 10x a limit of %d per %v in all, a third each, evenly", lim, win)
	}
	if o.Lead > 0 {
		fmt.Fprintf(w, ", the second and third from %v after the first", o.Lead)
	}
	fmt.Fprintf(w, "; from the third window on:\n")
	fmt.Fprintf(w, "admitted per region %v (largest over smallest less 1: %.2f)\n", st.PerRegion, st.Spread())
	fmt.Fprintf(w, "per window %v\n", wd.perWindow("k", 12))
	fmt.Fprintf(w, "trailing window at admissions: median %.3f, p99.9 %.3f, max %.3f, steady min %.3f of the limit\n", st.Median, st.P999, st.Max, st.SteadyMin)
	return nil
}

// scenarios returns the table's rows: each scenario for 3 and 10 regions
// at 60 and 100 ms one-way.
func scenarios(keys, reqs int) []scenario {
	var out []scenario
	for _, rd := range []struct {
		r int
		d time.Duration
	}{{3, 60 * time.Millisecond}, {10, 100 * time.Millisecond}} {
		add := func(name string, w time.Duration, lim uint64, run func(*world) int64) {
			out = append(out, scenario{Name: name, Regions: rd.r, Delay: rd.d, Window: w, Limit: lim, run: run})
		}
		add("burst", 10*time.Second, 100, burst)
		add("burst", 10*time.Second, 1000, burst)
		add("single 10x", 10*time.Second, 100, steady(10, 5, 0))
		add("single 10x", time.Second, 100, steady(10, 5, 0))
		add("single 10x", 60*time.Second, 1000, steady(10, 5, 0))
		add("all 10x", 10*time.Second, 100, steady(10, 5, seq(rd.r)...))
		add("all 10x", time.Second, 100, steady(10, 5, seq(rd.r)...))
		add("partition", 10*time.Second, 100, partition)
		add(fmt.Sprintf("zipf %d keys", keys), 10*time.Second, 100, zipf(reqs, keys))
	}
	return out
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// table runs every scenario and prints one row each.
func table(w io.Writer, scs []scenario) []result {
	fmt.Fprintf(w, "| scenario | regions | one-way | limit/window | max off | max on | steady min off | steady min on | guard denials | guard reads per request |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	var out []result
	for _, sc := range scs {
		r := runScenario(sc)
		out = append(out, r)
		fmt.Fprintf(w, "| %s | %d | %v | %d/%v | %.3f | %.3f | %s | %s | %d | %.3f |\n", sc.Name, sc.Regions, sc.Delay, sc.Limit, sc.Window,
			r.Off.Max, r.On.Max, fmtMin(r.Off.SteadyMin), fmtMin(r.On.SteadyMin), r.On.GuardDeny, float64(r.On.GuardReads)/float64(max(r.On.Offered, 1)))
	}
	return out
}

func fmtMin(f float64) string {
	if f != f {
		return "-"
	}
	return fmt.Sprintf("%.3f", f)
}

// printSearch runs the fault schedules of the n seeds from from that keep
// accepts, procs at once, and prints one row per class: runs, how many
// broke the bound, the worst over the bound and the false denials; then
// the false denials by cause; with list, then every schedule over its
// bound.
func printSearch(w io.Writer, from uint64, n, procs int, list bool, prep func(*schedule) bool) {
	fmt.Fprintf(w, "| class | schedules | over the bound | worst / bound | worst seed | false denials under the limit | calm requests denied (exact log) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	rows, over := searchTable(from, n, procs, prep)
	pct := func(a, b int) float64 { return 100 * float64(a) / float64(max(b, 1)) }
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %d | %.3f | %d | %.2f%% | %.2f%% (%.2f%%) |\n", r.Class, r.Runs, r.Broken, r.Worst, r.Seed,
			pct(r.FalseDenied, r.Under), pct(r.CalmDenied, r.Calm), pct(r.CalmLogDenied, r.Calm))
	}
	fmt.Fprintf(w, "\nfalse denials under the limit by cause, as shares of the requests under the limit:\n\n| class | all |")
	for _, n := range causeNames {
		fmt.Fprintf(w, " %s |", n)
	}
	fmt.Fprintf(w, "\n| --- |%s\n", strings.Repeat(" ---: |", 1+len(causeNames)))
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.2f%% |", r.Class, pct(r.FalseDenied, r.Under))
		for _, n := range r.FalseBy {
			fmt.Fprintf(w, " %.2f%% |", pct(n, r.Under))
		}
		fmt.Fprintln(w)
	}
	if list {
		fmt.Fprintf(w, "\nover the bound:\n")
		for _, o := range over {
			fmt.Fprintf(w, "%d\t%.3f\t%s\n", o.Seed, o.Worst, o.Class)
		}
	}
}
