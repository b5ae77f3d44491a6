// Command partition runs a region cut-off against a running multi-region
// cluster (the Docker demo in deploy/multiregion) and measures what the
// global limit and the regions' agreement did through it.
//
// It offers one key Factor times its global limit's rate (10x a limit of
// 1000 per 10 s by default, the default sliding window, global scope),
// spread evenly over every node of every region, as clients in those
// regions would (open loop, Connect over HTTP/1.1, no retries). Once the
// load has run for at least -min-pre and a bucket is -cut-phase into its
// window, it runs -cut-cmd (which must cut a region off from the others
// while its own clients still reach it), runs -heal-cmd -cut-for later, and
// keeps the load on for -after. Every admission is recorded with the
// client's clock; one node per region is asked (Peek) every -poll for its
// region's per-region counts of the previous bucket.
//
// It prints the largest count in any trailing window (t-W, t] over the
// whole cluster, as a multiple of the limit, before the cut (with the
// steady-state minimum from two windows after the load began), during the
// cut and after the heal, with each region's share of the worst window; and
// how long after the heal the regions agreed on the bucket that closed
// during the cut, and how long after its end on the bucket that was open at
// the heal. It fails when a window holds more than -bound (1 + 1/R) x the
// limit, when the regions do not agree within two flush intervals plus the
// one-way delay (for a bucket that closes after the heal, plus the
// reconciliation's grace), or when the cut did not show: a region that
// admitted nothing during it, or regions that agreed on the cut's bucket
// before the heal.
//
// Usage (deploy/multiregion/e2e.sh runs it against the demo's published
// ports with deploy/multiregion/wancut.sh as the cut):
//
//	go run ./loadtest/partition -targets 'us=http://127.0.0.1:8111|http://127.0.0.1:8112;eu=...;ap=...' \
//	    -cut-cmd 'deploy/multiregion/wancut.sh cut ap' -heal-cmd 'deploy/multiregion/wancut.sh heal ap'
package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/loadtest/internal/command"
)

func main() {
	command.Main("partition", run)
}

// config is the run's configuration, from flags.
type config struct {
	Targets   []region
	Key       string
	Limit     uint64
	Window    time.Duration
	Factor    float64
	Workers   int
	MinPre    time.Duration
	CutPhase  float64
	CutFor    time.Duration
	After     time.Duration
	CutCmd    string
	HealCmd   string
	Arm       time.Duration
	Cut       string // the region cut off, for the report
	Flush     time.Duration
	Grace     time.Duration
	OneWay    time.Duration
	Bound     float64
	Poll      time.Duration
	Out       string
	ReqTimout time.Duration
}

// region is one region's name and its nodes' base URLs.
type region struct {
	Name  string
	Nodes []string
}

// parseTargets reads "us=http://a|http://b;eu=http://c".
func parseTargets(s string) ([]region, error) {
	var out []region
	for part := range strings.SplitSeq(s, ";") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		name, urls, ok := strings.Cut(part, "=")
		if !ok || name == "" || urls == "" {
			return nil, fmt.Errorf("target %q: want region=url|url", part)
		}
		out = append(out, region{Name: name, Nodes: strings.Split(urls, "|")})
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("targets %q: want at least two regions", s)
	}
	return out, nil
}

