// Command bench measures an rlnode's throughput and latency against the
// ceilings of trivial servers and against redis-benchmark's EVALSHA rate on
// the same Redis, all in one run on loopback.
//
// It starts every process it measures itself: a redis-server without
// persistence, rlnode on that Redis and rlnode on its in-memory store (both
// loading an envoyproxy/ratelimit rules file for Envoy's RLS), and the
// ceilings (this binary re-executed with the `ceiling` subcommand): a
// trivial net/http handler for the Connect API and a trivial grpc-go server
// answering Envoy's ShouldRateLimit with OK. With taskset and at least two
// cores, the measured processes run on CPU 0 and the load generator on
// CPU 1. It drives each workload closed-loop (N connections, each sending
// when the last answer arrives) and open-loop (a constant arrival rate,
// latency measured from each request's due time) over the Connect JSON API
// on HTTP/1.1, over Connect's gRPC on h2c, and over Envoy's RLS v3 with
// go-control-plane's grpc-go client (N workers on 4 HTTP/2 connections, as
// Envoy calls it), counts Redis script calls per decision from INFO
// commandstats, reads the CPU time each request cost the server and its
// Redis from /proc, and prints one table, then each path's ratio to its
// ceiling (by rate, and by CPU per request, which other work on the
// machine skews less) and its open-loop p99 against the goals (and, with
// -out, the same as JSON). With -profile it records a CPU profile of the server
// under each closed-loop JSON and Envoy row: from /debug/pprof when the
// node serves it, else with perf record.
//
// The Envoy rows call the node's --grpc-listen port (grpc-go's transport),
// or with -envoy-port main its --listen port (Connect on net/http's HTTP/2).
//
// Usage:
//
//	go run ./loadtest/bench [-duration 10s] [-conns 64] [-rate 0] [-short] [-out bench.json] [-profile dir] [-envoy-port grpc|main]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/loadtest/internal/command"
	"github.com/rlcluster/rlcluster/loadtest/internal/procs"
	"github.com/rlcluster/rlcluster/loadtest/internal/rlbuild"
)

// subcommandEnv names the subcommand a re-executed harness runs; the test
// binary honours it in TestMain.
const subcommandEnv = "RLBENCH_SUBCOMMAND"

func main() { command.Main("bench", run) }

// Config is the harness's configuration, from flags.
type Config struct {
	Duration    time.Duration
	Warmup      time.Duration
	Conns       int
	Rate        float64
	MaxRequests int64
	Pair        bool
	Short       bool
	Rlnode      string
	RlnodeArgs  []string
	RedisServer string
	RedisBench  string
	Out         string
	Pin         bool
	Profile     string
	ProfileURL  string
	Only        string
	EnvoyPort   string
	// JSONGen drives the closed-loop Connect JSON rows: wrk or go; Wrk is
	// wrk's binary.
	JSONGen string
	Wrk     string
	// OpenGen drives the open-loop Connect rows, JSON and protobuf: h1
	// or go.
	OpenGen string
	// EnvoyGen drives the Envoy RLS rows: h2 or grpc.
	EnvoyGen string
	// Peers measures envoyproxy/ratelimit and gubernator too, built into
	// PeerDir (or taken from it).
	Peers   bool
	PeerDir string
	// MaxGenBusy is the generator busy share above which, and
	// MinServerBusy the server's core's busy share under which, a
	// ceiling row measured the generator, not the server: ratios against
	// it are refused (busyRule). A closed-loop pair whose server's core
	// was less busy than MinServerBusy is reported as unsteady.
	MaxGenBusy    float64
	MinServerBusy float64
	// Algorithms and AlgorithmRounds configure the algorithm comparison
	// (algorithms.go).
	Algorithms      []string
	AlgorithmRounds int
}

// Values of -envoy-port.
const (
	envoyPortGRPC = "grpc" // the node's --grpc-listen: grpc-go's transport
	envoyPortMain = "main" // the node's --listen: Connect on net/http's HTTP/2
)

