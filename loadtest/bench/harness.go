package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/loadtest/internal/procs"
	"github.com/rlcluster/rlcluster/loadtest/internal/rlbuild"
)

const (
	protoJSON = "connect-json"
	protoGRPC = "grpc"
	// protoBinary is the Connect protocol with protobuf, connect-go's
	// default and the node's Go client's.
	protoBinary = "connect-proto"
	// protoEnvoy is Envoy's RLS v3 ShouldRateLimit called with
	// go-control-plane's grpc-go client; its ceiling is a grpc-go server.
	protoEnvoy = "envoy-rls"
	modeOpen   = "open"
	modeClose  = "closed"
)

// planRow is one row to measure against a target.
type planRow struct {
	Workload, Mode, Protocol string
}

// Plan returns the rows to measure against each store ("ceiling", "redis",
// "memory"): every workload in both modes over every protocol (Envoy's
// RLS has no batch), or a few in short mode. Open-loop rows follow the
// closed-loop rows they take their rate from.
func Plan(short bool) map[string][]planRow {
	if short {
		return map[string][]planRow{
			"ceiling": {{"ceiling", modeClose, protoJSON}, {"ceiling", modeClose, protoEnvoy}},
			"redis": {
				{"uniform10k", modeClose, protoJSON},
				{"hotkey", modeClose, protoJSON},
				{"batch10", modeClose, protoGRPC},
				{"uniform10k", modeOpen, protoJSON},
				{"uniform10k", modeClose, protoEnvoy},
				{"hotkey", modeClose, protoEnvoy},
				{"hotkey", modeOpen, protoEnvoy},
			},
			"memory": {{"uniform10k", modeClose, protoBinary}},
		}
	}
	p := map[string][]planRow{}
	for _, mode := range []string{modeClose, modeOpen} {
		for _, proto := range []string{protoJSON, protoBinary, protoGRPC, protoEnvoy} {
			p["ceiling"] = append(p["ceiling"], planRow{"ceiling", mode, proto})
			for _, store := range []string{"redis", "memory"} {
				for _, w := range []string{"uniform10k", "hotkey", "batch10", "steady100", "steady100-brief"} {
					if (w == "batch10" && proto == protoEnvoy) || (strings.HasPrefix(w, "steady100") && proto != protoJSON) {
						continue
					}
					p[store] = append(p[store], planRow{w, mode, proto})
				}
			}
		}
	}
	return p
}

// target is where a row's requests go: the Connect API (JSON and gRPC)
// and Envoy's RLS, the same address on a node.
type target struct {
	base, envoyBase string // http://host:port
	pid             []int  // processes to profile with perf: the server, its Redis
}

// harness runs the plan and collects results.
type harness struct {
	cfg     Config
	procs   *procs.Group
	out     io.Writer
	pinGen  []string // taskset prefix for load generators run as processes
	results []Result
	failed  []string // rows where no request succeeded
	seq     int
	noPprof bool
	// redisPID is the running redis-server's, profiled with the node.
	redisPID int
	// ceil is the running ceiling, kept for paired rows; inPair is set
	// while a paired ceiling row is measured.
	ceil   *target
	inPair bool
	// pairRate is the open-loop rate of the node row a paired ceiling
	// row is measured for.
	pairRate float64
}

// paired reports whether the node row r against store gets a ceiling
// measured right before it: the closed-loop rows of the Goals, with -pair.
func (h *harness) paired(store string, r planRow) bool {
	if !h.cfg.Pair || h.ceil == nil || store == "ceiling" {
		return false
	}
	if isPeer(store) {
		return r.Mode == modeClose
	}
	for _, g := range Goals {
		if g.Workload == r.Workload && g.Protocol == r.Protocol && g.Store == store {
			return true
		}
	}
	return false
}

func (h *harness) selected(store string) []planRow {
	var rows []planRow
	for _, r := range Plan(h.cfg.Short)[store] {
		if h.cfg.Only == "" || strings.Contains(rowName(r.Workload, r.Mode, r.Protocol, store), h.cfg.Only) {
			rows = append(rows, r)
		}
	}
	return rows
}

