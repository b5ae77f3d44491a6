package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// measureGrid parses args, runs the grid and returns its rows, one per
// cell (with -by-phase, one per run).
func measureGrid(t *testing.T, args ...string) (config, []row) {
	t.Helper()
	c, err := parse(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cells, err := c.cells()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := measure(t.Context(), c, cells)
	if err != nil {
		t.Fatal(err)
	}
	want := len(cells)
	if c.byPhase {
		want = 0
		for _, cl := range cells {
			want += len(cl.runs)
		}
	}
	if len(rows) != want {
		t.Fatalf("%d rows for %d cells", len(rows), len(cells))
	}
	return c, rows
}

// smallGrid is the grid the tests simulate: every limit and window of the
// full grid, fewer decisions per cell.
var smallGrid = []string{"-limits", "1,10,100,1000,100000", "-windows-list", "1s,1h", "-phases", "0.1,0.9", "-windows", "6", "-decisions", "10000", "-parallel", "2"}

// TestDefaultBounds holds the default counter to its promise in one
// region over the small grid, with every arrival shape: no trailing window
// above the limit and no unjustified admission anywhere; no unjustified
// denial at 0.5x and at most 0.1% at 0.9x; and at 2x and 10x at least 0.98
// of the hits an exact sliding log admits of the same requests.
func TestDefaultBounds(t *testing.T) {
	t.Parallel()
	_, rows := measureGrid(t, append([]string{"-mode", "default"}, smallGrid...)...)
	for _, r := range rows {
		f := r.figures()
		if r.v.decisions == 0 {
			t.Errorf("%s: no decisions", r.cellName())
			continue
		}
		if f.max > 1 || r.v.badAdmit > 0 {
			t.Errorf("%s: trailing max %.3f, %d unjustified admissions; want at most 1, none", r.cellName(), f.max, r.v.badAdmit)
		}
		switch {
		case r.cell.rate == 0.5 && r.v.badDeny > 0:
			t.Errorf("%s: %d unjustified denials of %d, want none", r.cellName(), r.v.badDeny, r.v.decisions)
		case r.cell.rate == 0.9 && f.denyShare > 0.001:
			t.Errorf("%s: unjustified denials %s, want at most 0.1%%", r.cellName(), share(r.v.badDeny, r.v.decisions))
		case r.cell.rate >= 2 && f.ratio < 0.98:
			t.Errorf("%s: steady state %.4f of an exact log's admissions, want at least 0.98", r.cellName(), f.ratio)
		}
	}
}

// TestMeasurementCanFail: the two-bucket counter, on the same grid, shows
// errors in both directions and trailing windows above the limit; the
// exact log shows none, and the judge agrees with it decision for
// decision (a steady ratio of exactly 1).
func TestMeasurementCanFail(t *testing.T) {
	t.Parallel()
	args := []string{"-limits", "10,1000", "-windows-list", "1s", "-phases", "0.1,0.9", "-windows", "6", "-decisions", "16000"}
	_, rows := measureGrid(t, append([]string{"-mode", "two-bucket"}, args...)...)
	var deny, admit int
	var worst float64
	for _, r := range rows {
		deny += r.v.badDeny
		admit += r.v.badAdmit
		worst = max(worst, r.figures().max)
	}
	if deny == 0 || admit == 0 || worst < 1.5 {
		t.Errorf("two-bucket: %d unjustified denials, %d admissions, trailing max %.3f; want some, some, at least 1.5", deny, admit, worst)
	}
	_, rows = measureGrid(t, append([]string{"-mode", "log"}, args...)...)
	for _, r := range rows {
		f := r.figures()
		if r.v.badDeny != 0 || r.v.badAdmit != 0 || f.max > 1 || (f.ratio != 1 && f.ratio != -1) {
			t.Errorf("log %s: %d unjustified denials, %d admissions, max %.3f, steady ratio %.4f; want 0, 0, at most 1, 1", r.cellName(), r.v.badDeny, r.v.badAdmit, f.max, f.ratio)
		}
	}
}

// TestColdStartPhases, with -by-phase, is the cold start at each phase of
// a bucket at 10x, 1000 per 4 s: the two-bucket counter admits 1 + phase
// times the limit in a trailing window, the default never more than it.
func TestColdStartPhases(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{modeTwoBucket, modeDefault} {
		_, rows := measureGrid(t, "-mode", mode, "-limits", "1000", "-windows-list", "4s", "-rates", "10", "-arrivals", "even,poisson",
			"-phases", "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9", "-windows", "3", "-max-windows", "3", "-decisions", "300000", "-by-phase")
		if len(rows) != 18 {
			t.Fatalf("%s: %d rows, want one per phase and arrivals: 18", mode, len(rows))
		}
		for i, r := range rows {
			phase := float64(i%9+1) / 10
			if want := fmt.Sprintf("%s @%.2f", r.cell.shape, phase); r.label != want || r.cell.hits != 1 {
				t.Fatalf("%s: row %d is %q of %d hits, want %q of 1", mode, i, r.label, r.cell.hits, want)
			}
			got := r.figures().max
			switch {
			case mode == modeDefault && (got > 1 || r.v.badAdmit > 0):
				t.Errorf("default %s: max %.3f, %d unjustified admissions; want at most 1, none", r.cellName(), got, r.v.badAdmit)
			case mode == modeTwoBucket && r.cell.shape == shapeEven && (got < 1+phase-0.01 || got > 1+phase+0.01):
				t.Errorf("two-bucket %s: max %.3f, want %.2f", r.cellName(), got, 1+phase)
			}
		}
	}
}

// TestJudge judges hand-made decisions for a limit of 2 per 1000 ms.
func TestJudge(t *testing.T) {
	t.Parallel()
	ds := []decision{
		{0, 1, true},     // 1 in the window
		{500, 1, true},   // 2
		{999, 1, true},   // 3: unjustified admission
		{1000, 1, false}, // 0 has left: 500 and 999 remain, justified
		{1500, 1, false}, // 500 has left: 999 remains, unjustified denial
		{1999, 1, true},  // 999 has left: 1
		{2000, 2, false}, // 1999 remains: 1 + 2 > 2, justified
	}
	v := judge(ds, 2, 1000, 1000)
	if v.decisions != 7 || v.denials != 3 || v.badAdmit != 1 || v.badDeny != 1 || v.admitted != 4 {
		t.Errorf("judge = %+v, want 7 decisions, 3 denials, 1 unjustified admission, 1 unjustified denial, 4 hits admitted", v)
	}
	if want := []float64{0.5, 1, 1.5, 0.5}; fmt.Sprint(v.ratios) != fmt.Sprint(want) {
		t.Errorf("ratios = %v, want %v", v.ratios, want)
	}
	// From 1000 ms the decider admitted 1 hit (at 1999); an exact log
	// offered the same requests admits 0, 500, then 1000 and 1500 (0 and
	// 500 have left) and nothing more: 2 hits from 1000.
	if v.steadyMin != 0.5 || v.steady != 1 || v.logSteady != 2 {
		t.Errorf("steady min %v, steady %d, log %d; want 0.5, 1, 2", v.steadyMin, v.steady, v.logSteady)
	}
}

// TestJudgeAgainstBruteForce compares judge with a direct count over all
// earlier admissions on random decisions with several hits.
func TestJudgeAgainstBruteForce(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for range 50 {
		lim, w := 1+r.Uint64N(20), 1000+r.Int64N(1000)
		var ds []decision
		at := int64(0)
		for range 300 {
			at += r.Int64N(w / 4)
			ds = append(ds, decision{at, 1 + r.Uint64N(3), r.IntN(3) > 0})
		}
		v := judge(ds, lim, w, 0)
		var badDeny, badAdmit int
		var ratios []float64
		for i, d := range ds {
			var n uint64
			for _, e := range ds[:i] {
				if e.allowed && e.at > d.at-w {
					n += e.hits
				}
			}
			fits := n+d.hits <= lim
			switch {
			case d.allowed && !fits:
				badAdmit++
			case !d.allowed && fits:
				badDeny++
			}
			if d.allowed {
				ratios = append(ratios, float64(n+d.hits)/float64(lim))
			}
		}
		if v.badDeny != badDeny || v.badAdmit != badAdmit || fmt.Sprint(v.ratios) != fmt.Sprint(ratios) {
			t.Fatalf("judge: %d/%d unjustified denials/admissions, ratios %v; brute force %d/%d, %v", v.badDeny, v.badAdmit, v.ratios, badDeny, badAdmit, ratios)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-mode", "nope"}, {"-rates", "x"}, {"-rates", "0"}, {"-arrivals", "bursty"}, {"-windows", "2"},
		{"-limits", "0"}, {"-windows-list", "500ms"}, {"-windows-list", "1000500us"}, {"-phases", "1"},
		{"-limit", "10", "-limits", "10"}, {"-decisions", "0"}, {"-arrivals", "onoff", "-onoff", "0"},
		{"-node", "http://127.0.0.1:1", "-mode", "log"}, {"-node", "http://10.1.2.3:8080"}, {"-node", "ftp://127.0.0.1"},
		{"-mode", "subbuckets", "-windows-list", "1001ms", "-k", "10"},
	} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
	c, err := parse([]string{"-grid-node", "-rates", "2", "-node", "http://localhost:8080", "-mode", "strict", "-arrivals", "constant,poisson"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%v %v %v %v %v %v %v %v", c.limits, c.windowsOf, c.rates, c.phases, c.windows, c.parallel, c.mode, c.arrivals); got != "[10 100 1000] [10s] [2] [0.5] 3 8 default [even poisson]" {
		t.Errorf("-grid-node -rates 2 -mode strict: %s", got)
	}
	if c, err = parse([]string{"-limit", "7", "-window", "4s", "-node", "http://10.1.2.3:8080", "-remote"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.limits, c.windowsOf); got != "[7] [4s]" {
		t.Errorf("-limit 7 -window 4s: %s", got)
	}
}

// TestPlan: a cell stays under -decisions, with more hits per request when
// it must, as a divisor of the limit; a simulated run grows to the budget
// within -max-windows; a node's runs last -windows.
func TestPlan(t *testing.T) {
	t.Parallel()
	c := config{decisions: 200000, windows: 10, maxWindows: 100000}
	for _, tt := range []struct {
		lim      uint64
		rate     float64
		runs     int
		node     bool
		hits     uint64
		windows  int
		maxTotal int
	}{
		{1, 0.5, 3, false, 1, 100000, 200000},
		{1000, 10, 3, false, 2, 13, 200000},
		{1000, 10, 3, true, 2, 10, 200000},
		{100000, 10, 3, false, 160, 10, 200000},
		{100000, 0.9, 1, false, 5, 11, 200000},
		{1000, 2, 1, false, 1, 100, 200000},
	} {
		c.node = map[bool]string{true: "http://127.0.0.1:1"}[tt.node]
		hits, windows := c.plan(tt.lim, tt.rate, tt.runs)
		total := float64(tt.runs*windows) * tt.rate * float64(tt.lim) / float64(hits)
		if hits != tt.hits || windows != tt.windows || total > float64(tt.maxTotal)*1.01 || tt.lim%hits != 0 {
			t.Errorf("plan(%d, %gx, %d runs, node %v) = %d hits, %d windows (%.0f decisions); want %d, %d", tt.lim, tt.rate, tt.runs, tt.node, hits, windows, total, tt.hits, tt.windows)
		}
	}
}

// TestReport prints a known cell: the two-bucket counter, 1000 per 4 s,
// even arrivals at 10x from phase 0.9 for 3 windows, admits 1.9 times the
// limit in a trailing window after the cold start.
func TestReport(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), []string{"-mode", "two-bucket", "-limit", "1000", "-window", "4s", "-rates", "10", "-arrivals", "even",
		"-phases", "0.9", "-windows", "3", "-max-windows", "3", "-summary"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	// 1000 hits admitted over the limit in its first windows, none
	// denied that fit; from 2W on, as an exact log.
	if row := "| 1000 | 4s | even | 10x | 1 | 30000 | 0 | 1000 (3.333%) | 1.0000 | 1.000 | 1.897 | 1.900 | 1.000 |"; !strings.Contains(out.String(), row) {
		t.Fatalf("output lacks the row %s:\n%s", row, out.String())
	}
	if row := "| 1000 | 4s | 30000 | 0 | 0 | 0 | 3.333% | 1.0000 | 1.900 |"; !strings.Contains(out.String(), row) {
		t.Errorf("output lacks the summary row %s:\n%s", row, out.String())
	}
	if !strings.Contains(out.String(), "worst: unjustified denials ") || !strings.Contains(out.String(), "trailing max 1.900 (1000 per 4s, even 10x)") {
		t.Errorf("output lacks the summary:\n%s", out.String())
	}
}

// The fallback count comes from a node's /metrics, and a node without the
// metric (the memory store) has none.
func TestFallbacks(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		body string
		want uint64
	}{
		{"# TYPE rlcluster_store_fallback_decisions_total counter\nrlcluster_store_fallback_decisions_total 483\nrlcluster_store_failures_total 48\n", 483},
		{"rlcluster_store_fallback_decisions_total 1.2e+06\n", 1_200_000},
		{"go_goroutines 7\n", 0},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			io.WriteString(w, tt.body)
		}))
		got, err := fallbacks(context.Background(), srv.Client(), srv.URL+"/")
		srv.Close()
		if err != nil || got != tt.want {
			t.Errorf("fallbacks(%q) = %d, %v; want %d", tt.body, got, err, tt.want)
		}
	}
	cnt, err := newCounter(modeDefault, 0, window.Limit{Limit: 10, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	report(&out, []row{{cell: cell{cnt: cnt, shape: shapeEven, rate: 10, hits: 1}, label: shapeEven, v: verdict{decisions: 1, ratios: []float64{1}, steadyMin: -1}, fallback: 12}})
	if !strings.Contains(out.String(), "| 10 | 1s | even (12 by the fallback) | 10x |") || !strings.Contains(out.String(), "12 decisions were made by the node's in-memory fallback") {
		t.Errorf("report:\n%s", out.String())
	}
}

// fakeNode answers every Check allowed, at its own clock, after delay for
// keys ending in slow; it records the keys asked.
func fakeNode(t *testing.T, slow string, delay time.Duration) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			return
		}
		var in struct {
			Key string `json:"key"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		keys = append(keys, in.Key)
		mu.Unlock()
		if slow != "" && strings.HasSuffix(in.Key, slow) {
			time.Sleep(delay) // the run's requests queue behind one worker
		}
		now := time.Now().UnixMilli()
		fmt.Fprintf(w, `{"allowed":true,"stats":{"bucket":"%d","elapsedMs":"%d"}}`, now/1000, now%1000)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), keys...)
	}
}

// A run opens its workers' connections with a warm-up request each, for a
// key of its own, before the first scheduled request, and records every
// decision.
func TestNodeRunWarmsUp(t *testing.T) {
	t.Parallel()
	srv, keys := fakeNode(t, "", 0)
	cnt, err := newCounter(modeDefault, 0, window.Limit{Limit: 10, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := config{node: srv.URL, workers: 4, parallel: 1, timeout: time.Minute}
	cl := cell{cnt: cnt, shape: shapeEven, rate: 1, hits: 1, windows: 3, runs: []runSpec{{phase: 0.5, seed: 1}}}
	nd, err := newNodeDriver(c, []cell{cl})
	if err != nil {
		t.Fatal(err)
	}
	ds, _, err := nd.run(context.Background(), cl, cl.runs[0], "k")
	if err != nil {
		t.Fatal(err)
	}
	got := keys()
	if len(ds) != 30 || len(got) != 4+len(ds) {
		t.Fatalf("%d requests for %d decisions, want 30 decisions and 4 warm-ups more", len(got), len(ds))
	}
	for i, k := range got {
		if want := map[bool]string{true: "k/warmup", false: "k"}[i < 4]; k != want {
			t.Errorf("request %d for key %q, want %q", i, k, want)
		}
	}
}

// With -retries, a run whose requests went out late is run again on a
// fresh key, and the report says so; without, it is an error. A grid
// planned to outlast -timeout is refused before it starts.
func TestNodeRetriesLateRuns(t *testing.T) {
	t.Parallel()
	srv, _ := fakeNode(t, "-0", 300*time.Millisecond)
	for _, retries := range []int{0, 1} {
		c, err := parse([]string{"-node", srv.URL, "-limits", "10", "-windows-list", "1s", "-rates", "1", "-arrivals", "even",
			"-phases", "0.5", "-windows", "3", "-workers", "1", "-retries", fmt.Sprint(retries),
			// Above what a busy machine adds (467 ms seen under -race),
			// below what one worker behind 300 ms answers to requests
			// 100 ms apart falls behind (200 ms more each request).
			"-max-lag", "1s"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cells, err := c.cells()
		if err != nil {
			t.Fatal(err)
		}
		rows, err := measure(context.Background(), c, cells)
		if retries == 0 {
			if !errors.Is(err, errLate) {
				t.Errorf("no retries: error %v, want one for late requests", err)
			}
			continue
		}
		if err != nil || len(rows) != 1 || rows[0].retried != 1 || rows[0].v.decisions != 30 {
			t.Fatalf("retries 1: rows %+v, error %v; want one row, retried once, 30 decisions", rows, err)
		}
		var out bytes.Buffer
		report(&out, rows)
		if !strings.Contains(out.String(), "1 runs dropped and run again on fresh keys") {
			t.Errorf("report:\n%s", out.String())
		}
	}
	err := run(context.Background(), []string{"-node", srv.URL, "-windows-list", "1h", "-limits", "10", "-timeout", "10m"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "more than -timeout") {
		t.Errorf("a grid of 1 h windows against a node: error %v, want one for -timeout", err)
	}
}

// A cell that fails against a node (here its node refuses its limit) is
// run again up to -retries, then reported as failed, and the other cells'
// rows are still printed.
func TestNodeCellFailureKeepsOthers(t *testing.T) {
	t.Parallel()
	var refused atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			return
		}
		var in struct {
			Limit struct {
				Limit uint64 `json:"limit"`
			} `json:"limit"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if in.Limit.Limit == 20 {
			refused.Add(1)
			http.Error(w, `{"code":"invalid_argument"}`, http.StatusBadRequest)
			return
		}
		now := time.Now().UnixMilli()
		fmt.Fprintf(w, `{"allowed":true,"stats":{"bucket":"%d","elapsedMs":"%d"}}`, now/1000, now%1000)
	}))
	t.Cleanup(srv.Close)
	var out bytes.Buffer
	err := run(context.Background(), []string{"-node", srv.URL, "-limits", "10,20", "-windows-list", "1s", "-rates", "1", "-arrivals", "even",
		"-phases", "0.5", "-windows", "3", "-workers", "2", "-parallel", "2", "-retries", "1"}, &out)
	if err == nil || !strings.Contains(err.Error(), "1 of 2 cells failed") || !strings.Contains(err.Error(), "400 Bad Request") {
		t.Errorf("error %v, want 1 of 2 cells failed with the node's 400", err)
	}
	if !strings.Contains(out.String(), "| 10 | 1s | even | 1x | 1 | 30 |") || strings.Contains(out.String(), "| 20 |") {
		t.Errorf("output, want the row of 10 per 1 s only:\n%s", out.String())
	}
	// Two runs (the first and its retry), each refused at its warm-up: two
	// workers' requests.
	if got := refused.Load(); got != 4 {
		t.Errorf("%d requests refused, want 4 (two warm-ups of two workers)", got)
	}
}