func parseFlags(args []string) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "measured time per workload (with -short: 1s unless set)")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "unmeasured warm-up per workload (with -short: 200ms unless set)")
	fs.IntVar(&c.Conns, "conns", 64, "concurrent connections (closed loop) and workers (open loop)")
	fs.Float64Var(&c.Rate, "rate", 0, "open-loop arrival rate, requests per second; 0: half the closed-loop rate measured for the same row in this run (with -short: at most 2000)")
	fs.Int64Var(&c.MaxRequests, "max-requests", 0, "most requests a row sends in its warm-up and again in its measured run (0: no bound); a bounded row ends early")
	fs.BoolVar(&c.Pair, "pair", true, "measure the ceiling again right before each closed-loop row the summary reports, and take that row's ratio from the pair, so load from other work on the machine skews both alike")
	fs.BoolVar(&c.Short, "short", false, "smoke mode: few workloads, about 1s each; for CI, not for figures")
	fs.StringVar(&c.Rlnode, "rlnode", "", "rlnode binary (default: go build ./cmd/rlnode)")
	rlnodeArgs := fs.String("rlnode-args", "", "extra space-separated arguments for rlnode")
	fs.StringVar(&c.RedisServer, "redis-server", "redis-server", "redis-server binary")
	fs.StringVar(&c.RedisBench, "redis-benchmark", "redis-benchmark", "redis-benchmark binary (empty: skip)")
	fs.StringVar(&c.Out, "out", "", "write the results as JSON to this file")
	fs.BoolVar(&c.Pin, "pin", true, "pin measured processes to CPU 0 and the load generator to CPU 1 (needs taskset and 2 cores)")
	fs.StringVar(&c.Profile, "profile", "", "directory for CPU profiles of the servers under the closed-loop JSON and Envoy rows: from rlnode's /debug/pprof if it serves one, else perf record of the server and its Redis with text reports beside (the ceilings' symbols need this binary built with go build, since go run strips it)")
	fs.StringVar(&c.ProfileURL, "profile-url", "", "base URL serving /debug/pprof for -profile (default: the node's API address)")
	fs.StringVar(&c.Only, "only", "", "run only rows whose name (workload/mode/protocol/store) contains this")
	fs.StringVar(&c.EnvoyPort, "envoy-port", envoyPortGRPC, "where the Envoy RLS rows call the node: grpc (its --grpc-listen port, grpc-go's transport) or main (its --listen port, Connect over net/http's HTTP/2)")
	fs.StringVar(&c.JSONGen, "json-generator", genWrk, "what drives the closed-loop Connect JSON rows: wrk (C, one thread on the generator's core) or go (this binary's net/http client, which saturates its core before the trivial handler does)")
	fs.StringVar(&c.Wrk, "wrk", "wrk", "wrk binary (Debian's package wrk)")
	fs.StringVar(&c.OpenGen, "open-generator", genH1, "what drives the open-loop Connect rows, JSON and protobuf: h1 (HTTP/1.1 written and read by hand, a fraction of net/http's client's CPU per request) or go (this binary's net/http and connect-go clients)")
	fs.StringVar(&c.EnvoyGen, "envoy-generator", genH2, "what drives the Envoy RLS rows: h2 (gRPC framed by hand on HTTP/2, a fraction of grpc-go's client's CPU per call) or grpc (go-control-plane's grpc-go client, as Envoy's Go peers call it)")
	fs.Float64Var(&c.MaxGenBusy, "max-generator-busy", 0.7, "a ceiling row whose generator was busier than this share of its core, while its server's core was less busy than -min-server-busy, measured the generator: ratios against it are refused and the run fails")
	fs.Float64Var(&c.MinServerBusy, "min-server-busy", 0.9, "share of its core at which a server (with its Redis) is saturated: a ceiling row at least this busy measured the server however busy its generator was, and a closed-loop pair with a row under it is printed as UNSTEADY")
	fs.BoolVar(&c.Peers, "peers", false, "also measure envoyproxy/ratelimit (Envoy RLS over 10k keys and a hot key, its /json over 10k keys, on the run's Redis) and gubernator (JSON over 10k keys, in memory), built with go install at pinned versions")
	cache, _ := os.UserCacheDir()
	fs.StringVar(&c.PeerDir, "peer-dir", filepath.Join(cache, "rlcluster-bench-peers"), "where -peers installs the peers' commands (GOBIN), or finds them built already")
	checkAlgorithms := addAlgorithmFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := checkAlgorithms(); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.Short {
		if !set["duration"] {
			c.Duration = time.Second
		}
		if !set["warmup"] {
			c.Warmup = 200 * time.Millisecond
		}
	}
	c.RlnodeArgs = strings.Fields(*rlnodeArgs)
	switch {
	case c.Duration <= 0 || c.Duration > time.Hour:
		return c, fmt.Errorf("-duration %v: want (0, 1h]", c.Duration)
	case c.Warmup < 0 || c.Warmup > time.Minute:
		return c, fmt.Errorf("-warmup %v: want [0, 1m]", c.Warmup)
	case c.Conns < 1 || c.Conns > 10000:
		return c, fmt.Errorf("-conns %d: want 1 to 10000", c.Conns)
	case c.Rate < 0 || c.Rate > 10_000_000:
		return c, fmt.Errorf("-rate %v: want [0, 1e7]", c.Rate)
	case c.MaxRequests < 0:
		return c, fmt.Errorf("-max-requests %d: want >= 0", c.MaxRequests)
	case c.EnvoyPort != envoyPortGRPC && c.EnvoyPort != envoyPortMain:
		return c, fmt.Errorf("-envoy-port %q: want grpc or main", c.EnvoyPort)
	case c.JSONGen != genWrk && c.JSONGen != genGo:
		return c, fmt.Errorf("-json-generator %q: want wrk or go", c.JSONGen)
	case c.EnvoyGen != genH2 && c.EnvoyGen != genGRPC:
		return c, fmt.Errorf("-envoy-generator %q: want h2 or grpc", c.EnvoyGen)
	case c.OpenGen != genH1 && c.OpenGen != genGo:
		return c, fmt.Errorf("-open-generator %q: want h1 or go", c.OpenGen)
	case c.MaxGenBusy <= 0 || c.MaxGenBusy > 1:
		return c, fmt.Errorf("-max-generator-busy %v: want (0, 1]", c.MaxGenBusy)
	case c.MinServerBusy <= 0 || c.MinServerBusy > 1:
		return c, fmt.Errorf("-min-server-busy %v: want (0, 1]", c.MinServerBusy)
	}
	return c, nil
}

