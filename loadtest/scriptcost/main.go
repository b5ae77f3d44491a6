// Command scriptcost counts the instructions Redis spends per decision of
// the counter script in each sliding window mode: it starts redis-server
// under valgrind's callgrind, makes the same sequential decisions on a key
// whose previous and current buckets hold two other regions' counts (with
// their trails for the default mode; counts alone for the
// two-bucket counter, as its regions report them), and prints the
// instructions Redis executed per decision in each mode (reading the
// request, running it, writing the reply), read from a callgrind dump taken
// around each mode's decisions. Instruction counts do
// not depend on the machine's load, so modes compare exactly.
//
// It then counts the default mode as loadtest/bench's uniform10k rows run
// it: one region, 2,000 keys each with a previous and a current bucket,
// decided in calls of 8 (one batch script call each, as coalescing makes
// them), at the wall clock's instant, with the node's clock and with
// Redis's (ServerClock, rlnode's default). The window is an hour, so that
// both rows fall in the same bucket, and almost always in the same half of
// it, the one thing the wall clock changes.
//
// Usage:
//
//	go run ./loadtest/scriptcost [-n 1000] [-valgrind valgrind] [-redis-server redis-server]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
	"github.com/rlcluster/rlcluster/loadtest/internal/command"
	"github.com/rlcluster/rlcluster/loadtest/internal/rlbuild"
)

func main() { command.Main("scriptcost", run) }

// mode is one counter mode measured.
type mode struct {
	name   string
	limit  window.Limit
	halves bool // the other regions report halves
	peek   bool
}