func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("partition", flag.ContinueOnError)
	fs.SetOutput(out)
	var c config
	targets := fs.String("targets", "us=http://127.0.0.1:8111|http://127.0.0.1:8112;eu=http://127.0.0.1:8121|http://127.0.0.1:8122;ap=http://127.0.0.1:8131|http://127.0.0.1:8132", "regions and their nodes: region=url|url;...")
	fs.StringVar(&c.Key, "key", fmt.Sprintf("partition-%d", time.Now().Unix()), "the key")
	fs.Uint64Var(&c.Limit, "limit", 1000, "the global limit per window")
	fs.DurationVar(&c.Window, "window", 10*time.Second, "the window")
	fs.Float64Var(&c.Factor, "factor", 10, "offered load as a multiple of limit/window, over all regions")
	fs.IntVar(&c.Workers, "workers", 16, "concurrent requests per node at most")
	fs.DurationVar(&c.MinPre, "min-pre", 20*time.Second, "load before the cut, at least")
	fs.Float64Var(&c.CutPhase, "cut-phase", 0.2, "where in a bucket the cut starts, 0 to 1")
	fs.DurationVar(&c.CutFor, "cut-for", 15*time.Second, "how long the cut lasts")
	fs.DurationVar(&c.After, "after", 14*time.Second, "load after the heal (at least a window)")
	fs.StringVar(&c.CutCmd, "cut-cmd", "", "shell command that cuts a region off (a line \"applied at <unix ns>\" in its output says when)")
	fs.StringVar(&c.HealCmd, "heal-cmd", "", "shell command that heals the cut (a line \"applied at <unix ns>\" in its output says when)")
	fs.DurationVar(&c.Arm, "arm", 0, "start each command this long before its instant and write a line to its standard input at the instant (0: start it then)")
	fs.StringVar(&c.Cut, "cut", "ap", "the region the cut isolates (for the report)")
	fs.DurationVar(&c.Flush, "flush", 50*time.Millisecond, "the nodes' flush interval")
	fs.DurationVar(&c.Grace, "grace", 50*time.Millisecond, "the nodes' reconciliation grace after a bucket closes")
	fs.DurationVar(&c.OneWay, "one-way", 60*time.Millisecond, "the one-way delay between regions")
	fs.Float64Var(&c.Bound, "bound", 0, "largest trailing window allowed, x limit (0: 1 + 1/regions)")
	fs.DurationVar(&c.Poll, "poll", 20*time.Millisecond, "how often every region is asked for its counts")
	fs.StringVar(&c.Out, "out", "", "directory for admissions.csv and views.csv (optional)")
	fs.DurationVar(&c.ReqTimout, "request-timeout", 2*time.Second, "timeout of one request")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.Targets, err = parseTargets(*targets); err != nil {
		return c, err
	}
	switch {
	case c.CutCmd == "" || c.HealCmd == "":
		return c, errors.New("-cut-cmd and -heal-cmd are required")
	case c.Limit == 0 || c.Window < time.Second || c.Factor <= 0 || c.Workers < 1:
		return c, errors.New("-limit, -factor and -workers must be positive, -window at least 1s")
	case c.CutPhase < 0 || c.CutPhase >= 1:
		return c, errors.New("-cut-phase: want 0 to 1")
	case c.After < c.Window:
		return c, fmt.Errorf("-after %v: want at least a window (%v)", c.After, c.Window)
	case c.Factor*float64(c.Limit)*(c.MinPre+c.CutFor+c.After+2*c.Window).Seconds()/c.Window.Seconds() > 5e6:
		return c, errors.New("the run would offer more than 5,000,000 requests")
	}
	if c.Bound == 0 {
		c.Bound = 1 + 1/float64(len(c.Targets))
	}
	return c, nil
}

// timeline is when the run's events happened, on the client's clock.
type timeline struct {
	Start, CutStart, CutDone, HealStart, HealDone, End time.Time
}

// cutTime is the first instant at or after t that is phase into a bucket
// of window w (buckets are aligned to the Unix epoch).
func cutTime(t time.Time, w time.Duration, phase float64) time.Time {
	b := t.UnixNano() / int64(w)
	at := time.Unix(0, b*int64(w)+int64(phase*float64(w)))
	if at.Before(t) {
		at = at.Add(w)
	}
	return at
}

