// Command keyflood measures an rlnode's memory under a key-cardinality
// flood: it builds and starts rlnode (in-memory store, gossip on with no
// peers, so that the replication sets fill as in production), sends N
// distinct keys over CheckBatch in batches, and reads the node's VmRSS and
// VmHWM from /proc/<pid>/status and its key, eviction and gossip gauges from
// /metrics as the flood goes on. It is bounded in count (-keys) and time
// (-timeout), and fails when -max-rss is set and VmHWM exceeds it.
//
// Usage:
//
//	go run ./loadtest/keyflood [-keys 1000000] [-batch 1000] [-max-keys 1000000] [-conns 4] [-max-rss 0] [-timeout 5m]
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlcluster/rlcluster/loadtest/internal/command"
	"github.com/rlcluster/rlcluster/loadtest/internal/procs"
	"github.com/rlcluster/rlcluster/loadtest/internal/rlbuild"
)

func main() {
	command.Main("keyflood", func(ctx context.Context, args []string, out io.Writer) error {
		_, err := run(ctx, args, out)
		return err
	})
}

// config is the flood's configuration, from flags.
type config struct {
	Keys     int
	Batch    int
	MaxKeys  int
	Conns    int
	MaxRSS   int64 // bytes; 0: no check
	Timeout  time.Duration
	Rlnode   string
	Every    int
	Window   string
	NodeArgs []string
}

// Sample is one reading of the node during the flood.
type Sample struct {
	Keys    int   // distinct keys sent so far
	RSS     int64 // VmRSS, bytes
	HWM     int64 // VmHWM, bytes
	Metrics map[string]float64
}

// Result is the flood's outcome.
type Result struct {
	Samples []Sample
	Elapsed time.Duration
	Errors  int64
}

// watched are the /metrics series each sample reads.
var watched = []string{
	"rlcluster_keys_held",
	"rlcluster_keys_evicted_total",
	"rlcluster_gossip_dirty_totals",
	"rlcluster_gossip_touched_buckets",
	`rlcluster_gossip_dropped_total{reason="dirty_full"}`,
	`rlcluster_gossip_dropped_total{reason="touched_full"}`,
	"go_memstats_heap_inuse_bytes",
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	var maxRSS string
	var extra string
	fs := flag.NewFlagSet("keyflood", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&c.Keys, "keys", 1_000_000, "distinct keys to send")
	fs.IntVar(&c.Batch, "batch", 1000, "checks per CheckBatch")
	fs.IntVar(&c.MaxKeys, "max-keys", 1_000_000, "rlnode --max-keys")
	fs.IntVar(&c.Conns, "conns", 4, "concurrent senders")
	fs.StringVar(&maxRSS, "max-rss", "0", "fail when the node's VmHWM exceeds this many MiB (0: no check)")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.StringVar(&c.Rlnode, "rlnode", "", "rlnode binary; default: build ./cmd/rlnode")
	fs.IntVar(&c.Every, "every", 100_000, "sample every this many keys")
	fs.StringVar(&extra, "args", "", "extra rlnode flags, space-separated")
	fs.StringVar(&c.Window, "window", "3600s", "the keys' window (a protobuf JSON duration); the default keeps every key alive during the flood")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	mb, err := strconv.ParseInt(maxRSS, 10, 64)
	if err != nil || mb < 0 {
		return c, fmt.Errorf("-max-rss %q: want a whole number of MiB", maxRSS)
	}
	c.MaxRSS = mb << 20
	if c.Keys < 1 || c.Batch < 1 || c.Conns < 1 || c.MaxKeys < 1 || c.Every < 1 {
		return c, errors.New("-keys, -batch, -conns, -max-keys and -every must be at least 1")
	}
	c.NodeArgs = strings.Fields(extra)
	return c, nil
}

