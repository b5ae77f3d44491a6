// Command partition runs a region cut-off against a running multi-region
// cluster (the Docker demo in deploy/multiregion) and measures what the
// global limit and the regions' agreement did through it.
//
// It offers one key -factor times its global limit's rate (10x a limit of
// 1000 per 10 s by default, the default sliding window, global scope),
// spread evenly over every node of every region, as clients in those
// regions would (open loop, Connect over HTTP/1.1, no retries; a request
// whose turn comes while all -workers of its node are busy is not sent).
// Once the load has run for at least -min-pre and a bucket is -cut-phase
// into its window, it runs -cut-cmd (which must cut a region off from the
// others while its own clients still reach it), runs -heal-cmd -cut-for
// later, and keeps the load on for -after. With -arm, each command is
// started that long before its instant and told to act by a line on its
// standard input; each may print "applied at <unix ns>" and "done at <unix
// ns>" to say when it acted. Every admission is recorded with the client's
// clock; one node per region is asked (Peek) every -poll for its store's
// per-region counts of the previous bucket, each answer timed by the
// store's own clock (its bucket and elapsed time).
//
// It prints the largest count in any trailing window (t-W, t] over the
// whole cluster, as a multiple of the limit, before the cut (with the
// steady-state minimum from two windows after the load began), during the
// cut and after the heal, with each region's part of the worst window; and
// how long after the heal every region's store held the same counts of the
// bucket that closed during the cut, and how long after its end of the
// bucket open at the heal. It fails when a window holds more than -bound
// ((1 + 1/R) x the limit), when the regions do not agree within two flush
// intervals plus the one-way delay (for a bucket that closes after the
// heal, plus the reconciliation's grace), when more than 1% of requests
// fail, or when the cut did not show: a region that admitted nothing
// during it, or no region read holding other counts of the cut's bucket
// while it lasted.
//
// Usage (deploy/multiregion/e2e.sh runs it against the demo's published
// ports, the defaults of -targets, with deploy/multiregion/wancut.sh as the
// cut):
//
//	go run ./loadtest/partition -arm 2s \
//	    -cut-cmd 'deploy/multiregion/wancut.sh cut ap --armed' \
//	    -heal-cmd 'deploy/multiregion/wancut.sh heal ap --armed'
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
	wg.Go(func() { views = ld.poll(ctx, now.Add(c.Window), []time.Time{healAt, cutTime(healAt, c.Window, 0)}) })

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

// poll asks the nodes of every region, from from until the load ends,
// for their store's counts of the key's previous bucket. Around the
// instants in busy (the heal, and the end of the bucket open at it: from
// a second before to two after) each region is asked every Poll by
// pollers that take turns, so that reads slowed by a busy machine still
// come about every Poll; elsewhere every 10 Poll. The Peeks name a limit
// far above the key's: a denial could be answered from the node's memory
// of an earlier one (its deny cache) instead of from the store.
func (ld *load) poll(ctx context.Context, from time.Time, busy []time.Time) [][]View {
	const pollers = 4
	intense := func(t time.Time) bool {
		for _, b := range busy {
			if t.After(b.Add(-time.Second)) && t.Before(b.Add(2*time.Second)) {
				return true
			}
		}
		return false
	}
	views := make([][]View, len(ld.clients))
	var mu sync.Mutex
	if sleepUntil(ctx, from) != nil {
		return views
	}
	var wg sync.WaitGroup
	for ri := range ld.clients {
		for k := range pollers {
			wg.Go(func() {
				cl := ld.clients[ri][k%len(ld.clients[ri])]
				next := time.Now().Add(time.Duration(k) * ld.c.Poll)
				for !ld.over() {
					if sleepUntil(ctx, next) != nil {
						return
					}
					if k > 0 && !intense(next) {
						next = next.Add(pollers * ld.c.Poll)
						continue
					}
					if v, ok := ld.peek(ctx, cl); ok {
						mu.Lock()
						views[ri] = append(views[ri], v)
						mu.Unlock()
					}
					step := pollers * ld.c.Poll
					if !intense(next) {
						step = 10 * ld.c.Poll
					}
					for next = next.Add(step); next.Before(time.Now()); next = next.Add(step) {
					}
				}
			})
		}
	}
	wg.Wait()
	for _, vs := range views {
		slices.SortFunc(vs, func(a, b View) int { return a.Read.Compare(b.Read) })
	}
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