// all measures the ceiling, the node on Redis, redis-benchmark, and the node
// on memory, in that order, each process stopped before the next starts.
func (h *harness) all(ctx context.Context, redisBin string) error {
	if rows := h.selected("ceiling"); len(rows) > 0 || h.cfg.Pair {
		stop, err := h.ceiling(ctx, rows)
		if err != nil {
			return err
		}
		defer stop()
	}
	redisRows := h.selected("redis")
	wantBench := h.cfg.RedisBench != "" && (h.cfg.Only == "" || strings.Contains("redis-benchmark", h.cfg.Only))
	if len(redisRows) > 0 || wantBench || h.cfg.Peers {
		rp, addr, err := StartRedis(ctx, h.procs, redisBin)
		if err != nil {
			return err
		}
		defer rp.Stop()
		h.redisPID = rp.Pid()
		if len(redisRows) > 0 {
			if err := h.node(ctx, "redis", "redis://"+addr, addr, redisRows); err != nil {
				return err
			}
		}
		if wantBench {
			if err := h.redisBenchmark(ctx, addr); err != nil {
				return err
			}
		}
		if h.cfg.Peers {
			if err := h.peers(ctx, addr); err != nil {
				return err
			}
		}
		rp.Stop()
		h.redisPID = 0
	}
	if rows := h.selected("memory"); len(rows) > 0 {
		if err := h.node(ctx, "memory", "", "", rows); err != nil {
			return err
		}
	}
	if len(h.results) == 0 {
		return errNoRows
	}
	if len(h.failed) > 0 {
		return errors.New(strings.Join(h.failed, "; "))
	}
	return nil
}

// ceiling starts the ceilings, measures rows against them and returns
// the function that stops them; they stay up for paired rows.
func (h *harness) ceiling(ctx context.Context, rows []planRow) (stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own binary: %w", err)
	}
	var pr *procs.Proc
	var tg target
	for try := 0; try < 3; try++ {
		ports, err := rlbuild.FreePorts(2)
		if err != nil {
			return nil, err
		}
		port, gport := ports[0], ports[1]
		tg.base = "http://127.0.0.1:" + strconv.Itoa(port)
		tg.envoyBase = "http://127.0.0.1:" + strconv.Itoa(gport)
		pr, err = h.procs.Start("ceiling", self, []string{subcommandEnv + "=ceiling"}, "ceiling",
			"-listen", "127.0.0.1:"+strconv.Itoa(port), "-grpc-listen", "127.0.0.1:"+strconv.Itoa(gport))
		if err != nil {
			return nil, err
		}
		tg.pid = []int{pr.Pid()}
		if err = pr.WaitReady(ctx, 10*time.Second, func() error { return probeAll(ctx, tg) }); err == nil {
			break
		}
		pr.Stop()
		if try == 2 {
			return nil, fmt.Errorf("start ceiling: %w", err)
		}
	}
	for _, r := range rows {
		if err := h.row(ctx, tg, "ceiling", r, ""); err != nil {
			pr.Stop()
			return nil, err
		}
	}
	h.ceil = &tg
	return func() { h.ceil = nil; pr.Stop() }, nil
}

// node starts rlnode on the given store, measures rows against it and
// stops it. redisAddr, when set, is watched for script calls.
func (h *harness) node(ctx context.Context, store, redisURL, redisAddr string, rows []planRow) error {
	var pr *procs.Proc
	var base, envoyBase string
	rules := filepath.Join(h.procs.Dir, "envoy-rules.yaml")
	err := os.WriteFile(rules, []byte(envoyRules), 0o600)
	if err != nil {
		return fmt.Errorf("write envoy rules: %w", err)
	}
	for try := 0; try < 3; try++ {
		var port int
		if port, err = rlbuild.FreePort(); err != nil {
			return err
		}
		listen := "127.0.0.1:" + strconv.Itoa(port)
		base, envoyBase = "http://"+listen, "http://"+listen
		args := []string{"--listen", listen, "--region", "bench", "--rules", rules}
		if h.cfg.EnvoyPort == envoyPortGRPC {
			gport, err := rlbuild.FreePort()
			if err != nil {
				return err
			}
			envoyBase = "http://127.0.0.1:" + strconv.Itoa(gport)
			args = append(args, "--grpc-listen", strings.TrimPrefix(envoyBase, "http://"))
		}
		if redisURL != "" {
			args = append(args, "--redis-url", redisURL)
		}
		args = append(args, h.cfg.RlnodeArgs...)
		if pr, err = h.procs.Start("rlnode-"+store, h.cfg.Rlnode, nil, args...); err != nil {
			return err
		}
		tg := target{base: base, envoyBase: envoyBase}
		if err = pr.WaitReady(ctx, 20*time.Second, func() error { return probeAll(ctx, tg) }); err == nil {
			break
		}
		pr.Stop()
	}
	if err != nil {
		return fmt.Errorf("start rlnode (%s store): %w", store, err)
	}
	defer pr.Stop()
	tg := target{base: base, envoyBase: envoyBase, pid: []int{pr.Pid()}}
	if h.redisPID != 0 && redisAddr != "" {
		tg.pid = append(tg.pid, h.redisPID)
	}
	for _, r := range rows {
		if err := h.row(ctx, tg, store, r, redisAddr); err != nil {
			return err
		}
		if pr.Exited() {
			return fmt.Errorf("rlnode (%s store) exited during %s: %s", store, r.Workload, pr.Tail())
		}
	}
	if len(h.cfg.Algorithms) > 0 {
		return h.compareAlgorithms(ctx, tg, store, redisAddr)
	}
	return nil
}

