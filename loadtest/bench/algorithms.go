package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

// The algorithm comparison (-algorithms): after a node's rows, the same
// workloads are run once per algorithm, interleaved over -algorithm-rounds
// rounds, and the server CPU per decision (the node's and its Redis's
// utime+stime from /proc) and Redis's time per script call (INFO
// commandstats) are compared with the first algorithm listed.

// algorithmNames maps -algorithms' names to the API's.
var algorithmNames = map[string]ratelimitv1.Algorithm{
	"sliding_window":            ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW,
	"sliding_window_two_bucket": ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW_TWO_BUCKET,
	"fixed_window":              ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW,
}

// addAlgorithmFlags registers -algorithms and -algorithm-rounds on fs and
// returns the check to run after parsing.
func addAlgorithmFlags(fs *flag.FlagSet, c *Config) func() error {
	list := fs.String("algorithms", "", "after each node's rows, compare the server CPU per decision of these algorithms (comma-separated: sliding_window, sliding_window_two_bucket, fixed_window), interleaved, on the uniform10k and steady100 workloads over Connect JSON, closed loop; ratios are to the first one")
	fs.IntVar(&c.AlgorithmRounds, "algorithm-rounds", 3, "rounds of -algorithms, each running every algorithm once for -duration")
	return func() error {
		if *list == "" {
			return nil
		}
		for _, a := range strings.Split(*list, ",") {
			if _, ok := algorithmNames[a]; !ok {
				return fmt.Errorf("-algorithms: unknown algorithm %q (want sliding_window, sliding_window_two_bucket or fixed_window)", a)
			}
			c.Algorithms = append(c.Algorithms, a)
		}
		if c.AlgorithmRounds < 1 || c.AlgorithmRounds > 100 {
			return fmt.Errorf("-algorithm-rounds %d: want 1 to 100", c.AlgorithmRounds)
		}
		return nil
	}
}

// steadyKeys and steadyWindow make the steady100 workload: few keys on a
// short window, so that nearly every decision reads a previous bucket
// holding hits, as a key in steady use does.
const (
	steadyKeys   = 100
	steadyWindow = time.Second
)

// newAlgorithmWorkload returns the comparison's workload name ("uniform10k":
// 10k keys on a 1-minute window, as the uniform10k rows; "steady100";
// "steady100-brief", steady100 whose checks set omit_stats) with every
// limit asking for alg.
func newAlgorithmWorkload(name, prefix string, alg ratelimitv1.Algorithm) *Workload {
	keys, win := uniformKeys, time.Minute
	if strings.HasPrefix(name, "steady100") {
		keys, win = steadyKeys, steadyWindow
	}
	brief := name == "steady100-brief"
	w := &Workload{Name: name, PerCall: 1}
	for i := range keys {
		w.single = append(w.single, &ratelimitv1.CheckRequest{
			Key: fmt.Sprintf("%s-a%d", prefix, i), Hits: 1, OmitStats: brief,
			Limit: &ratelimitv1.Limit{Limit: highLimit, Window: durationpb.New(win), Algorithm: alg},
		})
	}
	w.encode()
	return w
}

// algorithmSample is one algorithm's run of one workload in one round.
type algorithmSample struct {
	decisions         int64
	node, redis       time.Duration // CPU used
	scriptCalls, usec int64         // EVALSHA calls and Redis's µs in them
}

