// Command leases measures quota leases across a running multi-region
// cluster (the Docker demo in deploy/multiregion): clients of Envoy's rate
// limit quota filter (the test client, internal/api/rlqs/rlqsfilter) in
// every region lease one key of a leasable native rule from their region's
// nodes, offered -factor times the rule's rate in all, one client carrying
// -heavy of it and the rest spread evenly, with Poisson arrivals. Every
// admission is recorded with the client's clock.
//
// It prints what was offered and admitted per region (in all and each
// second), and the count in every trailing window (t-W, t] over the
// whole cluster at each admission, as a multiple of the limit: its
// largest, and from the second window on its median and smallest (and
// when that was). It fails when a window holds more than -bound.
//
// Usage (the demo up, with its rules file's rule "leased", 1000 per 10 s):
//
//	go run ./loadtest/leases -envoys 30 -duration 60s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlcluster/rlcluster/internal/api/rlqs/rlqsfilter"
	"github.com/rlcluster/rlcluster/loadtest/internal/command"
)

func main() { command.Main("leases", run) }

type config struct {
	targets  [][]string // per region, its nodes' host:port
	names    []string
	rule     string
	limit    int
	window   time.Duration
	factor   float64
	envoys   int
	heavy    float64
	interval time.Duration
	duration time.Duration
	bound    float64
}

func parse(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("leases", flag.ContinueOnError)
	fs.SetOutput(out)
	var c config
	targets := fs.String("targets", "us=127.0.0.1:8111|127.0.0.1:8112;eu=127.0.0.1:8121|127.0.0.1:8122;ap=127.0.0.1:8131|127.0.0.1:8132", "regions and their nodes' API addresses: region=host:port|host:port;...")
	fs.StringVar(&c.rule, "rule", "leased", "the leasable rule")
	fs.IntVar(&c.limit, "limit", 1000, "the rule's limit")
	fs.DurationVar(&c.window, "window", 10*time.Second, "the rule's window")
	fs.Float64Var(&c.factor, "factor", 10, "offered load, in times the limit's rate")
	fs.IntVar(&c.envoys, "envoys", 30, "clients in all, spread over the regions and their nodes")
	fs.Float64Var(&c.heavy, "heavy", 0.5, "the share of the load the first client carries (0: even)")
	fs.DurationVar(&c.interval, "interval", time.Second, "the clients' reporting interval")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "how long to offer the load")
	fs.Float64Var(&c.bound, "bound", 1.05, "the largest trailing window allowed, over the limit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for part := range strings.SplitSeq(*targets, ";") {
		name, addrs, ok := strings.Cut(part, "=")
		if !ok || name == "" || addrs == "" {
			return c, fmt.Errorf("target %q: want region=host:port|host:port", part)
		}
		c.names = append(c.names, name)
		c.targets = append(c.targets, strings.Split(addrs, "|"))
	}
	switch {
	case c.envoys < len(c.targets):
		return c, fmt.Errorf("-envoys %d: want at least one a region (%d)", c.envoys, len(c.targets))
	case c.heavy < 0 || c.heavy >= 1:
		return c, fmt.Errorf("-heavy %v: want 0 to less than 1", c.heavy)
	case c.limit < 1 || c.window <= 0 || c.factor <= 0 || c.interval <= 0 || c.duration <= 0:
		return c, fmt.Errorf("-limit, -window, -factor, -interval and -duration must be positive")
	}
	return c, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	c, err := parse(args, out)
	if err != nil {
		return err
	}
	total := c.factor * float64(c.limit) / c.window.Seconds()
	rates := make([]float64, c.envoys)
	for i := range rates {
		rates[i] = total * (1 - c.heavy) / float64(c.envoys-1)
	}
	if c.heavy > 0 {
		rates[0] = total * c.heavy
	}
	type admission struct {
		at     time.Time
		region int
	}
	var (
		mu       sync.Mutex
		admitted []admission
		offered  = make([]int, len(c.targets))
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now().Add(time.Second) // every stream open first
	id := map[string]string{"rule": c.rule, "key": "leases"}
	for e := range c.envoys {
		r := e % len(c.targets)
		addr := c.targets[r][(e/len(c.targets))%len(c.targets[r])]
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		f, err := rlqsfilter.New(rlqsfilter.Config{
			Domain: "app", ReportingInterval: c.interval, NoAssignment: rlqsfilter.DenyAll(),
			Expired: &rlqsfilter.Expired{Fallback: rlqsfilter.DenyAll(), Timeout: time.Minute},
		})
		if err != nil {
			return err
		}
		wg.Add(2)
		go func() { defer wg.Done(); _ = f.Run(ctx, rlqsv3.NewRateLimitQuotaServiceClient(conn)) }()
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(e), 0x1ea5e))
			h := f.Bucket(id)
			next := start
			for {
				next = next.Add(time.Duration(rng.ExpFloat64() / rates[e] * float64(time.Second)))
				if next.Sub(start) >= c.duration {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				ok := h.Allow()
				mu.Lock()
				offered[r]++
				if ok {
					admitted = append(admitted, admission{time.Now(), r})
				}
				mu.Unlock()
			}
		}()
	}
	fmt.Fprintf(out, "leases: %d clients over %d regions, %.0fx a limit of %d per %v (one client carrying %.0f%%), reports every %v, for %v\n",
		c.envoys, len(c.targets), c.factor, c.limit, c.window, 100*c.heavy, c.interval, c.duration)
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(start.Add(c.duration))):
	}
	cancel()
	wg.Wait()

	sort.Slice(admitted, func(i, j int) bool { return admitted[i].at.Before(admitted[j].at) })
	perRegion := make([]int, len(c.targets))
	seconds := int(c.duration/time.Second) + 1
	perSecond := make([][]int, len(c.targets))
	for r := range perSecond {
		perSecond[r] = make([]int, seconds)
	}
	var worst, least float64
	var leastAt time.Duration
	var steady []float64
	lo := 0
	for i, a := range admitted {
		perRegion[a.region]++
		if s := int(a.at.Sub(start) / time.Second); s >= 0 && s < seconds {
			perSecond[a.region][s]++
		}
		for !admitted[lo].at.After(a.at.Add(-c.window)) {
			lo++
		}
		n := float64(i-lo+1) / float64(c.limit)
		worst = max(worst, n)
		if at := a.at.Sub(start); at >= c.window {
			if len(steady) == 0 || n < least {
				least, leastAt = n, at
			}
			steady = append(steady, n)
		}
	}
	slices.Sort(steady)
	for r, name := range c.names {
		fmt.Fprintf(out, "  %s: offered %d, admitted %d; each second: %v\n", name, offered[r], perRegion[r], perSecond[r])
	}
	if len(steady) == 0 {
		return fmt.Errorf("nothing admitted after the first window")
	}
	fmt.Fprintf(out, "trailing window at admissions, over the limit: max %.3f; from the second window median %.3f, min %.3f (at %.1fs)\n",
		worst, steady[len(steady)/2], least, leastAt.Seconds())
	if worst > c.bound {
		return fmt.Errorf("a trailing window held %.3f of the limit, past -bound %.3f", worst, c.bound)
	}
	fmt.Fprintln(out, "leases: PASS")
	return nil
}