func (h *harness) workload(name, protocol string) *Workload {
	h.seq++
	prefix := fmt.Sprintf("bench%d-%d", time.Now().Unix()%100000, h.seq)
	if protocol == protoEnvoy {
		if name == "hotkey" {
			return NewEnvoyHotKey(prefix)
		}
		w := NewEnvoyUniform(prefix)
		w.Name = name
		return w
	}
	switch name {
	case "hotkey":
		return NewHotKey(prefix)
	case "steady100", "steady100-brief":
		// Keys in steady use: their previous buckets hold hits, as the
		// fresh keys of the other rows' do not, and answers list them
		// (steady100-brief: its checks set omit_stats).
		return newAlgorithmWorkload(name, prefix, ratelimitv1.Algorithm_ALGORITHM_UNSPECIFIED)
	case "batch10":
		return NewBatch(prefix, uint64(h.seq)*0x9E3779B97F4A7C15)
	default: // uniform10k, ceiling
		w := NewUniform(prefix)
		w.Name = name
		return w
	}
}

// row measures one row: warm-up, then the measured run, with Redis script
// calls counted over the measured run only. A paired row gets its
// ceiling measured right before it, the same way (an open-loop one at the
// row's own rate).
func (h *harness) row(ctx context.Context, tg target, store string, r planRow, redisAddr string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var pair *Result
	if h.paired(store, r) {
		h.inPair = true
		h.pairRate = h.openRate(store, r)
		err := h.row(ctx, *h.ceil, "ceiling", planRow{"ceiling", r.Mode, r.Protocol}, "")
		h.inPair, h.pairRate = false, 0
		if err != nil {
			return err
		}
		c := &h.results[len(h.results)-1]
		c.Workload, c.PairedWith = pairedCeiling, rowName(r.Workload, r.Mode, r.Protocol, store)
		pair = c
	}
	w := h.workload(r.Workload, r.Protocol)
	switch {
	case store == storePeerRatelimit && r.Protocol == protoJSON:
		w = NewPeerRatelimitJSON(fmt.Sprintf("bench%d-%d", time.Now().Unix()%100000, h.seq))
	case store == storePeerGubernator:
		w = NewPeerGubernatorJSON(fmt.Sprintf("bench%d-%d", time.Now().Unix()%100000, h.seq))
	}
	l := Load{Conns: h.cfg.Conns, Duration: h.cfg.Duration, MaxRequests: h.cfg.MaxRequests}
	if r.Mode == modeOpen {
		l.Rate = h.openRate(store, r)
	}
	gen := genGo
	switch {
	case (r.Protocol == protoJSON || r.Protocol == protoBinary) && r.Mode == modeClose && h.cfg.JSONGen == genWrk:
		gen = genWrk
	case (r.Protocol == protoJSON || r.Protocol == protoBinary) && r.Mode == modeOpen:
		gen = h.cfg.OpenGen
	case r.Protocol == protoEnvoy:
		gen = h.cfg.EnvoyGen
	}
	drive, closeClient, err := h.driver(ctx, tg, store, r, w, gen)
	if err != nil {
		return err
	}
	defer closeClient()
	if h.cfg.Warmup > 0 {
		if _, _, err := drive(Load{Conns: l.Conns, Rate: l.Rate, Duration: h.cfg.Warmup, MaxRequests: l.MaxRequests}); err != nil {
			return err
		}
	}
	var before int64
	if redisAddr != "" {
		if before, err = ScriptCalls(ctx, redisAddr); err != nil {
			return err
		}
	}
	cpu0, cpuErr := procsCPU(tg.pid)
	var mem0 nodeCounters
	memErr := errors.New("not a node")
	if isNode(store) {
		mem0, memErr = scrapeNode(ctx, tg.base)
	}
	prof := h.startProfile(ctx, tg, store, r)
	o, genCPU, err := drive(l)
	if err != nil {
		return err
	}
	if memErr == nil {
		var mem1 nodeCounters
		if mem1, memErr = scrapeNode(ctx, tg.base); memErr == nil && mem1.mallocs > 0 && o.Requests > 0 {
			// The two scrapes' own allocations are in the figure too: a
			// few thousand over a row of many thousand requests.
			nodeMallocs, nodeBytes := (mem1.mallocs-mem0.mallocs)/float64(o.Requests), (mem1.allocBytes-mem0.allocBytes)/float64(o.Requests)
			defer func() {
				r := &h.results[len(h.results)-1]
				r.AllocsPerReq, r.AllocBytesPerReq = ptr(nodeMallocs), ptr(nodeBytes)
				fmt.Fprintf(h.out, "  node heap allocations: %.1f per request, %.0f bytes per request\n", nodeMallocs, nodeBytes)
			}()
		}
	}
	if cpuErr == nil {
		cpu1, err := procsCPU(tg.pid)
		cpuErr = err
		for i := range cpu0 {
			if cpuErr == nil {
				cpu0[i] = cpu1[i] - cpu0[i]
			}
		}
	}
	if prof != nil {
		if msg := <-prof; msg != "" {
			fmt.Fprintln(h.out, "  profile:", msg)
		}
	}
	res := Result{
		Workload: r.Workload, Mode: r.Mode, Protocol: r.Protocol, Store: store, Generator: gen,
		Conns: l.Conns, Rate: l.Rate, Seconds: o.Elapsed.Seconds(), PerCall: w.PerCall,
		Requests: o.Requests, Allowed: o.Allowed, Denied: o.Denied, Errors: o.Errors, Unsent: o.Unsent,
	}
	if pair != nil {
		res.PairedCeiling = ptr(pair.ReqPerSec)
		res.PairedCeilingCPU = pair.CPUPerReqUs
		res.PairedCeilingP99Ms = ptr(pair.P99Ms)
		res.PairedCeilingGenBusy = ptr(pair.GenBusy)
		res.PairedCeilingServerBusy = ptr(pair.ServerBusy)
	}
	secs := o.Elapsed.Seconds()
	res.ReqPerSec = float64(o.Requests) / secs
	res.DecPerSec = float64(o.Allowed+o.Denied) / secs
	if store == "ceiling" || (isPeer(store) && gen == genWrk) {
		// No decisions to count (wrk does not parse the answers).
		res.Allowed, res.Denied, res.DecPerSec = 0, 0, res.ReqPerSec
	}
	if cpuErr == nil && o.Elapsed > 0 {
		var server time.Duration
		for _, d := range cpu0 {
			server += d
		}
		res.ServerBusy = server.Seconds() / o.Elapsed.Seconds() / float64(h.serverCores())
	}
	if cpuErr == nil && o.Requests > 0 {
		res.CPUPerReqUs = float64(cpu0[0].Microseconds()) / float64(o.Requests)
		if len(cpu0) > 1 {
			res.RedisCPUPerReqUs = ptr(float64(cpu0[1].Microseconds()) / float64(o.Requests))
		}
	}
	if genCPU >= 0 && o.Elapsed > 0 {
		res.GenBusy = genCPU.Seconds() / o.Elapsed.Seconds()
	}
	res.setLatencies(o.Latencies)
	if o.FirstErr != nil {
		res.FirstError = o.FirstErr.Error()
	}
	if redisAddr != "" {
		after, err := ScriptCalls(ctx, redisAddr)
		if err != nil {
			return err
		}
		res.setScriptCalls(after - before)
	}
	scripts := ""
	if res.ScriptCalls != nil && o.Allowed+o.Denied > 0 {
		scripts = fmt.Sprintf("  script calls %.3f/decision", float64(*res.ScriptCalls)/float64(o.Allowed+o.Denied))
	}
	h.results = append(h.results, res)
	name := r.Workload
	if h.inPair {
		name = pairedCeiling
	}
	fmt.Fprintf(h.out, "%-44s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  server CPU %6.1f us/req (%s) busy %3.0f%%  generator (%s) busy %3.0f%%  allowed %d denied %d errors %d unsent %d%s\n",
		rowName(name, modeLabel(res), r.Protocol, store), res.ReqPerSec, res.P50Ms, res.P99Ms, res.serverCPU(),
		cpuSplit(res), 100*res.ServerBusy, gen, 100*res.GenBusy, res.Allowed, res.Denied, res.Errors, res.Unsent, scripts)
	if res.FirstError != "" {
		fmt.Fprintf(h.out, "  first error: %.300s\n", res.FirstError)
	}
	if o.Requests == 0 && ctx.Err() == nil {
		h.failed = append(h.failed, fmt.Sprintf("%s: no request succeeded: %v", rowName(r.Workload, r.Mode, r.Protocol, store), o.FirstErr))
	}
	return nil
}