func run(ctx context.Context, args []string, out io.Writer) error {
	c, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	now := time.Now()
	tl := timeline{Start: now}
	cutAt := cutTime(now.Add(c.MinPre), c.Window, c.CutPhase)
	healAt := cutAt.Add(c.CutFor)
	// The load runs -after past the heal, and until the bucket open at
	// the heal has closed and had time to be agreed on.
	endAfter := func(heal time.Time) time.Time {
		return maxTime(heal.Add(c.After), cutTime(heal, c.Window, 0).Add(2*time.Second))
	}
	ld := newLoad(c)
	ld.setEnd(endAfter(healAt))
	ctx, cancel := context.WithDeadline(ctx, ld.endTime().Add(30*time.Second))
	defer cancel()
	fmt.Fprintf(out, "partition: key %s, limit %d per %v, %.0fx over %d regions; cut %s off at %s for %v, load until about %s\n",
		c.Key, c.Limit, c.Window, c.Factor, len(c.Targets), c.Cut, cutAt.Format("15:04:05.000"), c.CutFor, ld.endTime().Format("15:04:05.000"))

	var wg sync.WaitGroup
	wg.Go(func() { ld.offer(ctx, now) })
	var views [][]View
	wg.Go(func() { views = ld.poll(ctx, now.Add(c.Window)) })

	var cmdErr error
	cut, err := runAt(ctx, c.CutCmd, cutAt, c.Arm, out)
	if err == nil || !cut.Applied.IsZero() {
		cmdErr = err
		tl.CutStart, tl.CutDone = cut.Applied, cut.Done
		fmt.Fprintf(out, "partition: cut between %s and %s\n", cut.Applied.Format("15:04:05.000"), cut.Done.Format("15:04:05.000"))
		// Heal even when the cut command failed: it may have half-cut.
		if ctx.Err() != nil {
			ctx = context.WithoutCancel(ctx)
		}
		heal, err := runAt(ctx, c.HealCmd, maxTime(healAt, time.Now().Add(c.Arm)), c.Arm, out)
		cmdErr = errors.Join(cmdErr, err)
		tl.HealStart, tl.HealDone = heal.Applied, heal.Done
		ld.setEnd(endAfter(tl.HealStart))
		fmt.Fprintf(out, "partition: healed between %s and %s\n", heal.Applied.Format("15:04:05.000"), heal.Done.Format("15:04:05.000"))
	} else {
		cmdErr = err
	}
	wg.Wait()
	tl.End = time.Now()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if cmdErr != nil {
		return cmdErr
	}
	if c.Out != "" {
		if err := ld.write(c.Out, views); err != nil {
			return err
		}
	}
	return report(out, c, tl, ld, views)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sleepUntil waits until t or ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// change is when a cut or heal command made its change: between Applied
// and Done.
type change struct {
	Applied, Done time.Time
}

// runAt runs cmd with sh -c so that it makes its change at t, its output to
// out. With arm > 0 the command is started arm before t and a line is
// written to its standard input at t (it must make its change only then);
// else it is started at t. Lines "applied at <unix ns>" and "done at <unix
// ns>" in its output bound when it made the change; by default the change
// is bounded by the line written (or the start) and the command's exit.
func runAt(ctx context.Context, cmd string, t time.Time, arm time.Duration, out io.Writer) (change, error) {
	if err := sleepUntil(ctx, t.Add(-arm)); err != nil {
		return change{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, arm+20*time.Second)
	defer cancel()
	x := exec.CommandContext(ctx, "sh", "-c", cmd)
	var buf bytes.Buffer
	x.Stdout, x.Stderr = io.MultiWriter(out, &buf), out
	var stdin io.WriteCloser
	if arm > 0 {
		var err error
		if stdin, err = x.StdinPipe(); err != nil {
			return change{}, fmt.Errorf("%s: %w", cmd, err)
		}
	}
	if err := x.Start(); err != nil {
		return change{}, fmt.Errorf("%s: %w", cmd, err)
	}
	var ch change
	if arm > 0 {
		if err := sleepUntil(ctx, t); err != nil {
			x.Wait()
			return change{}, err
		}
		ch.Applied = time.Now()
		_, err := io.WriteString(stdin, "go\n")
		stdin.Close()
		if err != nil {
			x.Wait()
			return change{}, fmt.Errorf("%s: arm: %w", cmd, err)
		}
	} else {
		ch.Applied = time.Now()
	}
	err := x.Wait()
	ch.Done = time.Now()
	if err != nil {
		return ch, fmt.Errorf("%s: %w", cmd, err)
	}
	for line := range strings.Lines(buf.String()) {
		for prefix, dst := range map[string]*time.Time{"applied at ": &ch.Applied, "done at ": &ch.Done} {
			if ns, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
				n, err := strconv.ParseInt(ns, 10, 64)
				if err != nil {
					return ch, fmt.Errorf("%s: bad %q: %w", cmd, line, err)
				}
				*dst = time.Unix(0, n)
			}
		}
	}
	return ch, nil
}

// load offers the requests and records the answers.
type load struct {
	c       config
	clients [][]ratelimitv1connect.RateLimitServiceClient // [region][node]
	mu      sync.Mutex
	adm     []Admission
	served  []int // decisions per region
	errs    []int // failed requests per region
	missed  []int // requests not sent: every worker of the node busy
	lastErr error
	lat     []time.Duration // every decision's round trip
	end     atomic.Int64    // unix ns: when the load stops
}

func (ld *load) setEnd(t time.Time) { ld.end.Store(t.UnixNano()) }
func (ld *load) endTime() time.Time { return time.Unix(0, ld.end.Load()) }
func (ld *load) over() bool         { return !time.Now().Before(ld.endTime()) }

func newLoad(c config) *load {
	n := len(c.Targets)
	ld := &load{c: c, served: make([]int, n), errs: make([]int, n), missed: make([]int, n)}
	for _, r := range c.Targets {
		hc := &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
			MaxIdleConnsPerHost: c.Workers + 2,
			IdleConnTimeout:     time.Minute,
		}}
		var cs []ratelimitv1connect.RateLimitServiceClient
		for _, u := range r.Nodes {
			cs = append(cs, ratelimitv1connect.NewRateLimitServiceClient(hc, u))
		}
		ld.clients = append(ld.clients, cs)
	}
	return ld
}