var modes = []mode{
	{name: "two-bucket", limit: window.Limit{Algorithm: window.SlidingWindowTwoBucket}},
	{name: "default", limit: window.Limit{}, halves: true},
	{name: "default, exact (limit 1000)", limit: window.Limit{Limit: 1000}, halves: true},
	{name: "two-bucket, peek", limit: window.Limit{Algorithm: window.SlidingWindowTwoBucket}, peek: true},
	{name: "default, peek", limit: window.Limit{}, halves: true, peek: true},
	{name: "two-bucket on a hash with trails", limit: window.Limit{Algorithm: window.SlidingWindowTwoBucket}, halves: true},
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("scriptcost", flag.ContinueOnError)
	fs.SetOutput(out)
	n := fs.Int("n", 1000, "decisions per mode")
	vg := fs.String("valgrind", "valgrind", "valgrind binary")
	rs := fs.String("redis-server", "redis-server", "redis-server binary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("-n %d: want at least 1", *n)
	}
	dir, err := os.MkdirTemp("", "scriptcost-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	port, err := rlbuild.FreePort()
	if err != nil {
		return err
	}
	// Only a request's reading, running and reply writing count: Redis's
	// timers (serverCron) run by wall time, which valgrind and a busy
	// machine stretch.
	cmd := exec.CommandContext(ctx, *vg, "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "out"),
		"--toggle-collect=readQueryFromClient", "--toggle-collect=writeToClient",
		*rs, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server under callgrind: %w", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := strconv.Itoa(cmd.Process.Pid)
	url := fmt.Sprintf("redis://127.0.0.1:%d", port)
	s, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(out, "Redis instructions per decision of the counter script (callgrind), %d sequential decisions per mode on a key whose buckets hold two other regions' counts:\n\n", *n)
	fmt.Fprintln(out, "| mode | instructions per decision |")
	fmt.Fprintln(out, "| --- | ---: |")
	for i, m := range modes {
		key := fmt.Sprintf("scriptcost/%d", i)
		if err := seed(ctx, s, key, m); err != nil {
			return err
		}
		l := m.limit
		l.Window = time.Minute
		if l.Limit == 0 {
			l.Limit = 1 << 40
		}
		start := time.UnixMilli(1_760_000_040_000).Truncate(time.Minute)
		reqs, res := make([]region.Request, 1), make([]region.Result, 1)
		check := func(at time.Time) error {
			reqs[0] = region.Request{Key: key, Limit: l, Hits: 1, Peek: m.peek, Now: at}
			if err := s.Check(ctx, reqs, res); err != nil {
				return fmt.Errorf("check: %w", err)
			}
			return nil
		}
		// One decision loads the script and makes the key's state.
		if err := check(start.Add(23 * time.Second)); err != nil {
			return err
		}
		if err := callgrind(ctx, "-z", pid); err != nil {
			return err
		}
		for k := range *n {
			if err := check(start.Add(24*time.Second + time.Duration(k%4096)*time.Millisecond)); err != nil {
				return err
			}
		}
		if err := callgrind(ctx, "-d", pid); err != nil {
			return err
		}
		ir, err := dumped(dir, i+1)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "| %s | %d |\n", m.name, ir/int64(*n))
	}
	if n := s.Mismatches(); n != 0 {
		return fmt.Errorf("%d decisions of the script disagreed with the Go math", n)
	}
	for k, server := range []bool{false, true} {
		ir, n, err := batched(ctx, url, pid, dir, len(modes)+k+1, server)
		if err != nil {
			return err
		}
		name := "default, one region, calls of 8"
		if server {
			name += ", Redis's clock"
		}
		fmt.Fprintf(out, "| %s | %d |\n", name, ir/int64(n))
	}
	return nil
}

// batched makes two passes of decisions in calls of 8 over 2,000 keys of
// one region, each with a previous and a current bucket, and returns the
// instructions of the second pass (callgrind's dump number dump) and its
// number of decisions. With server the instant is Redis's clock.
func batched(ctx context.Context, url, pid, dir string, dump int, server bool) (int64, int, error) {
	cfg := region.RedisConfig{URL: url, Region: "bench", ReadTimeout: time.Minute, Coalesce: region.Coalesce{Disabled: true}}
	seed, err := region.NewRedis(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer seed.Close()
	cfg.ServerClock = server
	s, err := region.NewRedis(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	const keys, batch = 2000, 8
	l := window.Limit{Limit: 1 << 30, Window: time.Hour}
	prefix := fmt.Sprintf("batched/%v/", server)
	reqs, res := make([]region.Request, batch), make([]region.Result, batch)
	check := func(st *region.Redis, k0 int, at time.Time) error {
		for i := range reqs {
			reqs[i] = region.Request{Key: prefix + strconv.Itoa((k0+i)%keys), Limit: l, Hits: 1, Now: at}
		}
		if err := st.Check(ctx, reqs, res); err != nil {
			return fmt.Errorf("check: %w", err)
		}
		return nil
	}
	// The previous bucket, starting at t0, gets hits in both halves.
	t0 := time.Now().Truncate(l.Window).Add(-l.Window)
	for k := 0; k < keys; k += batch {
		if err := check(seed, k, t0.Add(10*time.Minute)); err != nil {
			return 0, 0, err
		}
		if err := check(seed, k, t0.Add(40*time.Minute)); err != nil {
			return 0, 0, err
		}
		if err := check(s, k, time.Now()); err != nil {
			return 0, 0, err
		}
	}
	if err := callgrind(ctx, "-z", pid); err != nil {
		return 0, 0, err
	}
	for k := 0; k < keys; k += batch {
		if err := check(s, k, time.Now()); err != nil {
			return 0, 0, err
		}
	}
	if err := callgrind(ctx, "-d", pid); err != nil {
		return 0, 0, err
	}
	if n := s.Mismatches() + seed.Mismatches(); n != 0 {
		return 0, 0, fmt.Errorf("%d decisions of the script disagreed with the Go math", n)
	}
	ir, err := dumped(dir, dump)
	return ir, keys, err
}

// connect waits for Redis (slow to start under valgrind) and returns a
// store on it that decides one request per script call.
func connect(ctx context.Context, url string) (*region.Redis, error) {
	deadline := time.Now().Add(60 * time.Second)
	addr := strings.TrimPrefix(url, "redis://")
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("connect to redis-server under callgrind: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		s, err := region.NewRedis(ctx, region.RedisConfig{URL: url, Region: "here", Coalesce: region.Coalesce{Disabled: true}})
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("connect to redis-server under callgrind: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// seed merges two other regions' counts of the previous and current
// bucket, with their trails when m says so.
func seed(ctx context.Context, s *region.Redis, key string, m mode) error {
	w := time.Minute
	wMs := w.Milliseconds()
	b := window.Bucket(1_760_000_040_000, w)
	var totals []region.Total
	for r, name := range []string{"r1", "r2"} {
		for _, bb := range []int64{b - 1, b} {
			var h window.Trail
			for i := int64(0); i < 200; i++ {
				h.Add((i*277+int64(r)*1000)%wMs, wMs, 3, false)
			}
			t := region.Total{Key: key, Window: w, Bucket: bb, Region: name, Count: h.Count()}
			if m.halves {
				t.Trail = h
			}
			totals = append(totals, t)
		}
	}
	if err := s.Merge(ctx, totals); err != nil {
		return fmt.Errorf("seed %s: %w", key, err)
	}
	return nil
}

// callgrind runs callgrind_control with a command (-z zero, -d dump) for
// pid.
func callgrind(ctx context.Context, cmd, pid string) error {
	if out, err := exec.CommandContext(ctx, "callgrind_control", cmd, pid).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", cmd, err, out)
	}
	return nil
}

// dumped returns the instructions of callgrind's k-th dump in dir.
func dumped(dir string, k int) (int64, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "out*."+strconv.Itoa(k)))
	if err != nil || len(matches) != 1 {
		return 0, fmt.Errorf("find callgrind dump %d: %v (%d files)", k, err, len(matches))
	}
	f, err := os.Open(matches[0])
	if err != nil {
		return 0, fmt.Errorf("read callgrind dump: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary: "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no summary in %s", matches[0])
}