// serverCores is how many cores the measured server and its Redis may
// use: one when pinned, else every core.
func (h *harness) serverCores() int {
	if h.procs.Taskset != "" {
		return 1
	}
	return numCPU()
}

// driveFunc runs one load and returns what it measured and the
// generator's CPU time over it (-1 when unknown).
type driveFunc func(l Load) (Outcome, time.Duration, error)

// driver returns how row r drives w at tg: with wrk (gen genWrk), whose
// decisions are counted from the node's /metrics, or with this process's
// own client, whose CPU time is read from /proc.
func (h *harness) driver(ctx context.Context, tg target, store string, r planRow, w *Workload, gen string) (driveFunc, func(), error) {
	if gen == genWrk {
		return func(l Load) (Outcome, time.Duration, error) {
			var a0, d0 int64
			if isNode(store) {
				var err error
				if a0, d0, err = decisionCounts(ctx, tg.base); err != nil {
					return Outcome{}, -1, err
				}
			}
			o, err := runWrk(ctx, h.cfg.Wrk, h.pinGen, h.procs.Dir, tg.base, w, r.Protocol, l.Conns, l.Duration, l.MaxRequests)
			if err != nil {
				return Outcome{}, -1, err
			}
			if isNode(store) {
				a1, d1, err := decisionCounts(ctx, tg.base)
				if err != nil {
					return Outcome{}, -1, err
				}
				o.Allowed, o.Denied = a1-a0, d1-d0
			}
			return o.Outcome, o.CPU, nil
		}, func() {}, nil
	}
	var c Client
	switch {
	case gen == genH1:
		hc, err := NewH1Client(tg.base, r.Protocol, h.cfg.Conns)
		if err != nil {
			return nil, nil, err
		}
		c = hc
	case r.Protocol == protoGRPC:
		c = NewGRPCClient(tg.base)
	case r.Protocol == protoBinary:
		c = NewProtoClient(tg.base, h.cfg.Conns)
	case r.Protocol == protoEnvoy && gen == genH2:
		hc, err := NewH2RLSClient(ctx, tg.envoyBase, envoyConns)
		if err != nil {
			return nil, nil, err
		}
		c = hc
	case r.Protocol == protoEnvoy:
		ec, err := NewEnvoyClient(tg.envoyBase, envoyConns)
		if err != nil {
			return nil, nil, err
		}
		c = ec
	default:
		c = NewJSONClient(tg.base, h.cfg.Conns)
	}
	return func(l Load) (Outcome, time.Duration, error) {
		gen0, genErr := procCPU(os.Getpid())
		o := Run(ctx, c, w, l)
		if genErr != nil {
			return o, -1, nil
		}
		gen1, err := procCPU(os.Getpid())
		if err != nil {
			return o, -1, nil
		}
		// The share of the cores it may use (one when pinned).
		return o, (gen1 - gen0) / time.Duration(runtime.GOMAXPROCS(0)), nil
	}, c.Close, nil
}

// openRate is the open-loop arrival rate for r: -rate, or half the
// closed-loop rate measured for the same workload, protocol and store (1000
// when there is none), at most 2000 in short mode.
func (h *harness) openRate(store string, r planRow) float64 {
	if h.inPair && h.pairRate > 0 {
		return h.pairRate
	}
	rate := h.cfg.Rate
	if rate == 0 {
		rate = 1000
		for _, m := range h.results {
			if m.Mode == modeClose && m.Workload == r.Workload && m.Protocol == r.Protocol && m.Store == store && m.ReqPerSec > 0 {
				rate = max(math.Round(m.ReqPerSec/2), 1)
			}
		}
	}
	if h.cfg.Short {
		rate = min(rate, 2000)
	}
	return rate
}
