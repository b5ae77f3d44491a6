package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlcluster/rlcluster/loadtest/internal/procs"
	"github.com/rlcluster/rlcluster/loadtest/internal/rlbuild"
)

// benchScript is the script redis-benchmark calls: the shape of a sliding
// window decision (increment this region's field of the current bucket, set
// its TTL on first use, read the previous bucket).
const benchScript = `local cur = redis.call('HINCRBY', KEYS[1], 'r', ARGV[1])
if cur == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
local prev = tonumber(redis.call('HGET', KEYS[2], 'r') or '0')
if cur + prev <= tonumber(ARGV[2]) then return 1 end
return 0`

// StartRedis starts a redis-server without persistence on a free loopback
// port and returns it with its address.
func StartRedis(ctx context.Context, p *procs.Group, bin string) (*procs.Proc, string, error) {
	var last error
	for range 5 {
		port, err := rlbuild.FreePort()
		if err != nil {
			return nil, "", err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		pr, err := p.Start("redis-server", bin, nil, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", p.Dir, "--protected-mode", "no")
		if err != nil {
			return nil, "", err
		}
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		last = pr.WaitReady(ctx, 10*time.Second, func() error { return c.Ping(ctx).Err() })
		c.Close()
		if last == nil {
			return pr, addr, nil
		}
		pr.Stop()
	}
	return nil, "", fmt.Errorf("start redis-server: %w", last)
}

// ScriptCalls returns how many script calls (EVAL, EVALSHA and their _ro
// forms) the Redis at addr has served, from INFO commandstats.
func ScriptCalls(ctx context.Context, addr string) (int64, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("info commandstats: %w", err)
	}
	return ParseScriptCalls(s), nil
}

// ParseScriptCalls sums the calls of eval, evalsha, eval_ro and evalsha_ro
// in an INFO commandstats reply.
func ParseScriptCalls(info string) int64 {
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch name {
		case "cmdstat_eval", "cmdstat_evalsha", "cmdstat_eval_ro", "cmdstat_evalsha_ro":
		default:
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

// RedisBench runs redis-benchmark's EVALSHA of benchScript against addr
// with conns connections for n calls over 10k random keys, pinned like the
// load generator when pin is non-empty ({taskset, -c, cpu}).
func RedisBench(ctx context.Context, bin, addr string, conns int, n int64, pin []string) (Result, error) {
	host, port, _ := strings.Cut(addr, ":")
	c := redis.NewClient(&redis.Options{Addr: addr})
	sha, err := c.ScriptLoad(ctx, benchScript).Result()
	c.Close()
	if err != nil {
		return Result{}, fmt.Errorf("script load: %w", err)
	}
	argv := append(append([]string{}, pin...), bin, "-h", host, "-p", port,
		"-c", strconv.Itoa(conns), "-n", strconv.FormatInt(n, 10), "-r", "10000", "--csv",
		"EVALSHA", sha, "2", "rlb:{__rand_int__}:c", "rlb:{__rand_int__}:p", "1", "1000000000", "120000")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.Output()
	if err != nil {
		return Result{}, fmt.Errorf("redis-benchmark: %w: %s", err, out)
	}
	r, err := ParseRedisBenchCSV(string(out))
	if err != nil {
		return Result{}, err
	}
	r.Conns = conns
	r.Requests = n
	return r, nil
}

// ParseRedisBenchCSV reads redis-benchmark --csv output (one test) into a
// Result.
func ParseRedisBenchCSV(out string) (Result, error) {
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		return Result{}, fmt.Errorf("parse redis-benchmark csv: %w", err)
	}
	if len(recs) < 2 || len(recs[0]) < 7 || len(recs[1]) < len(recs[0]) {
		return Result{}, fmt.Errorf("parse redis-benchmark csv: unexpected output %q", out)
	}
	col := map[string]float64{}
	for i, h := range recs[0] {
		if v, err := strconv.ParseFloat(recs[1][i], 64); err == nil {
			col[h] = v
		}
	}
	rps, ok := col["rps"]
	if !ok || rps <= 0 {
		return Result{}, fmt.Errorf("parse redis-benchmark csv: no rps in %q", out)
	}
	return Result{
		Workload: "redis-benchmark", Mode: "closed", Protocol: "resp", Store: "redis-server",
		PerCall: 1, ReqPerSec: rps, DecPerSec: rps,
		P50Ms: col["p50_latency_ms"], P95Ms: col["p95_latency_ms"], P99Ms: col["p99_latency_ms"], MaxMs: col["max_latency_ms"],
	}, nil
}

// redisBenchmark measures redis-benchmark's EVALSHA rate against addr,
// sized to last about -duration.
func (h *harness) redisBenchmark(ctx context.Context, addr string) error {
	n := int64(20000)
	if !h.cfg.Short {
		cal, err := RedisBench(ctx, h.cfg.RedisBench, addr, h.cfg.Conns, n, h.pinGen)
		if err != nil {
			return err
		}
		n = max(int64(cal.ReqPerSec*h.cfg.Duration.Seconds()), n)
	}
	res, err := RedisBench(ctx, h.cfg.RedisBench, addr, h.cfg.Conns, n, h.pinGen)
	if err != nil {
		return err
	}
	res.Seconds = float64(n) / res.ReqPerSec
	h.results = append(h.results, res)
	fmt.Fprintf(h.out, "%-44s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  (EVALSHA, %d calls)\n",
		"redis-benchmark/closed/resp/redis-server", res.ReqPerSec, res.P50Ms, res.P99Ms, n)
	return nil
}