// compareAlgorithms runs the comparison against tg (its pid: the node,
// then its Redis if any) and prints it.
func (h *harness) compareAlgorithms(ctx context.Context, tg target, store, redisAddr string) error {
	workloads := []string{"uniform10k", "steady100"}
	got := map[string][]algorithmSample{} // workload/algorithm -> per round
	for round := range h.cfg.AlgorithmRounds {
		for _, wl := range workloads {
			// Rotate the order each round, so that neither algorithm
			// always runs first.
			algs := slices.Clone(h.cfg.Algorithms)
			k := round % len(algs)
			algs = append(algs[k:], algs[:k]...)
			for _, a := range algs {
				h.seq++
				prefix := fmt.Sprintf("algo%d-%d", time.Now().Unix()%100000, h.seq)
				s, err := h.algorithmRun(ctx, tg, redisAddr, newAlgorithmWorkload(wl, prefix, algorithmNames[a]))
				if err != nil {
					return fmt.Errorf("algorithm %s, %s on %s: %w", a, wl, store, err)
				}
				got[wl+"/"+a] = append(got[wl+"/"+a], s)
			}
		}
	}
	fmt.Fprintf(h.out, "\nserver CPU per decision by algorithm, %s store, closed loop over Connect JSON (%d connections), %d interleaved rounds of %v:\n\n",
		store, h.cfg.Conns, h.cfg.AlgorithmRounds, h.cfg.Duration)
	fmt.Fprintln(h.out, "| workload | algorithm | decisions | node CPU µs/decision | Redis CPU µs/decision | server CPU µs/decision | ratio | EVALSHA µs/call (Redis) |")
	fmt.Fprintln(h.out, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, wl := range workloads {
		var base float64
		for i, a := range h.cfg.Algorithms {
			var t algorithmSample
			for _, s := range got[wl+"/"+a] {
				t.decisions += s.decisions
				t.node += s.node
				t.redis += s.redis
				t.scriptCalls += s.scriptCalls
				t.usec += s.usec
			}
			per := func(d time.Duration) float64 {
				if t.decisions == 0 {
					return 0
				}
				return float64(d.Nanoseconds()) / 1e3 / float64(t.decisions)
			}
			server := per(t.node + t.redis)
			if i == 0 {
				base = server
			}
			ratio, call := "-", "-"
			if base > 0 {
				ratio = fmt.Sprintf("%.2f", server/base)
			}
			if t.scriptCalls > 0 {
				call = fmt.Sprintf("%.2f", float64(t.usec)/float64(t.scriptCalls))
			}
			fmt.Fprintf(h.out, "| %s | %s | %d | %.1f | %.1f | %.1f | %s | %s |\n", wl, a, t.decisions, per(t.node), per(t.redis), server, ratio, call)
		}
	}
	return nil
}

// algorithmRun runs w closed loop for a warm-up and -duration and measures
// the measured part.
func (h *harness) algorithmRun(ctx context.Context, tg target, redisAddr string, w *Workload) (algorithmSample, error) {
	c := NewJSONClient(tg.base, h.cfg.Conns)
	defer c.Close()
	l := Load{Conns: h.cfg.Conns, Duration: h.cfg.Duration, MaxRequests: h.cfg.MaxRequests}
	if h.cfg.Warmup > 0 {
		Run(ctx, c, w, Load{Conns: l.Conns, Duration: h.cfg.Warmup, MaxRequests: l.MaxRequests})
	}
	var s algorithmSample
	cpu := func() ([]time.Duration, error) {
		out := make([]time.Duration, len(tg.pid))
		for i, p := range tg.pid {
			d, err := procCPU(p)
			if err != nil {
				return nil, err
			}
			out[i] = d
		}
		return out, nil
	}
	var calls0, usec0 int64
	if redisAddr != "" {
		var err error
		if calls0, usec0, err = evalshaStats(ctx, redisAddr); err != nil {
			return s, err
		}
	}
	c0, err := cpu()
	if err != nil {
		return s, err
	}
	o := Run(ctx, c, w, l)
	c1, err := cpu()
	if err != nil {
		return s, err
	}
	if o.Errors > 0 {
		return s, fmt.Errorf("%d errors, the first: %v", o.Errors, o.FirstErr)
	}
	s.decisions = o.Allowed + o.Denied
	s.node = c1[0] - c0[0]
	if len(c1) > 1 {
		s.redis = c1[1] - c0[1]
	}
	if redisAddr != "" {
		calls1, usec1, err := evalshaStats(ctx, redisAddr)
		if err != nil {
			return s, err
		}
		s.scriptCalls, s.usec = calls1-calls0, usec1-usec0
	}
	fmt.Fprintf(h.out, "  %-10s %-26s %9d decisions  node CPU %6.1f µs/decision  Redis CPU %6.1f µs/decision\n", w.Name, w.single[0].GetLimit().GetAlgorithm(),
		s.decisions, float64(s.node.Nanoseconds())/1e3/float64(max(s.decisions, 1)), float64(s.redis.Nanoseconds())/1e3/float64(max(s.decisions, 1)))
	return s, nil
}

// evalshaStats returns Redis's EVALSHA calls and the µs spent in them
// (INFO commandstats).
func evalshaStats(ctx context.Context, addr string) (calls, usec int64, err error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("info commandstats: %w", err)
	}
	calls, usec = parseEvalsha(s)
	return calls, usec, nil
}

// parseEvalsha reads cmdstat_evalsha's calls and usec from INFO
// commandstats (0 when absent).
func parseEvalsha(info string) (calls, usec int64) {
	for line := range strings.Lines(info) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			k, x, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(x, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "usec":
				usec = n
			}
		}
	}
	return calls, usec
}
