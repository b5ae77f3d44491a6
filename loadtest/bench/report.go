package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one measured row: a workload driven in one mode over one
// protocol against one target.
type Result struct {
	Workload string `json:"workload"` // uniform10k, hotkey, batch10, ceiling, redis-benchmark
	Mode     string `json:"mode"`     // closed or open
	Protocol string `json:"protocol"` // connect-json, grpc, resp
	Store    string `json:"store"`    // redis, memory, ceiling, redis-server
	// Generator is what drove the row: wrk or go (this binary).
	Generator string `json:"generator,omitempty"`

	Conns    int     `json:"conns"`
	Rate     float64 `json:"target_rate,omitempty"` // open loop: scheduled requests per second
	Seconds  float64 `json:"seconds"`
	PerCall  int     `json:"decisions_per_request"`
	Requests int64   `json:"requests"`
	Allowed  int64   `json:"allowed"`
	Denied   int64   `json:"denied"`
	Errors   int64   `json:"errors"`
	Unsent   int64   `json:"unsent,omitempty"` // open loop: due but never sent before the end

	ReqPerSec float64 `json:"req_per_sec"`
	DecPerSec float64 `json:"decisions_per_sec"`
	P50Ms     float64 `json:"p50_ms"`
	P95Ms     float64 `json:"p95_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`

	// CPUPerReqUs is the server process's CPU time (user plus system,
	// from /proc) per request over the measured run, in microseconds: a
	// cost that load from other work on the machine skews less than
	// req/s. Its Redis's is RedisCPUPerReqUs.
	CPUPerReqUs float64 `json:"server_cpu_us_per_request,omitempty"`
	// RedisCPUPerReqUs is the same for the node's redis-server (Redis
	// store only): the two share CPU 0, so their sum is what a request
	// costs that core.
	RedisCPUPerReqUs *float64 `json:"redis_cpu_us_per_request,omitempty"`
	// AllocsPerReq and AllocBytesPerReq are the node's Go heap
	// allocations per request over the measured run (from its /metrics):
	// steady whatever else runs on the machine. Node rows only.
	AllocsPerReq     *float64 `json:"node_allocs_per_request,omitempty"`
	AllocBytesPerReq *float64 `json:"node_alloc_bytes_per_request,omitempty"`
	// GenBusy is the load generator's own CPU time over the measured run
	// per core it may use (GOMAXPROCS; 1 when pinned): near 1, the
	// generator itself limits the rate and adds to the latencies, so a
	// row's figures say more about it than about the server.
	GenBusy float64 `json:"generator_cpu_busy,omitempty"`
	// ServerBusy is the server's CPU time, with its Redis's, over the
	// measured run per core it may use (one when pinned): near 1, the
	// server's core is saturated and the server is what limits the rate.
	ServerBusy float64 `json:"server_cpu_busy,omitempty"`

	// CeilingRatio is req/s over the ceiling's req/s for the same protocol
	// and mode (closed loop only).
	CeilingRatio *float64 `json:"node_over_ceiling,omitempty"`
	// RedisRatio is decisions/s over redis-benchmark's EVALSHA calls/s
	// against the same Redis (Redis store, closed loop only).
	RedisRatio *float64 `json:"node_over_redis,omitempty"`

	// ScriptCalls is the delta of Redis's evalsha+evalsha_ro+eval calls
	// (INFO commandstats) over the measured interval.
	ScriptCalls *int64 `json:"redis_script_calls,omitempty"`
	// ScriptPerAdmitted is ScriptCalls / Allowed, shown when nothing was
	// denied.
	ScriptPerAdmitted *float64 `json:"script_calls_per_admitted,omitempty"`
	// ScriptPerDenied is (ScriptCalls - Allowed) / Denied, shown when most
	// decisions were denied: each admitted decision is charged one call.
	ScriptPerDenied *float64 `json:"script_calls_per_denied,omitempty"`

	FirstError string `json:"first_error,omitempty"`

	// PairedCeiling is the req/s of the ceiling measured right before
	// this row (-pair); the ratios use it when set.
	PairedCeiling *float64 `json:"paired_ceiling_req_per_sec,omitempty"`
	// PairedCeilingCPU is that ceiling's CPU time per request.
	PairedCeilingCPU float64 `json:"paired_ceiling_cpu_us_per_request,omitempty"`
	// PairedCeilingP99Ms is that ceiling's p99 (open loop: at this row's
	// rate), PairedCeilingGenBusy its generator's busy share and
	// PairedCeilingServerBusy its server's.
	PairedCeilingP99Ms      *float64 `json:"paired_ceiling_p99_ms,omitempty"`
	PairedCeilingGenBusy    *float64 `json:"paired_ceiling_generator_busy,omitempty"`
	PairedCeilingServerBusy *float64 `json:"paired_ceiling_server_busy,omitempty"`
	// PairedWith names the node row a paired ceiling row (workload
	// pairedCeiling) was measured for.
	PairedWith string `json:"paired_with,omitempty"`
}