func (ld *load) limit() *ratelimitv1.Limit {
	return &ratelimitv1.Limit{Limit: ld.c.Limit, Window: durationpb.New(ld.c.Window)}
}

// offer sends requests to every node at an even rate from start until the
// end,
// at most Workers at once per node; a request whose turn comes while every
// worker of its node is busy is not sent (counted as missed).
func (ld *load) offer(ctx context.Context, start time.Time) {
	nodes := 0
	for _, r := range ld.c.Targets {
		nodes += len(r.Nodes)
	}
	perNode := ld.c.Factor * float64(ld.c.Limit) / ld.c.Window.Seconds() / float64(nodes)
	interval := time.Duration(float64(time.Second) / perNode)
	var wg sync.WaitGroup
	for ri := range ld.clients {
		for ni, cl := range ld.clients[ri] {
			jobs := make(chan struct{})
			for range ld.c.Workers {
				wg.Go(func() {
					for range jobs {
						ld.check(ctx, ri, cl)
					}
				})
			}
			// Stagger the nodes' schedules over one interval.
			offset := time.Duration(int64(interval) * int64(ri*len(ld.clients[ri])+ni) / int64(nodes))
			wg.Go(func() {
				defer close(jobs)
				for i := 0; ; i++ {
					at := start.Add(offset + time.Duration(i)*interval)
					if !at.Before(ld.endTime()) || sleepUntil(ctx, at) != nil {
						return
					}
					select {
					case jobs <- struct{}{}:
					default:
						ld.mu.Lock()
						ld.missed[ri]++
						ld.mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
}

// check sends one Check and records the answer.
func (ld *load) check(ctx context.Context, ri int, cl ratelimitv1connect.RateLimitServiceClient) {
	rctx, cancel := context.WithTimeout(ctx, ld.c.ReqTimout)
	defer cancel()
	sent := time.Now()
	res, err := cl.Check(rctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: ld.c.Key, Hits: 1, Limit: ld.limit()}))
	got := time.Now()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if err != nil {
		ld.errs[ri]++
		ld.lastErr = err
		return
	}
	ld.served[ri]++
	ld.lat = append(ld.lat, got.Sub(sent))
	if res.Msg.GetAllowed() {
		ld.adm = append(ld.adm, Admission{At: sent.Add(got.Sub(sent) / 2), Region: ri})
	}
}

// poll asks the first node of every region, every Poll from from until
// the load ends, for its store's counts of the key's previous bucket, each
// region on its own so that a slow one does not space out the others'
// reads. The Peeks name a limit far above the key's: a denial could be
// answered from the node's memory of an earlier one (its deny cache)
// instead of from the store.
func (ld *load) poll(ctx context.Context, from time.Time) [][]View {
	views := make([][]View, len(ld.clients))
	if sleepUntil(ctx, from) != nil {
		return views
	}
	var wg sync.WaitGroup
	for ri := range ld.clients {
		wg.Go(func() {
			tk := time.NewTicker(ld.c.Poll)
			defer tk.Stop()
			for !ld.over() {
				if v, ok := ld.peek(ctx, ld.clients[ri][0]); ok {
					views[ri] = append(views[ri], v)
				}
				select {
				case <-tk.C:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	return views
}

func (ld *load) peek(ctx context.Context, cl ratelimitv1connect.RateLimitServiceClient) (View, bool) {
	ctx, cancel := context.WithTimeout(ctx, ld.c.ReqTimout)
	defer cancel()
	lim := &ratelimitv1.Limit{Limit: 1e12, Window: durationpb.New(ld.c.Window)}
	res, err := cl.Peek(ctx, connect.NewRequest(&ratelimitv1.PeekRequest{Key: ld.c.Key, Hits: 1, Limit: lim}))
	if err != nil {
		return View{}, false
	}
	st := res.Msg.GetResponse().GetStats()
	v := View{
		Read:     time.UnixMilli(st.GetBucket()*ld.c.Window.Milliseconds() + st.GetElapsedMs()),
		Bucket:   st.GetBucket(),
		Previous: map[string]uint64{},
	}
	for _, rc := range st.GetRegions() {
		if rc.GetPrevious() > 0 {
			v.Previous[rc.GetRegion()] = rc.GetPrevious()
		}
	}
	return v, true
}

// write saves the admissions and the views as CSV under dir.
func (ld *load) write(dir string, views [][]View) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	rows := [][]string{{"unix_ns", "region"}}
	for _, a := range ld.adm {
		rows = append(rows, []string{strconv.FormatInt(a.At.UnixNano(), 10), ld.c.Targets[a.Region].Name})
	}
	if err := writeCSV(filepath.Join(dir, "admissions.csv"), rows); err != nil {
		return err
	}
	rows = [][]string{{"read_unix_ms", "region", "bucket", "previous"}}
	for ri, vs := range views {
		for _, v := range vs {
			rows = append(rows, []string{strconv.FormatInt(v.Read.UnixMilli(), 10), ld.c.Targets[ri].Name,
				strconv.FormatInt(v.Bucket, 10), fmt.Sprint(v.Previous)})
		}
	}
	return writeCSV(filepath.Join(dir, "views.csv"), rows)
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// report prints the figures and checks the bounds.
func report(out io.Writer, c config, tl timeline, ld *load, views [][]View) error {
	n := len(c.Targets)
	names := make([]string, n)
	for i, r := range c.Targets {
		names[i] = r.Name
	}
	var problems []error
	sent, errs := 0, 0
	for ri := range n {
		sent += ld.served[ri] + ld.errs[ri]
		errs += ld.errs[ri]
		fmt.Fprintf(out, "partition: %s: %d decided, %d errors, %d not sent (workers busy)\n", names[ri], ld.served[ri], ld.errs[ri], ld.missed[ri])
	}
	dur := tl.End.Sub(tl.Start)
	fmt.Fprintf(out, "partition: %d requests sent in %v: %.1fx the limit's rate (%.0fx offered)\n",
		sent, dur.Round(time.Second), float64(sent)/dur.Seconds()/(float64(c.Limit)/c.Window.Seconds()), c.Factor)
	if len(ld.lat) > 0 {
		slices.Sort(ld.lat)
		q := func(p float64) time.Duration {
			return ld.lat[int(p*float64(len(ld.lat)-1))].Round(100 * time.Microsecond)
		}
		fmt.Fprintf(out, "partition: decision round trip p50 %v, p99 %v, max %v\n", q(0.5), q(0.99), q(1))
	}
	if errs*100 > sent {
		problems = append(problems, fmt.Errorf("%d of %d requests failed (last: %v)", errs, sent, ld.lastErr))
	}

	windows := trailing(ld.adm, c.Window, n)
	phases := []Phase{
		{"before the cut", tl.Start, tl.CutStart},
		{"steady, before the cut", tl.Start.Add(2 * c.Window), tl.CutStart},
		{"during the cut", tl.CutStart, tl.HealStart},
		{"after the heal", tl.HealStart, tl.End.Add(time.Second)},
		{"a window after the heal", tl.HealStart.Add(c.Window), tl.End.Add(time.Second)},
		{"during and after", tl.CutStart, tl.End.Add(time.Second)},
	}
	fmt.Fprintf(out, "partition: trailing windows (t-%v, t] at every admission, x limit %d (bound %.3f):\n", c.Window, c.Limit, c.Bound)
	fmt.Fprintf(out, "  %-24s %8s %6s %6s %6s  %-28s %s\n", "phase", "windows", "max", "min", "p50", "worst window ends", "admitted per region in phase")
	var fault PhaseStats
	for _, p := range phases {
		st := summarize(p, windows, ld.adm, c.Limit, n)
		worst := "-"
		if st.Windows > 0 {
			worst = fmt.Sprintf("%s %s", relTo(st.Worst.At, tl), perRegion(names, st.Worst.PerRegion))
		}
		fmt.Fprintf(out, "  %-24s %8d %6.3f %6.3f %6.3f  %-28s %s\n", p.Name, st.Windows, st.Max, st.Min, st.P50, worst, perRegion(names, st.Admitted))
		if p.Name == "during and after" {
			fault = st
		}
		if st.Windows > 0 && st.Max > c.Bound {
			problems = append(problems, fmt.Errorf("%s: a trailing window held %.3f x the limit, over %.3f (ending %s, %s)",
				p.Name, st.Max, c.Bound, relTo(st.Worst.At, tl), perRegion(names, st.Worst.PerRegion)))
		}
		if p.Name == "during the cut" {
			for ri, a := range st.Admitted {
				if a == 0 {
					problems = append(problems, fmt.Errorf("%s admitted nothing during the cut: the load did not reach it", names[ri]))
				}
			}
		}
	}
	if fault.Windows == 0 {
		problems = append(problems, errors.New("no admission during or after the cut"))
	}

	// Agreement: on the bucket that closed during the cut, from the heal;
	// on the bucket open at the heal, from its end, with the grace of the
	// reconciliation that runs then.
	w := int64(c.Window)
	healBucket := tl.HealStart.UnixNano() / w
	closed := agreement(views, healBucket-1, names, tl.HealStart, 2*c.Flush+c.OneWay, tl.CutStart, tl.HealStart)
	open := agreement(views, healBucket, names, time.Unix(0, (healBucket+1)*w), c.Grace+2*c.Flush+c.OneWay, time.Time{}, time.Time{})
	reads := 0
	for _, vs := range views {
		reads += len(vs)
	}
	fmt.Fprintf(out, "partition: agreement (%d reads of the regions' stores, every %v per region):\n  closed during the cut: %s\n  open at the heal:      %s\n",
		reads, c.Poll, closed, open)
	for _, a := range []Agreement{closed, open} {
		if a.After() < 0 || a.After() > a.Bound {
			problems = append(problems, fmt.Errorf("regions did not agree on bucket %d within %v of %s (%v)",
				a.Bucket, a.Bound, a.Since.Format("15:04:05.000"), a.After()))
		}
	}
	if !closed.Diverged {
		problems = append(problems, fmt.Errorf("no region held other counts of bucket %d during the cut: the cut did not show", closed.Bucket))
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	fmt.Fprintln(out, "partition: PASS")
	return nil
}

// relTo names t relative to the cut and the heal.
func relTo(t time.Time, tl timeline) string {
	switch {
	case t.Before(tl.CutStart):
		return fmt.Sprintf("cut%+.2fs", t.Sub(tl.CutStart).Seconds())
	case t.Before(tl.HealStart):
		return fmt.Sprintf("cut+%.2fs", t.Sub(tl.CutStart).Seconds())
	default:
		return fmt.Sprintf("heal+%.2fs", t.Sub(tl.HealStart).Seconds())
	}
}

func perRegion(names []string, counts []int) string {
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s:%d", name, counts[i])
	}
	return strings.Join(parts, " ")
}