// run is the harness: args are the command-line arguments, the table goes
// to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	if os.Getenv(subcommandEnv) == "ceiling" || (len(args) > 0 && args[0] == "ceiling") {
		if len(args) > 0 && args[0] == "ceiling" {
			args = args[1:]
		}
		return runCeiling(ctx, args)
	}
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rlbench-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)

	rep := Report{Command: "go run ./loadtest/bench " + strings.Join(args, " "), Started: time.Now().UTC(), Machine: machineInfo()}
	rep.Machine.GoVersion = runtime.Version()

	// Build before pinning, so the build may use every core.
	if cfg.Rlnode == "" {
		fmt.Fprintln(stdout, "building ./cmd/rlnode ...")
		if cfg.Rlnode, err = rlbuild.Rlnode(ctx, dir); err != nil {
			return err
		}
	}
	redisBin, err := exec.LookPath(cfg.RedisServer)
	if err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	if cfg.JSONGen == genWrk {
		if cfg.Wrk, err = exec.LookPath(cfg.Wrk); err != nil {
			return fmt.Errorf("wrk (install Debian's wrk, or pass -json-generator go): %w", err)
		}
	}
	children := &procs.Group{Dir: dir, WorkDir: dir}
	defer children.Close()
	var pinGen []string
	if ts, err := exec.LookPath("taskset"); cfg.Pin && err == nil && numCPU() >= 2 {
		if err := PinSelf(ts, "1"); err != nil {
			return err
		}
		children.Taskset, children.CPU = ts, "0"
		pinGen = []string{ts, "-c", "1"}
		rep.Machine.Pinned = true
		rep.Machine.Pinning = "node, its Redis and the ceiling on CPU 0 (taskset -c 0); load generator and redis-benchmark on CPU 1 (taskset -c 1)"
	} else {
		rep.Machine.Pinning = "none"
	}
	fmt.Fprintf(stdout, "machine: %d CPUs, %s; pinning: %s\n", rep.Machine.NProc, rep.Machine.CPUModel, rep.Machine.Pinning)

	h := &harness{cfg: cfg, procs: children, out: stdout, pinGen: pinGen}
	t0, s0, ok0 := cpuTimes()
	runErr := h.all(ctx, redisBin)
	rep.Results = h.results
	rep.Machine.LoadAvg[1] = loadAvg()
	t1, s1, ok1 := cpuTimes()
	rep.Machine.Steal = stealShare(t0, s0, ok0, t1, s1, ok1)
	applyRatios(rep.Results)
	fmt.Fprintf(stdout, "\nload average at start %s, at end %s", rep.Machine.LoadAvg[0], rep.Machine.LoadAvg[1])
	if rep.Machine.Steal >= 0 {
		fmt.Fprintf(stdout, "; CPU time stolen by the hypervisor over the run %.1f%%", 100*rep.Machine.Steal)
	}
	fmt.Fprintln(stdout)
	if err := WriteTable(stdout, rep.Results); err != nil {
		return err
	}
	rule := busyRule{MaxGen: cfg.MaxGenBusy, MinServer: cfg.MinServerBusy}
	if rep.Summary = Summarize(rep.Results, rule); len(rep.Summary) > 0 {
		fmt.Fprintf(stdout, "\nratios: closed loop (%d connections; Connect JSON driven by %s; Envoy: %d workers on %d HTTP/2 connections) over the ceiling's (paired: %v); p99 offered open-loop at half the row's closed-loop rate, against the ceiling's offered the same rate\n",
			cfg.Conns, cfg.JSONGen, cfg.Conns, envoyConns, cfg.Pair)
		if err := WriteSummary(stdout, rep.Summary); err != nil {
			return err
		}
	}
	if err := WritePeers(stdout, rep.Results); err != nil {
		return err
	}
	for _, u := range Unsteadies(rep.Summary, rep.Results, rule) {
		fmt.Fprintln(stdout, "UNSTEADY", u)
	}
	refused := Refusals(rep.Summary)
	for _, r := range refused {
		fmt.Fprintln(stdout, "REFUSED", r)
	}
	if cfg.Out != "" {
		if err := WriteJSON(cfg.Out, rep); err != nil {
			return err
		}
	}
	if runErr == nil && ctx.Err() != nil {
		runErr = ctx.Err()
	}
	if runErr == nil && len(refused) > 0 && !cfg.Short {
		runErr = fmt.Errorf("%d figures refused: a generator was busier than -max-generator-busy %.2f while its server's core was less busy than -min-server-busy %.2f, so they measured the generator", len(refused), cfg.MaxGenBusy, cfg.MinServerBusy)
	}
	return runErr
}

// rowName is what -only matches.
func rowName(workload, mode, protocol, store string) string {
	return workload + "/" + mode + "/" + protocol + "/" + store
}

var errNoRows = errors.New("no rows selected")
