package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// errLate is nodeRun's error when requests went out too late.
var errLate = errors.New("requests late")

// nodeDriver drives the cells of a grid against one node.
type nodeDriver struct {
	client  *http.Client
	base    string
	workers int
	retries int
	maxLag  time.Duration // 0: W/10
	runID   int64
}

// startLead is how far ahead of now a run's first request is scheduled, so
// that its workers' connections are open by then.
const startLead = time.Second

// newNodeDriver returns the driver of c's node, after checking that the
// cells, c.parallel at once, fit in c.timeout.
func newNodeDriver(c config, cells []cell) (*nodeDriver, error) {
	var total time.Duration
	for _, cl := range cells {
		// Each run waits up to a window for its phase, then runs.
		per := time.Duration(cl.windows+1)*cl.cnt.limit.Window + startLead + time.Second
		total += time.Duration(len(cl.runs)) * per
	}
	if plan := total / time.Duration(min(c.parallel, max(len(cells), 1))); plan > c.timeout {
		return nil, fmt.Errorf("the grid would take up to %v against a node with -parallel %d, more than -timeout %v: shrink it", plan.Round(time.Second), c.parallel, c.timeout)
	}
	conns := c.workers * c.parallel
	return &nodeDriver{
		client: &http.Client{
			Timeout: 5 * time.Second,
			// Idle connections are dropped well before a node's own idle
			// timeout, so that none is reused just as the node closes it.
			Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: 20 * time.Second},
		},
		base:    strings.TrimSuffix(c.node, "/"),
		workers: c.workers,
		retries: c.retries,
		maxLag:  c.maxLag,
		runID:   time.Now().UnixNano(),
	}, nil
}

// cell runs cl's runs against the node, each on a fresh key (a run that
// fails is run again on another, up to nd.retries times), and judges
// their decisions on the node's clock.
func (nd *nodeDriver) cell(ctx context.Context, i int, cl cell, byPhase bool) ([]row, error) {
	before, err := fallbacks(ctx, nd.client, nd.base)
	if err != nil {
		return nil, err
	}
	w := cl.cnt.limit.WindowMs()
	var rows []row
	var lag int64
	retried := 0
	for j, r := range cl.runs {
		var ds []decision
		var runLag int64
		for try := 0; ; try++ {
			key := fmt.Sprintf("accuracy-%d-%d-%d-%d", nd.runID, i, j, try)
			ds, runLag, err = nd.run(ctx, cl, r, key)
			if err == nil || ctx.Err() != nil || try >= nd.retries {
				break
			}
			retried++
		}
		if err != nil {
			return nil, fmt.Errorf("%d per %v, %s %gx: %w", cl.cnt.limit.Limit, cl.cnt.limit.Window, cl.runName(r), cl.rate, err)
		}
		lag = max(lag, runLag)
		v := verdict{steadyMin: -1}
		if len(ds) > 0 {
			v = judge(ds, cl.cnt.limit.Limit, w, ds[0].at+2*w)
		}
		rows = addRun(rows, cl, r, v, byPhase)
	}
	after, err := fallbacks(ctx, nd.client, nd.base)
	if err != nil {
		return nil, err
	}
	for k := range rows {
		rows[k].lag = lag
	}
	if len(rows) > 0 {
		rows[0].fallback = after - min(before, after)
		rows[0].retried = retried
	}
	return rows, nil
}