// run floods a fresh rlnode and prints a table of samples to out.
func run(ctx context.Context, args []string, out io.Writer) (*Result, error) {
	c, err := parseFlags(args, out)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "keyflood")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := c.Rlnode
	if bin == "" {
		if bin, err = rlbuild.Rlnode(ctx, dir); err != nil {
			return nil, err
		}
	}
	ports, err := rlbuild.FreePorts(2)
	if err != nil {
		return nil, err
	}
	apiPort, gossipPort := ports[0], ports[1]
	base := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	nodeArgs := append([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", apiPort), "--max-keys", strconv.Itoa(c.MaxKeys),
		"--gossip-addr", fmt.Sprintf("127.0.0.1:%d", gossipPort), "--node-name", "flood", "--log-level", "warn"}, c.NodeArgs...)
	children := &procs.Group{Dir: dir}
	defer children.Close()
	node, err := children.Start("rlnode", bin, nil, nodeArgs...)
	if err != nil {
		return nil, err
	}
	if err := node.WaitReady(ctx, 30*time.Second, procs.HTTPOK(ctx, base+"/readyz")); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "rlnode pid %d: %s\n", node.Pid(), strings.Join(nodeArgs, " "))
	fmt.Fprintf(out, "%d distinct keys (window %s) in CheckBatch calls of %d over %d connections\n\n", c.Keys, c.Window, c.Batch, c.Conns)

	res := &Result{}
	sample := func(keys int) error {
		s := Sample{Keys: keys}
		if s.RSS, s.HWM, err = procStatus(node.Pid()); err != nil {
			return err
		}
		if s.Metrics, err = scrape(ctx, base); err != nil {
			return err
		}
		res.Samples = append(res.Samples, s)
		return nil
	}
	if err := sample(0); err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.Conns}}
	start := time.Now()
	var failed atomic.Int64
	for done := 0; done < c.Keys; {
		chunk := min(c.Every, c.Keys-done)
		if err := flood(ctx, client, base, done, chunk, c, &failed); err != nil {
			return nil, err
		}
		done += chunk
		if err := sample(done); err != nil {
			return nil, err
		}
	}
	res.Elapsed = time.Since(start)
	res.Errors = failed.Load()
	printTable(out, res)
	last := res.Samples[len(res.Samples)-1]
	if c.MaxRSS > 0 && last.HWM > c.MaxRSS {
		return res, fmt.Errorf("VmHWM %d MiB exceeds -max-rss %d MiB", last.HWM>>20, c.MaxRSS>>20)
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("%d CheckBatch calls failed", res.Errors)
	}
	return res, nil
}

// flood sends keys [from, from+n) in batches over c.Conns senders.
func flood(ctx context.Context, client *http.Client, base string, from, n int, c config, errs *atomic.Int64) error {
	batches := make(chan int)
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for range c.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body bytes.Buffer
			for b := range batches {
				body.Reset()
				body.WriteString(`{"checks":[`)
				for i := b; i < min(b+c.Batch, from+n); i++ {
					if i > b {
						body.WriteByte(',')
					}
					fmt.Fprintf(&body, `{"key":"flood-%08d","limit":{"limit":100,"window":%q}}`, i, c.Window)
				}
				body.WriteString(`]}`)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/ratelimit.v1.RateLimitService/CheckBatch", bytes.NewReader(body.Bytes()))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					errs.Add(1)
					once.Do(func() { firstErr = err })
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs.Add(1)
				}
			}
		}()
	}
	for b := from; b < from+n; b += c.Batch {
		select {
		case batches <- b:
		case <-ctx.Done():
			close(batches)
			wg.Wait()
			return ctx.Err()
		}
	}
	close(batches)
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if firstErr != nil && errs.Load() > int64(n/c.Batch/10) {
		return fmt.Errorf("CheckBatch: %w", firstErr)
	}
	return nil
}

func printTable(out io.Writer, res *Result) {
	fmt.Fprintf(out, "%9s %9s %9s %10s %10s %9s %9s %11s %12s %10s\n", "keys", "VmRSS", "VmHWM", "heap inuse",
		"keys held", "evicted", "dirty", "touched", "dirty_full", "touch_full")
	for _, s := range res.Samples {
		m := s.Metrics
		fmt.Fprintf(out, "%9d %6d MiB %6d MiB %6.0f MiB %10.0f %9.0f %9.0f %11.0f %12.0f %10.0f\n", s.Keys, s.RSS>>20, s.HWM>>20,
			m["go_memstats_heap_inuse_bytes"]/(1<<20), m["rlcluster_keys_held"], m["rlcluster_keys_evicted_total"],
			m["rlcluster_gossip_dirty_totals"], m["rlcluster_gossip_touched_buckets"],
			m[`rlcluster_gossip_dropped_total{reason="dirty_full"}`], m[`rlcluster_gossip_dropped_total{reason="touched_full"}`])
	}
	fmt.Fprintf(out, "\n%d keys in %v (%.0f keys/s), %d failed calls\n", res.Samples[len(res.Samples)-1].Keys,
		res.Elapsed.Round(time.Millisecond), float64(res.Samples[len(res.Samples)-1].Keys)/res.Elapsed.Seconds(), res.Errors)
}

// procStatus reads VmRSS and VmHWM (bytes) of pid.
func procStatus(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, fmt.Errorf("read rlnode's memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm, sc.Err()
}

// scrape reads the watched series from /metrics.
func scrape(ctx context.Context, base string) (map[string]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape /metrics: %w", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, w := range watched {
			if rest, ok := strings.CutPrefix(line, w+" "); ok {
				v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				out[w] = v
			}
		}
	}
	return out, sc.Err()
}
