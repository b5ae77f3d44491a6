package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Values of -json-generator: what drives the closed-loop Connect JSON rows.
const (
	genWrk = "wrk" // wrk (C, one thread), with a Lua script of prepared bodies
	genGo  = "go"  // this binary's own net/http client
)

// wrkScript is the Lua script wrk runs: the workload's prepared requests
// (formatted once, in init), one drawn at random per request, at most max
// of them in all (0: no bound), and at the end one line of figures for
// parseWrk. wrk's latencies are in microseconds.
const wrkScript = `
local reqs = {}
local sent = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = contentType
init = function(args)
  for i = 1, #bodies do
    reqs[i] = wrk.format("POST", path, nil, bodies[i])
  end
end
request = function()
  sent = sent + 1
  if max > 0 and sent >= max then
    wrk.thread:stop()
  end
  return reqs[math.random(#reqs)]
end
done = function(s, latency, requests)
  io.write(string.format("RLBENCH %d %d %d %d %d %d %d %d %d %d %d\n",
    s.requests, s.duration, s.errors.connect, s.errors.read, s.errors.write,
    s.errors.status, s.errors.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max))
end
`

// writeWrkScript writes the script for w's requests in protocol's
// encoding (see Workload.bodies) to dir and returns its path.
func writeWrkScript(dir string, w *Workload, protocol string, maxRequests int64) (string, error) {
	var b strings.Builder
	path := checkPath
	switch {
	case w.Path != "":
		path = w.Path
	case w.batch != nil:
		path = batchPath
	}
	bodies, ct := w.bodies(protocol)
	fmt.Fprintf(&b, "path = %q\nmax = %d\ncontentType = %q\nbodies = {\n", path, maxRequests, ct)
	for _, body := range bodies {
		if protocol == protoBinary {
			b.WriteString(luaString(body))
			b.WriteString(",\n")
			continue
		}
		// Lua's long brackets take the JSON verbatim; level 3 cannot
		// occur in it.
		fmt.Fprintf(&b, "[===[%s]===],\n", body)
	}
	b.WriteString("}\n")
	b.WriteString(wrkScript)
	f := filepath.Join(dir, fmt.Sprintf("wrk-%s-%s-%d.lua", w.Name, protocol, len(bodies)))
	if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
		return "", fmt.Errorf("write wrk script: %w", err)
	}
	return f, nil
}

// wrkOutcome is what one wrk run measured: the Outcome (without allowed
// and denied counts, which wrk does not parse) and wrk's own CPU time.
type wrkOutcome struct {
	Outcome
	CPU time.Duration
}

// luaString returns b as a Lua string literal, each byte a decimal
// escape, so that any bytes pass.
func luaString(b []byte) string {
	var s strings.Builder
	s.WriteByte('"')
	for _, c := range b {
		fmt.Fprintf(&s, "\\%d", c)
	}
	s.WriteByte('"')
	return s.String()
}

// runWrk drives w at base with wrk for d over conns connections, one
// thread, prefixed by pin (taskset) when set, its bodies in protocol's
// encoding.
func runWrk(ctx context.Context, bin string, pin []string, dir, base string, w *Workload, protocol string, conns int, d time.Duration, maxRequests int64) (wrkOutcome, error) {
	script, err := writeWrkScript(dir, w, protocol, maxRequests)
	if err != nil {
		return wrkOutcome{}, err
	}
	args := append(append([]string{}, pin...), bin, "-t1", "-c"+strconv.Itoa(conns),
		"-d"+strconv.Itoa(max(int(d.Round(time.Second)/time.Second), 1))+"s", "--timeout", "10s", "-s", script, base)
	rctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(rctx, args[0], args[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return wrkOutcome{}, fmt.Errorf("wrk: %w: %.300s", err, errb.String())
	}
	o, err := parseWrk(out.String())
	if err != nil {
		return wrkOutcome{}, err
	}
	o.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return o, nil
}

// parseWrk reads the RLBENCH line that wrkScript's done writes.
func parseWrk(out string) (wrkOutcome, error) {
	var o wrkOutcome
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 12 || f[0] != "RLBENCH" {
			continue
		}
		var v [11]int64
		for i := range v {
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				return o, fmt.Errorf("wrk output %q: %w", sc.Text(), err)
			}
			v[i] = n
		}
		us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
		errs := v[2] + v[3] + v[4] + v[5] + v[6]
		// wrk counts a non-2xx answer (status) in its requests as well.
		o.Requests = v[0] - v[5]
		o.Errors = errs
		o.Elapsed = us(v[1])
		o.Latencies = Latencies{P50: us(v[7]), P95: us(v[8]), P99: us(v[9]), Max: us(v[10])}
		if errs > 0 {
			o.FirstErr = fmt.Errorf("wrk: %d connect, %d read, %d write, %d non-2xx, %d timeout errors", v[2], v[3], v[4], v[5], v[6])
		}
		if o.Elapsed <= 0 {
			return o, fmt.Errorf("wrk output %q: no duration", sc.Text())
		}
		return o, nil
	}
	return o, fmt.Errorf("wrk output has no RLBENCH line: %.300s", out)
}

// nodeCounters are a node's counters from its /metrics.
type nodeCounters struct {
	allowed, denied int64
	// mallocs and allocBytes are Go's heap allocations so far
	// (go_memstats_mallocs_total, go_memstats_alloc_bytes_total): per
	// request, a cost that other work on the machine does not skew.
	mallocs, allocBytes float64
}

// decisionCounts returns a node's allowed and denied decisions so far,
// summed over rules, from its /metrics.
func decisionCounts(ctx context.Context, base string) (allowed, denied int64, err error) {
	c, err := scrapeNode(ctx, base)
	return c.allowed, c.denied, err
}

// scrapeNode reads a node's counters from its /metrics.
func scrapeNode(ctx context.Context, base string) (nodeCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nodeCounters{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nodeCounters{}, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nodeCounters{}, fmt.Errorf("scrape metrics: %w", err)
	}
	var c nodeCounters
	c.allowed, c.denied = parseDecisions(string(b))
	c.mallocs = metricValue(string(b), "go_memstats_mallocs_total")
	c.allocBytes = metricValue(string(b), "go_memstats_alloc_bytes_total")
	return c, nil
}

// metricValue returns the value of the unlabelled metric name, 0 when
// there is none.
func metricValue(metrics, name string) float64 {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return 0
}

// parseDecisions sums rlcluster_decisions_total by outcome.
func parseDecisions(metrics string) (allowed, denied int64) {
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, "rlcluster_decisions_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(line, `outcome="allowed"`):
			allowed += int64(v)
		case strings.Contains(line, `outcome="denied"`):
			denied += int64(v)
		}
	}
	return allowed, denied
}
