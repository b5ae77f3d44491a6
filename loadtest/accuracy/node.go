package main

import (
	"bytes"
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

// nodeRun drives a running node: it offers sc's arrivals over the node's
// Connect JSON API (Check with an inline limit) at their wall-clock instants,
// from sc.phase of a bucket that starts at least a second from now, and
// returns the instants at which the admitted requests were decided (the
// midpoint of each request's round trip, in Unix ms) and the load's start.
//
// Requests go out late when the machine cannot keep up; lag is the latest
// one's delay (ms). The trailing-window counts stay exact, since they use
// the instants of the decisions, but a lag past W/10 changes the offered
// pattern too much and is an error.
func nodeRun(ctx context.Context, client *http.Client, base string, l window.Limit, sc scenario, windows, workers int, key string) (admitted []int64, loadStart, lag int64, err error) {
	w := l.WindowMs()
	limit := map[string]any{"limit": l.Limit, "window": fmt.Sprintf("%gs", l.Window.Seconds())}
	if l.Algorithm == window.SlidingWindowTwoBucket {
		limit["algorithm"] = "ALGORITHM_SLIDING_WINDOW_TWO_BUCKET"
	}
	if l.Strict {
		limit["strict"] = true
	}
	body, err := json.Marshal(map[string]any{"key": key, "limit": limit})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("encode request: %w", err)
	}
	url := strings.TrimSuffix(base, "/") + "/ratelimit.v1.RateLimitService/Check"
	if err := warmUp(ctx, client, url, limit, key, workers, w); err != nil {
		return nil, 0, 0, err
	}
	now := time.Now().UnixMilli()
	start := (now/w + 1) * w
	if start-now < 1000 {
		start += w
	}
	arr := sc.arrivals(l, start, windows)
	if len(arr) == 0 {
		return nil, start, 0, nil
	}

	jobs := make(chan int64, len(arr))
	var (
		mu       sync.Mutex
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range jobs {
				late := time.Now().UnixMilli() - t
				at, ok, err := check(ctx, client, url, body, w)
				mu.Lock()
				lag = max(lag, late)
				switch {
				case err != nil && firstErr == nil:
					firstErr = err
					cancel()
				case ok:
					admitted = append(admitted, at)
				}
				mu.Unlock()
			}
		}()
	}
dispatch:
	for _, t := range arr {
		d := time.Until(time.UnixMilli(t))
		if d > 0 {
			select {
			case <-ctx.Done():
				break dispatch
			case <-time.After(d):
			}
		}
		jobs <- t
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return nil, 0, 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, 0, fmt.Errorf("drive node: %w", err)
	}
	if lag > w/10 {
		return nil, 0, 0, fmt.Errorf("drive node: a request went out %d ms behind its schedule (lower the rate, add -workers or -retries): %w", lag, errLate)
	}
	slices.Sort(admitted)
	return admitted, arr[0], lag, nil
}

// warmUp opens the workers' connections before the load starts, with one
// request each for a key of its own: dialing them all at the first
// scheduled instant would send the first scenario's opening requests late.
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
// (Unix ms: its stats' bucket * W + elapsedMs, so that the trailing-window
// counts use the node's own clock, not the client's view of a round trip
// that a busy machine can stretch) and whether it was allowed. An answer
// without stats falls back to the midpoint of the round trip.
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
// scenario whose decisions fell back was not decided by Redis alone.
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