// pairedCeiling is the workload name of a ceiling row measured for one
// node row (-pair).
const pairedCeiling = "ceiling-paired"

// Machine describes where the run happened.
type Machine struct {
	NProc     int    `json:"nproc"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	Pinned    bool   `json:"pinned"`
	Pinning   string `json:"pinning"`
	// LoadAvg is /proc/loadavg at the start and at the end of the run:
	// other work on the machine skews every figure.
	LoadAvg [2]string `json:"loadavg"`
	// Steal is the share of the machine's CPU time, over the run, that a
	// hypervisor gave to other guests while this one had work (/proc/stat's
	// steal): on a shared VM it is what makes rows of one run disagree.
	// -1 where /proc/stat has no steal.
	Steal float64 `json:"steal"`
}

// Report is the whole run, as written by -out.
type Report struct {
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Machine Machine   `json:"machine"`
	Results []Result  `json:"results"`
	// Summary is every Goal measured in this run.
	Summary []GoalResult `json:"summary"`
}

func ptr[T any](v T) *T { return &v }

// serverCPU is the CPU time per request of the server and its Redis.
func (r *Result) serverCPU() float64 {
	if r.RedisCPUPerReqUs == nil {
		return r.CPUPerReqUs
	}
	return r.CPUPerReqUs + *r.RedisCPUPerReqUs
}

// cpuSplit says what serverCPU adds up: "node" or "node N + redis M".
func cpuSplit(r Result) string {
	if r.RedisCPUPerReqUs == nil {
		return "node"
	}
	return fmt.Sprintf("node %.1f + redis %.1f", r.CPUPerReqUs, *r.RedisCPUPerReqUs)
}

// setLatencies fills the latency and rate fields from samples.
func (r *Result) setLatencies(l Latencies) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	r.P50Ms, r.P95Ms, r.P99Ms, r.MaxMs = ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max)
}

// setScriptCalls records the Redis script calls made during the row and
// derives the per-decision figures.
func (r *Result) setScriptCalls(calls int64) {
	r.ScriptCalls = ptr(calls)
	switch {
	case r.Denied == 0 && r.Allowed > 0:
		r.ScriptPerAdmitted = ptr(float64(calls) / float64(r.Allowed))
	case r.Denied > 0 && r.Allowed > 0 && r.Denied < r.Allowed/100:
		// A few denials among many admissions: the admitted figure is
		// what this row measures.
		r.ScriptPerAdmitted = ptr(float64(calls) / float64(r.Allowed+r.Denied))
	case r.Denied > 0:
		extra := calls - r.Allowed
		if extra < 0 {
			extra = 0
		}
		r.ScriptPerDenied = ptr(float64(extra) / float64(r.Denied))
	}
}

// applyRatios sets the ceiling and Redis ratios of every node row from the
// ceiling rows (same protocol and mode) and the redis-benchmark row.
func applyRatios(rs []Result) {
	ceiling := map[string]float64{}
	var redisRate float64
	for _, r := range rs {
		switch {
		case r.Workload == "ceiling" && r.Mode == "closed":
			ceiling[r.Protocol] = r.ReqPerSec
		case r.Workload == "redis-benchmark":
			redisRate = r.ReqPerSec
		}
	}
	for i := range rs {
		r := &rs[i]
		if r.Mode != "closed" || r.Store == "ceiling" || r.Workload == "redis-benchmark" {
			continue
		}
		c := ceiling[r.Protocol]
		if r.PairedCeiling != nil {
			c = *r.PairedCeiling
		}
		if c > 0 {
			r.CeilingRatio = ptr(r.ReqPerSec / c)
		}
		if r.Store == "redis" && redisRate > 0 {
			r.RedisRatio = ptr(r.DecPerSec / redisRate)
		}
	}
}

// WriteTable prints rs as an aligned text table.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tmode\tprotocol\tstore\treq/s\tdecisions/s\tp50 ms\tp95 ms\tp99 ms\terrors\tCPU us/req\tgenerator busy\tserver busy\tnode/ceiling\tnode/redis\tscript/admitted\tscript/denied\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%d\t%.1f\t%.0f%%\t%.0f%%\t%s\t%s\t%s\t%s\t\n",
			r.Workload, modeLabel(r), r.Protocol, r.Store, r.ReqPerSec, r.DecPerSec,
			r.P50Ms, r.P95Ms, r.P99Ms, r.Errors, r.serverCPU(), 100*r.GenBusy, 100*r.ServerBusy,
			optf(r.CeilingRatio, 2), optf(r.RedisRatio, 2),
			optf(r.ScriptPerAdmitted, 3), optf(r.ScriptPerDenied, 3))
	}
	return tw.Flush()
}

func modeLabel(r Result) string {
	if r.Mode == "open" {
		return fmt.Sprintf("open@%.0f", r.Rate)
	}
	if r.Conns > 0 {
		return fmt.Sprintf("closed/%d", r.Conns)
	}
	return r.Mode
}

func optf(v *float64, prec int) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, *v)
}

// WriteJSON writes the report to path, indented.
func WriteJSON(path string, rep Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// machineInfo reads nproc and the CPU model of this machine.
func machineInfo() Machine {
	m := Machine{NProc: numCPU(), LoadAvg: [2]string{loadAvg()}}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// cpuTimes returns the machine's CPU time in all and the part of it stolen
// by the hypervisor, in ticks, from /proc/stat; ok is false where there is
// none.
func cpuTimes() (total, steal uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	return parseCPUTimes(string(b))
}

// parseCPUTimes reads /proc/stat's first line, "cpu  user nice system idle
// iowait irq softirq steal ...": the sum of its times, and steal, the
// eighth (ok is false when the line is not there or has fewer times).
func parseCPUTimes(stat string) (total, steal uint64, ok bool) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		// guest and guest_nice (9th and 10th) are already in user and nice.
		if i < 8 {
			total += n
		}
		if i == 7 {
			steal = n
		}
	}
	return total, steal, true
}

// stealShare returns the share of the CPU time between two cpuTimes
// readings that was stolen, or -1 when either reading failed.
func stealShare(t0, s0 uint64, ok0 bool, t1, s1 uint64, ok1 bool) float64 {
	if !ok0 || !ok1 || t1 <= t0 || s1 < s0 {
		return -1
	}
	return float64(s1-s0) / float64(t1-t0)
}

// loadAvg returns the first three fields of /proc/loadavg, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// Goal is one ratio the bench summarises: a node row's closed-loop rate
// over its protocol's ceiling, with the least ratio wanted (0: reported
// only), and the same row's open-loop p99 at half its peak against the
// ceiling's p99 at that same rate.
type Goal struct {
	Path     string // what is measured, for people
	Workload string
	Protocol string
	Store    string
	MinRatio float64
}

// MaxOpenP99OverCeiling is the most the node's open-loop p99 at half its
// peak may be, as a multiple of the ceiling's p99 offered the same rate.
const MaxOpenP99OverCeiling = 2.0

// Goals are the summary's rows: Envoy's RLS against the grpc-go ceiling
// and the Connect protocol (JSON, and protobuf, which has no goal of its
// own) against the trivial HTTP handler.
var Goals = []Goal{
	{"Envoy RLS, Redis, 10k keys allowed", "uniform10k", protoEnvoy, "redis", 0.6},
	{"Envoy RLS, Redis, hot key denied", "hotkey", protoEnvoy, "redis", 0.9},
	{"Envoy RLS, memory, 10k keys allowed", "uniform10k", protoEnvoy, "memory", 0},
	{"Envoy RLS, memory, hot key denied", "hotkey", protoEnvoy, "memory", 0},
	{"Connect JSON, Redis, 10k keys allowed", "uniform10k", protoJSON, "redis", 0.5},
	{"Connect JSON, Redis, hot key denied", "hotkey", protoJSON, "redis", 0.9},
	{"Connect JSON, memory, 10k keys allowed", "uniform10k", protoJSON, "memory", 0.75},
	{"Connect JSON, memory, hot key denied", "hotkey", protoJSON, "memory", 0.9},
	{"Connect protobuf, Redis, 10k keys allowed", "uniform10k", protoBinary, "redis", 0},
	{"Connect protobuf, memory, 10k keys allowed", "uniform10k", protoBinary, "memory", 0},
	{"Connect JSON, Redis, 100 keys in steady use", "steady100", protoJSON, "redis", 0},
	{"Connect JSON, memory, 100 keys in steady use", "steady100", protoJSON, "memory", 0},
	{"Connect JSON, Redis, 100 keys in steady use, omit_stats", "steady100-brief", protoJSON, "redis", 0},
	{"Connect JSON, memory, 100 keys in steady use, omit_stats", "steady100-brief", protoJSON, "memory", 0},
}

// GoalResult is a Goal as measured.
type GoalResult struct {
	Goal
	ReqPerSec        float64  `json:"req_per_sec"`
	CeilingReqPerSec float64  `json:"ceiling_req_per_sec"`
	Ratio            *float64 `json:"ratio,omitempty"`
	// GenBusy and CeilingGenBusy are the generator's busy share over the
	// node's row and over the ceiling's; ServerBusy and CeilingServerBusy
	// the server's core's (Result.ServerBusy).
	GenBusy           float64 `json:"generator_busy"`
	CeilingGenBusy    float64 `json:"ceiling_generator_busy"`
	ServerBusy        float64 `json:"server_busy,omitempty"`
	CeilingServerBusy float64 `json:"ceiling_server_busy,omitempty"`
	// Refused says why Ratio (or the open-loop comparison) measured the
	// load generator rather than the server: the generator was busier
	// than the run's -max-generator-busy while its server's core was less
	// busy than -min-server-busy (busyRule). A refused ratio is not met.
	Refused     string `json:"refused,omitempty"`
	OpenRefused string `json:"open_refused,omitempty"`
	// Unsteady says which closed-loop row of the pair left its server's
	// core less busy than -min-server-busy: that rate is a floor of the
	// server's, not its peak. It is reported, not refused.
	Unsteady string `json:"unsteady,omitempty"`
	// CPUPerReqUs is the node's CPU time per request (with its Redis's on
	// the Redis store), CeilingCPUPerReqUs the ceiling's: their ratio,
	// CPURatio, is the rate ratio the two would reach on a core each had
	// to itself, less skewed by other work on the machine than Ratio.
	CPUPerReqUs        float64  `json:"cpu_us_per_request,omitempty"`
	CeilingCPUPerReqUs float64  `json:"ceiling_cpu_us_per_request,omitempty"`
	CPURatio           *float64 `json:"cpu_ratio,omitempty"`
	OpenRate           float64  `json:"open_rate,omitempty"`
	OpenP99Ms          *float64 `json:"open_p99_ms,omitempty"`
	OpenUnsent         int64    `json:"open_unsent,omitempty"`
	OpenGenBusy        float64  `json:"open_generator_busy,omitempty"`
	// CeilingOpenP99Ms is the ceiling's p99 offered the node's open-loop
	// rate (its paired row's), CeilingOpenGenBusy its generator's share.
	CeilingOpenP99Ms   *float64 `json:"ceiling_open_p99_ms,omitempty"`
	CeilingOpenGenBusy float64  `json:"ceiling_open_generator_busy,omitempty"`
}

// RatioMet reports whether the rate ratio meets the goal: measured, not
// refused, and at least MinRatio (any, when MinRatio is 0).
func (g GoalResult) RatioMet() bool {
	return g.Ratio != nil && g.Refused == "" && *g.Ratio >= g.MinRatio
}

// OpenMet reports whether the open-loop p99 meets the goal: measured
// against the ceiling's at the same rate, not refused, with nothing
// left unsent, and at most MaxOpenP99OverCeiling times the ceiling's.
func (g GoalResult) OpenMet() bool {
	return g.OpenP99Ms != nil && g.CeilingOpenP99Ms != nil && g.OpenRefused == "" && g.OpenUnsent == 0 &&
		*g.OpenP99Ms <= MaxOpenP99OverCeiling**g.CeilingOpenP99Ms
}

// Met reports whether the goal's ratio and open-loop p99 are both met; a
// figure not measured does not meet it.
func (g GoalResult) Met() bool { return g.RatioMet() && g.OpenMet() }

// busy returns the row's busy shares.
func (r *Result) busy() busyShares { return busyShares{Gen: r.GenBusy, Server: r.ServerBusy} }

// pairedBusy returns the busy shares of the ceiling paired with the row,
// and whether it has one.
func (r *Result) pairedBusy() (busyShares, bool) {
	if r.PairedCeilingGenBusy == nil {
		return busyShares{}, false
	}
	b := busyShares{Gen: *r.PairedCeilingGenBusy}
	if r.PairedCeilingServerBusy != nil {
		b.Server = *r.PairedCeilingServerBusy
	}
	return b, true
}

// Summarize measures every Goal from rs; goals with no closed-loop row in
// rs are left out. A ratio whose ceiling row (or, for the open-loop p99,
// either row) measured its generator by rule is refused, and a closed-loop
// pair that left a server's core under rule.MinServer is unsteady.
func Summarize(rs []Result, rule busyRule) []GoalResult {
	type ceil struct {
		rate, cpu float64
		busy      busyShares
	}
	ceiling := map[string]ceil{}
	for _, r := range rs {
		if r.Workload == "ceiling" && r.Mode == modeClose {
			ceiling[r.Protocol] = ceil{r.ReqPerSec, r.CPUPerReqUs, r.busy()}
		}
	}
	var out []GoalResult
	for _, g := range Goals {
		c := ceiling[g.Protocol]
		gr := GoalResult{Goal: g, CeilingReqPerSec: c.rate, CeilingCPUPerReqUs: c.cpu}
		found := false
		for _, r := range rs {
			if r.Workload != g.Workload || r.Protocol != g.Protocol || r.Store != g.Store {
				continue
			}
			switch r.Mode {
			case modeClose:
				found = true
				gr.ReqPerSec, gr.GenBusy, gr.ServerBusy = r.ReqPerSec, r.GenBusy, r.ServerBusy
				if r.PairedCeiling != nil {
					gr.CeilingReqPerSec = *r.PairedCeiling
				}
				if r.PairedCeilingCPU > 0 {
					gr.CeilingCPUPerReqUs = r.PairedCeilingCPU
				}
				cb := c.busy
				if b, ok := r.pairedBusy(); ok {
					cb = b
				}
				gr.CeilingGenBusy, gr.CeilingServerBusy = cb.Gen, cb.Server
				if gr.CeilingReqPerSec > 0 {
					gr.Ratio = ptr(r.ReqPerSec / gr.CeilingReqPerSec)
				}
				gr.CPUPerReqUs = r.serverCPU()
				if gr.CPUPerReqUs > 0 && gr.CeilingCPUPerReqUs > 0 {
					gr.CPURatio = ptr(gr.CeilingCPUPerReqUs / gr.CPUPerReqUs)
				}
				// Only the ceiling's generator matters here: a node row
				// slower than its ceiling leaves the same generator idler.
				gr.Refused = rule.refusal(cb, busyShares{})
				gr.Unsteady = rule.unsteady(cb, r.busy())
			case modeOpen:
				gr.OpenRate, gr.OpenP99Ms, gr.OpenUnsent, gr.OpenGenBusy = r.Rate, ptr(r.P99Ms), r.Unsent, r.GenBusy
				if r.PairedCeilingP99Ms != nil {
					gr.CeilingOpenP99Ms = ptr(*r.PairedCeilingP99Ms)
				}
				cb, _ := r.pairedBusy()
				gr.CeilingOpenGenBusy = cb.Gen
				gr.OpenRefused = rule.refusal(cb, r.busy())
			}
		}
		if found {
			out = append(out, gr)
		}
	}
	return out
}

// Refusals lists the goals whose ratio or open-loop comparison was
// refused, one line each.
func Refusals(gs []GoalResult) []string {
	var out []string
	for _, g := range gs {
		if g.Refused != "" {
			out = append(out, g.Path+": ratio refused: "+g.Refused)
		}
		if g.OpenRefused != "" {
			out = append(out, g.Path+": open-loop p99 refused: "+g.OpenRefused)
		}
	}
	return out
}

// Unsteadies lists the closed-loop pairs that left a server's core less
// busy than rule.MinServer, one line each: the goals' (gs) and the peers'
// rows of rs with the ceilings measured right before them.
func Unsteadies(gs []GoalResult, rs []Result, rule busyRule) []string {
	var out []string
	for _, g := range gs {
		if g.Unsteady != "" {
			out = append(out, g.Path+": "+g.Unsteady)
		}
	}
	for _, r := range rs {
		if !isPeer(r.Store) || r.Mode != modeClose {
			continue
		}
		cb, ok := r.pairedBusy()
		if !ok {
			continue
		}
		if u := rule.unsteady(cb, r.busy()); u != "" {
			out = append(out, rowName(r.Workload, r.Mode, r.Protocol, r.Store)+": "+u)
		}
	}
	return out
}

// WriteSummary prints the goals as a table.
func WriteSummary(w io.Writer, gs []GoalResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "path\treq/s\tceiling req/s\tgenerator busy (node / ceiling)\tserver busy (node / ceiling)\tratio\tratio goal\tCPU us/req\tceiling CPU us/req\tCPU ratio\topen p99 ms @ req/s\tceiling p99 ms\tgenerator busy (node / ceiling)\tp99 goal\tmet\t")
	for _, g := range gs {
		goal := "-"
		if g.MinRatio > 0 {
			goal = fmt.Sprintf(">= %.2f", g.MinRatio)
		}
		ratio := optf(g.Ratio, 2)
		if g.Refused != "" {
			ratio = "refused (" + ratio + ")"
		}
		p99, cp99, obusy := "-", optf(g.CeilingOpenP99Ms, 2), "-"
		if g.OpenP99Ms != nil {
			p99 = fmt.Sprintf("%.2f @ %.0f", *g.OpenP99Ms, g.OpenRate)
			if g.OpenUnsent > 0 {
				p99 += fmt.Sprintf(" (%d unsent)", g.OpenUnsent)
			}
			obusy = fmt.Sprintf("%.0f%% / %.0f%%", 100*g.OpenGenBusy, 100*g.CeilingOpenGenBusy)
			if g.OpenRefused != "" {
				p99 = "refused (" + p99 + ")"
			}
		}
		met := func(ok bool) string {
			if ok {
				return "yes"
			}
			return "no"
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f%% / %.0f%%\t%.0f%% / %.0f%%\t%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t<= %.0fx ceiling\tratio %s, p99 %s\t\n",
			g.Path, g.ReqPerSec, g.CeilingReqPerSec, 100*g.GenBusy, 100*g.CeilingGenBusy, 100*g.ServerBusy, 100*g.CeilingServerBusy, ratio, goal,
			g.CPUPerReqUs, g.CeilingCPUPerReqUs, optf(g.CPURatio, 2), p99, cp99, obusy, MaxOpenP99OverCeiling,
			met(g.RatioMet()), met(g.OpenMet()))
	}
	return tw.Flush()
}

// WritePeers prints every peer row's rate over its paired ceiling, beside
// the node's own row for the same workload (its Redis row beside
// envoyproxy/ratelimit, its memory row beside gubernator); nothing when
// the run measured no peer.
func WritePeers(w io.Writer, rs []Result) error {
	var peers []Result
	for _, r := range rs {
		if isPeer(r.Store) && r.Mode == modeClose {
			peers = append(peers, r)
		}
	}
	if len(peers) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\npeers: closed loop, each over the ceiling measured right before it, beside rlcluster's row of the same workload")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "peer\tworkload\tprotocol\treq/s\tceiling req/s\tratio\tgenerator busy\tCPU us/req\trlcluster req/s\trlcluster ratio\trlcluster CPU us/req\t")
	for _, p := range peers {
		store := "redis"
		if p.Store == storePeerGubernator {
			store = "memory"
		}
		ours := "-\t-\t-"
		for _, r := range rs {
			if r.Store == store && r.Workload == p.Workload && r.Protocol == p.Protocol && r.Mode == modeClose {
				ours = fmt.Sprintf("%.0f\t%s\t%.1f", r.ReqPerSec, optf(r.CeilingRatio, 2), r.serverCPU())
			}
		}
		ceil := 0.0
		if p.PairedCeiling != nil {
			ceil = *p.PairedCeiling
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.0f\t%s\t%.0f%%\t%.1f\t%s\t\n", p.Store, p.Workload, p.Protocol, p.ReqPerSec, ceil,
			optf(p.CeilingRatio, 2), 100*p.GenBusy, p.serverCPU(), ours)
	}
	return tw.Flush()
}