// run offers run r of cl over the node's Connect JSON API (Check with an
// inline limit) at the arrivals' wall-clock instants, from a bucket that
// starts so that the first request goes out at least startLead from now,
// and returns every decision at the instant the node took it (sorted, the
// admissions of a millisecond before its denials: a counter that denied a
// request admits no other of as many hits in the same millisecond).
//
// Requests go out late when the machine cannot keep up; lag is the latest
// one's delay (ms). The judgement stays exact, since it uses the node's
// instants, but a lag past W/10 (or -max-lag) changes the offered pattern
// too much: the run stops at the first such request, with errLate.
func (nd *nodeDriver) run(ctx context.Context, cl cell, r runSpec, key string) (ds []decision, lag int64, err error) {
	l := cl.cnt.limit
	w := l.WindowMs()
	limit := map[string]any{"limit": l.Limit, "window": fmt.Sprintf("%gs", l.Window.Seconds())}
	if l.Algorithm == window.SlidingWindowTwoBucket {
		limit["algorithm"] = "ALGORITHM_SLIDING_WINDOW_TWO_BUCKET"
	}
	req := map[string]any{"key": key, "limit": limit}
	if cl.hits > 1 {
		req["hits"] = cl.hits
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, 0, fmt.Errorf("encode request: %w", err)
	}
	url := nd.base + "/ratelimit.v1.RateLimitService/Check"
	if err := warmUp(ctx, nd.client, url, limit, key, nd.workers, w); err != nil {
		return nil, 0, err
	}
	// The first bucket start from which the run's phase is startLead away.
	first := time.Now().Add(startLead).UnixMilli()
	off := int64(r.phase * float64(w))
	if cl.shape == shapeOnOff {
		off = 0
	}
	start := (first - off + w - 1) / w * w
	arr := cl.arrivals(r, start)
	if len(arr) == 0 {
		return nil, 0, nil
	}

	maxLag := w / 10
	if nd.maxLag > 0 {
		maxLag = nd.maxLag.Milliseconds()
	}
	jobs := make(chan int64, len(arr))
	var (
		mu       sync.Mutex
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range nd.workers {
		wg.Go(func() {
			for t := range jobs {
				late := time.Now().UnixMilli() - t
				if late > maxLag {
					// The run is lost: stop it now rather than at its end.
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("drive node: a request went out %d ms behind its schedule (lower the rate or -parallel, add -workers or -retries): %w", late, errLate)
						cancel()
					}
					mu.Unlock()
					continue
				}
				at, ok, err := check(ctx, nd.client, url, body, w)
				mu.Lock()
				lag = max(lag, late)
				switch {
				case err != nil && firstErr == nil:
					firstErr = err
					cancel()
				case err == nil:
					ds = append(ds, decision{at: at, hits: cl.hits, allowed: ok})
				}
				mu.Unlock()
			}
		})
	}
dispatch:
	for _, a := range arr {
		if d := time.Until(time.UnixMilli(a.at)); d > 0 {
			select {
			case <-ctx.Done():
				break dispatch
			case <-time.After(d):
			}
		}
		jobs <- a.at
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return nil, 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("drive node: %w", err)
	}
	sortDecisions(ds)
	return ds, lag, nil
}

// sortDecisions orders decisions by instant, the admissions of a
// millisecond before its denials.
func sortDecisions(ds []decision) {
	slices.SortStableFunc(ds, func(a, b decision) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		switch {
		case a.allowed == b.allowed:
			return 0
		case a.allowed:
			return -1
		}
		return 1
	})
}

// warmUp opens the workers' connections before the load starts, with one
// request each for a key of its own: dialing them all at the first
// scheduled instant would send the first requests late.
func warmUp(ctx context.Context, client *http.Client, url string, limit map[string]any, key string, workers int, w int64) error {
	body, err := json.Marshal(map[string]any{"key": key + "/warmup", "limit": limit})
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	errs := make(chan error, workers)
	for range workers {
		go func() {
			_, _, err := check(ctx, client, url, body, w)
			errs <- err
		}()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = fmt.Errorf("warm up: %w", err)
		}
	}
	return first
}

// check sends one Check and returns the instant the node decided it at
// (Unix ms: its stats' bucket * W + elapsedMs, so that the judgement uses
// the node's own clock, not the client's view of a round trip that a busy
// machine can stretch) and whether it was allowed. An answer without
// stats falls back to the midpoint of the round trip.
func check(ctx context.Context, client *http.Client, url string, body []byte, w int64) (int64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, false, fmt.Errorf("make request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("check: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	got := time.Now()
	if err != nil {
		return 0, false, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("check: %s: %s", resp.Status, bytes.TrimSpace(raw))
	}
	var out struct {
		Allowed bool `json:"allowed"`
		Stats   *struct {
			Bucket    int64 `json:"bucket,string"`
			ElapsedMs int64 `json:"elapsedMs,string"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return 0, false, fmt.Errorf("decode response: %w", err)
	}
	if out.Stats != nil && out.Stats.Bucket > 0 {
		return out.Stats.Bucket*w + out.Stats.ElapsedMs, out.Allowed, nil
	}
	mid := sent.Add(got.Sub(sent) / 2)
	return mid.UnixMilli(), out.Allowed, nil
}

// fallbackMetric counts a node's decisions made by its in-memory fallback
// while its Redis was slower than --store-timeout or unavailable.
const fallbackMetric = "rlcluster_store_fallback_decisions_total"

// fallbacks returns the node's count of fallback decisions so far, read
// from its /metrics (0 when it exports none, as on the memory store). A
// run whose decisions fell back was not decided by Redis alone.
func fallbacks(ctx context.Context, client *http.Client, base string) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/metrics", nil)
	if err != nil {
		return 0, fmt.Errorf("make metrics request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("read metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("read metrics: %s", resp.Status)
	}
	for line := range strings.Lines(string(raw)) {
		v, ok := strings.CutPrefix(line, fallbackMetric+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("read metrics: %s %q: %w", fallbackMetric, v, err)
		}
		return uint64(f), nil
	}
	return 0, nil
}
