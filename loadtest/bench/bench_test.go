package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/apitest"
)

// TestMain lets the test binary serve as the harness's re-executed ceiling.
func TestMain(m *testing.M) {
	if os.Getenv(subcommandEnv) == "ceiling" {
		args := os.Args[1:]
		if i := slices.Index(args, "ceiling"); i >= 0 {
			args = args[i+1:]
		}
		if err := runCeiling(context.Background(), args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Workloads are built once: preparing 10k requests is slow under -race.
var (
	testUniform = sync.OnceValue(func() *Workload { return NewUniform("t") })
	testBatch   = sync.OnceValue(func() *Workload { return NewBatch("t", 1) })
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = ms(i + 1)
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", []time.Duration{ms(7)}, 99, ms(7)},
		{"p50 of 100", hundred, 50, ms(50)},
		{"p95 of 100", hundred, 95, ms(95)},
		{"p99 of 100", hundred, 99, ms(99)},
		{"p100 of 100", hundred, 100, ms(100)},
		{"p0 is the minimum", hundred, 0, ms(1)},
		{"p99.9 rounds up", hundred, 99.9, ms(100)},
		{"p50 of 4 is the 2nd", []time.Duration{ms(1), ms(2), ms(3), ms(4)}, 50, ms(2)},
		{"p51 of 4 is the 3rd", []time.Duration{ms(1), ms(2), ms(3), ms(4)}, 51, ms(3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("Percentile(%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarise(t *testing.T) {
	s := []time.Duration{ms(5), ms(1), ms(3), ms(2), ms(4)}
	got := Summarise(s)
	want := Latencies{P50: ms(3), P95: ms(5), P99: ms(5), Max: ms(5)}
	if got != want {
		t.Errorf("Summarise() = %+v, want %+v", got, want)
	}
	if got, want := Summarise(nil), (Latencies{}); got != want {
		t.Errorf("Summarise(nil) = %+v, want %+v", got, want)
	}
}

func TestScheduleAt(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		rate float64
		i    int64
		want time.Duration
	}{
		{1000, 0, 0},
		{1000, 1, time.Millisecond},
		{1000, 2500, 2500 * time.Millisecond},
		{3, 1, 333333333},
		{3, 3, time.Second},
		{20000, 1, 50 * time.Microsecond},
		{0.5, 1, 2 * time.Second},
	}
	for _, tt := range tests {
		s := Schedule{Start: t0, Rate: tt.rate}
		if got := s.At(tt.i).Sub(t0); got != tt.want {
			t.Errorf("Schedule{Rate: %v}.At(%d) = t0+%v, want t0+%v", tt.rate, tt.i, got, tt.want)
		}
	}
}

func TestScheduleDue(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		rate float64
		at   time.Duration
		want int64
	}{
		{1000, -time.Millisecond, 0},
		{1000, 0, 1},
		{1000, time.Millisecond - 1, 1},
		{1000, time.Millisecond, 2},
		{1000, time.Second, 1001},
		{3, 333333332, 1},
		{3, 333333333, 2},
		{3, time.Second - 1, 3},
		{3, time.Second, 4},
	}
	for _, tt := range tests {
		s := Schedule{Start: t0, Rate: tt.rate}
		if got := s.Due(t0.Add(tt.at)); got != tt.want {
			t.Errorf("Schedule{Rate: %v}.Due(t0+%v) = %d, want %d", tt.rate, tt.at, got, tt.want)
		}
	}
}

// TestScheduleDueAgreesWithAt checks Due(t) = #{i : At(i) <= t} at and
// around every due time, for awkward rates.
func TestScheduleDueAgreesWithAt(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, rate := range []float64{1, 3, 7, 999.9, 20000, 33333.3, 123457} {
		s := Schedule{Start: t0, Rate: rate}
		for i := int64(0); i < 5000; i++ {
			at := s.At(i)
			if got, want := s.Due(at), i+1; got != want {
				t.Fatalf("rate %v: Due(At(%d)) = %d, want %d", rate, i, got, want)
			}
			if at.After(t0) {
				if got, want := s.Due(at.Add(-1)), i; got != want {
					t.Fatalf("rate %v: Due(At(%d)-1ns) = %d, want %d", rate, i, got, want)
				}
			}
		}
	}
}

func TestScheduleTotal(t *testing.T) {
	tests := []struct {
		rate float64
		d    time.Duration
		want int64
	}{
		{1000, time.Second, 1000},
		{20000, 10 * time.Second, 200000},
		{3, time.Second, 3},
		{3, 1100 * time.Millisecond, 4},
		{0.5, time.Second, 1},
		{2000, 500 * time.Millisecond, 1000},
	}
	for _, tt := range tests {
		s := Schedule{Start: time.Unix(1000, 0), Rate: tt.rate}
		if got := s.Total(tt.d); got != tt.want {
			t.Errorf("Schedule{Rate: %v}.Total(%v) = %d, want %d", tt.rate, tt.d, got, tt.want)
		}
	}
}

func TestCountAllowed(t *testing.T) {
	tests := []struct {
		name string
		body string
		want int
	}{
		{"allowed", `{"allowed":true,"limit":"100"}`, 1},
		{"spaced", `{"allowed":  true, "limit": "100"}`, 1},
		{"denied, field omitted", `{"limit":"100","retryAfter":"1s"}`, 0},
		{"explicit false", `{"allowed":false}`, 0},
		{"batch", `{"results":[{"response":{"allowed":true}},{"response":{}},{"response":{"allowed": true}}]}`, 2},
		{"truncated", `{"allowed":`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CountAllowed([]byte(tt.body)); got != tt.want {
				t.Errorf("CountAllowed(%s) = %d, want %d", tt.body, got, tt.want)
			}
		})
	}
}

func TestParseScriptCalls(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_config|get:calls=2,usec=14,usec_per_call=7.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=20000,usec=52712,usec_per_call=2.64,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha_ro:calls=5,usec=1,usec_per_call=0.2,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=3,usec=1,usec_per_call=0.3,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hincrby:calls=100,usec=1,usec_per_call=0.01,rejected_calls=0,failed_calls=0\r\n"
	if got, want := ParseScriptCalls(info), int64(20008); got != want {
		t.Errorf("ParseScriptCalls() = %d, want %d", got, want)
	}
	if got, want := ParseScriptCalls("# Commandstats\r\n"), int64(0); got != want {
		t.Errorf("ParseScriptCalls(empty) = %d, want %d", got, want)
	}
}

func TestParseRedisBenchCSV(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"EVALSHA 6163 1 k:__rand_int__","67567.57","0.582","0.160","0.519","0.991","1.671","2.703"
`
	r, err := ParseRedisBenchCSV(out)
	if err != nil {
		t.Fatalf("ParseRedisBenchCSV() error = %v", err)
	}
	if got, want := r.ReqPerSec, 67567.57; got != want {
		t.Errorf("ReqPerSec = %v, want %v", got, want)
	}
	if got, want := [3]float64{r.P50Ms, r.P95Ms, r.P99Ms}, [3]float64{0.519, 0.991, 1.671}; got != want {
		t.Errorf("p50/p95/p99 = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "ERR unknown command\n", `"test","rps"` + "\n"} {
		if _, err := ParseRedisBenchCSV(bad); err == nil {
			t.Errorf("ParseRedisBenchCSV(%q) error = nil, want an error", bad)
		}
	}
}

func TestSetScriptCalls(t *testing.T) {
	tests := []struct {
		name             string
		allowed, denied  int64
		calls            int64
		wantAdm, wantDen *float64
	}{
		{"all admitted", 1000, 0, 1000, ptr(1.0), nil},
		{"coalesced", 1000, 0, 100, ptr(0.1), nil},
		{"hot key, denials from memory", 100, 9900, 100, nil, ptr(0.0)},
		{"hot key, every denial to Redis", 100, 9900, 10000, nil, ptr(1.0)},
		{"a few denials", 100000, 10, 100010, ptr(1.0), nil},
		{"nothing", 0, 0, 0, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Result{Allowed: tt.allowed, Denied: tt.denied}
			r.setScriptCalls(tt.calls)
			if got, want := fmtp(r.ScriptPerAdmitted), fmtp(tt.wantAdm); got != want {
				t.Errorf("ScriptPerAdmitted = %s, want %s", got, want)
			}
			if got, want := fmtp(r.ScriptPerDenied), fmtp(tt.wantDen); got != want {
				t.Errorf("ScriptPerDenied = %s, want %s", got, want)
			}
		})
	}
}

func fmtp(v *float64) string { return optf(v, 4) }

func TestApplyRatios(t *testing.T) {
	rs := []Result{
		{Workload: "ceiling", Mode: "closed", Protocol: protoJSON, Store: "ceiling", ReqPerSec: 60000},
		{Workload: "ceiling", Mode: "closed", Protocol: protoGRPC, Store: "ceiling", ReqPerSec: 40000},
		{Workload: "uniform10k", Mode: "closed", Protocol: protoJSON, Store: "redis", ReqPerSec: 30000, DecPerSec: 30000},
		{Workload: "batch10", Mode: "closed", Protocol: protoGRPC, Store: "redis", ReqPerSec: 10000, DecPerSec: 100000},
		{Workload: "uniform10k", Mode: "closed", Protocol: protoJSON, Store: "memory", ReqPerSec: 45000, DecPerSec: 45000},
		{Workload: "uniform10k", Mode: "open", Protocol: protoJSON, Store: "redis", ReqPerSec: 20000, DecPerSec: 20000},
		{Workload: "redis-benchmark", Mode: "closed", Protocol: "resp", Store: "redis-server", ReqPerSec: 50000, DecPerSec: 50000},
	}
	applyRatios(rs)
	want := []struct{ ceiling, redis string }{
		{"-", "-"}, {"-", "-"}, {"0.50", "0.60"}, {"0.25", "2.00"}, {"0.75", "-"}, {"-", "-"}, {"-", "-"},
	}
	for i, w := range want {
		if got := optf(rs[i].CeilingRatio, 2); got != w.ceiling {
			t.Errorf("row %d node/ceiling = %s, want %s", i, got, w.ceiling)
		}
		if got := optf(rs[i].RedisRatio, 2); got != w.redis {
			t.Errorf("row %d node/redis = %s, want %s", i, got, w.redis)
		}
	}
}

func TestWriteTable(t *testing.T) {
	rs := []Result{
		{Workload: "ceiling", Mode: "closed", Protocol: protoJSON, Store: "ceiling", Conns: 64, ReqPerSec: 61000.4, DecPerSec: 61000.4, P50Ms: 0.9, P95Ms: 2, P99Ms: 3.004, CPUPerReqUs: 25.04, GenBusy: 0.974, ServerBusy: 0.995},
		{Workload: "hotkey", Mode: "open", Rate: 20000, Protocol: protoGRPC, Store: "redis", Conns: 64, ReqPerSec: 19999.6, DecPerSec: 19999.6, P99Ms: 1.5,
			CeilingRatio: ptr(0.8), RedisRatio: ptr(0.4), ScriptPerDenied: ptr(0.0), Errors: 2, CPUPerReqUs: 30, RedisCPUPerReqUs: ptr(12.5)},
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rs); err != nil {
		t.Fatalf("WriteTable() error = %v", err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if got, want := len(lines), 3; got != want {
		t.Fatalf("WriteTable() printed %d lines, want %d:\n%s", got, want, b.String())
	}
	wantFields := [][]string{
		{"workload", "mode", "protocol", "store", "req/s", "decisions/s", "p50", "ms", "p95", "ms", "p99", "ms", "errors", "CPU", "us/req", "generator", "busy", "server", "busy", "node/ceiling", "node/redis", "script/admitted", "script/denied"},
		{"ceiling", "closed/64", "connect-json", "ceiling", "61000", "61000", "0.90", "2.00", "3.00", "0", "25.0", "97%", "100%", "-", "-", "-", "-"},
		{"hotkey", "open@20000", "grpc", "redis", "20000", "20000", "0.00", "0.00", "1.50", "2", "42.5", "0%", "0%", "0.80", "0.40", "-", "0.000"},
	}
	for i, want := range wantFields {
		if got := strings.Fields(lines[i]); !slices.Equal(got, want) {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], want)
		}
	}
	// Columns are aligned: every line has the same width.
	for i := 1; i < len(lines); i++ {
		if len(lines[i]) != len(lines[0]) {
			t.Errorf("line %d is %d wide, header %d:\n%s", i, len(lines[i]), len(lines[0]), b.String())
		}
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-short"})
	if err != nil {
		t.Fatalf("parseFlags(-short) error = %v", err)
	}
	if c.Duration != time.Second || c.Warmup != 200*time.Millisecond || c.Rate != 0 || c.Conns != 64 {
		t.Errorf("parseFlags(-short) = %+v, want 1s, 200ms warm-up, automatic rate, 64 conns", c)
	}
	c, err = parseFlags([]string{"-short", "-duration", "3s"})
	if err != nil || c.Duration != 3*time.Second {
		t.Errorf("parseFlags(-short -duration 3s) = %v, %v, want 3s", c.Duration, err)
	}
	c, err = parseFlags(nil)
	if err != nil || c.Duration != 10*time.Second || c.Rate != 0 || !c.Pin {
		t.Errorf("parseFlags() = %+v, %v, want 10s, automatic rate, pinned", c, err)
	}
	for _, bad := range [][]string{{"-conns", "0"}, {"-duration", "0s"}, {"-rate", "-1"}, {"stray"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) error = nil, want an error", bad)
		}
	}
}

func TestPlan(t *testing.T) {
	full := Plan(false)
	if got, want := len(full["redis"]), 26; got != want {
		t.Errorf("full plan has %d redis rows, want %d (2 modes x (3 workloads x 3 Connect protocols + 2 on Envoy + steady100 and steady100-brief on JSON))", got, want)
	}
	if got, want := len(full["ceiling"]), 8; got != want {
		t.Errorf("full plan has %d ceiling rows, want %d", got, want)
	}
	short := Plan(true)
	if n := len(short["ceiling"]) + len(short["redis"]) + len(short["memory"]); n > 10 {
		t.Errorf("short plan has %d rows, want at most 10", n)
	}
	// Every goal's rows are in the full plan, and each open-loop row
	// comes after the closed-loop row it takes its rate from.
	for _, g := range Goals {
		closed := slices.Index(full[g.Store], planRow{g.Workload, modeClose, g.Protocol})
		open := slices.Index(full[g.Store], planRow{g.Workload, modeOpen, g.Protocol})
		if closed < 0 || open < closed {
			t.Errorf("%s: closed row at %d, open row at %d in the full plan", g.Path, closed, open)
		}
	}
	for _, proto := range []string{protoJSON, protoBinary, protoEnvoy} {
		if !slices.Contains(full["ceiling"], planRow{"ceiling", modeClose, proto}) {
			t.Errorf("full plan has no closed-loop %s ceiling", proto)
		}
	}
}

func TestOpenRate(t *testing.T) {
	measured := []Result{
		{Workload: "uniform10k", Mode: modeClose, Protocol: protoJSON, Store: "redis", ReqPerSec: 30000},
		{Workload: "hotkey", Mode: modeClose, Protocol: protoJSON, Store: "redis", ReqPerSec: 50000},
	}
	tests := []struct {
		name  string
		rate  float64
		short bool
		row   planRow
		store string
		want  float64
	}{
		{"half the closed loop", 0, false, planRow{"uniform10k", modeOpen, protoJSON}, "redis", 15000},
		{"other protocol unmeasured", 0, false, planRow{"uniform10k", modeOpen, protoGRPC}, "redis", 1000},
		{"other store unmeasured", 0, false, planRow{"hotkey", modeOpen, protoJSON}, "memory", 1000},
		{"short caps", 0, true, planRow{"hotkey", modeOpen, protoJSON}, "redis", 2000},
		{"explicit", 12345, false, planRow{"hotkey", modeOpen, protoJSON}, "redis", 12345},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &harness{cfg: Config{Rate: tt.rate, Short: tt.short}, results: measured}
			if got := h.openRate(tt.store, tt.row); got != tt.want {
				t.Errorf("openRate() = %v, want %v", got, tt.want)
			}
		})
	}
}

// ceilingServer serves the ceiling as rlnode serves the API (HTTP/1.1 and
// h2c on loopback) and returns its URL.
func ceilingServer(t *testing.T) string {
	t.Helper()
	return apitest.Serve(t, CeilingHandler()).URL
}

// ceilingJSON returns a JSON client with conns connections to a ceiling
// server; both close when t ends.
func ceilingJSON(t *testing.T, conns int) Client {
	t.Helper()
	c := NewJSONClient(ceilingServer(t), conns)
	t.Cleanup(c.Close)
	return c
}

func TestClientsAgainstCeiling(t *testing.T) {
	base := ceilingServer(t)
	ctx := context.Background()
	clients := map[string]Client{protoJSON: NewJSONClient(base, 4), protoBinary: NewProtoClient(base, 4), protoGRPC: NewGRPCClient(base)}
	for name, c := range clients {
		t.Cleanup(c.Close)
		for _, w := range []*Workload{testUniform(), testBatch()} {
			var buf bytes.Buffer
			a, d, err := c.Do(ctx, w, w.Len()-1, &buf)
			if err != nil {
				t.Fatalf("%s %s: Do() error = %v", name, w.Name, err)
			}
			if a != w.PerCall || d != 0 {
				t.Errorf("%s %s: Do() = %d allowed, %d denied, want %d, 0", name, w.Name, a, d, w.PerCall)
			}
		}
	}
}

func TestRunClosed(t *testing.T) {
	c := ceilingJSON(t, 4)
	o := Run(context.Background(), c, testUniform(), Load{Conns: 4, Warmup: 50 * time.Millisecond, Duration: 200 * time.Millisecond})
	if o.Requests == 0 || o.Errors != 0 || o.Allowed != o.Requests || o.Denied != 0 {
		t.Errorf("Run() = %+v (first error %v), want requests, all allowed, no errors", o, o.FirstErr)
	}
	if o.Latencies.P50 <= 0 || o.Latencies.P50 > o.Latencies.P99 || o.Latencies.P99 > o.Latencies.Max {
		t.Errorf("latencies %+v are not ordered", o.Latencies)
	}
}

// TestRunOpen checks that every scheduled request is accounted for: sent
// (answered or failed) or unsent.
func TestRunOpen(t *testing.T) {
	base := ceilingServer(t)
	c := NewGRPCClient(base)
	t.Cleanup(c.Close)
	l := Load{Conns: 4, Rate: 500, Duration: 400 * time.Millisecond}
	o := Run(context.Background(), c, NewHotKey("t"), l)
	if got, want := o.Requests+o.Errors+o.Unsent, int64(200); got != want {
		t.Errorf("requests %d + errors %d + unsent %d = %d, want %d scheduled", o.Requests, o.Errors, o.Unsent, got, want)
	}
	if o.Requests == 0 || o.Errors != 0 {
		t.Errorf("Run() = %+v (first error %v), want requests and no errors", o, o.FirstErr)
	}
}

// envoyCeiling serves the grpc-go Envoy ceiling on loopback.
func envoyCeiling(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewCeilingGRPC()
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return "http://" + l.Addr().String()
}

// TestEnvoyAgainstCeiling drives both Envoy workloads, bounded in time and
// count, through go-control-plane's client on 4 connections against the
// grpc-go ceiling, which answers OK to everything.
func TestEnvoyAgainstCeiling(t *testing.T) {
	base := envoyCeiling(t)
	c, err := NewEnvoyClient(base, envoyConns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const maxReq = 400
	for _, w := range []*Workload{NewEnvoyUniform("t"), NewEnvoyHotKey("t")} {
		o := Run(context.Background(), c, w, Load{Conns: 8, Duration: 2 * time.Second, MaxRequests: maxReq})
		if o.Requests == 0 || o.Errors != 0 || o.Allowed != o.Requests || o.Denied != 0 {
			t.Errorf("%s: Run() = %+v (first error %v), want requests, all allowed, no errors", w.Name, o, o.FirstErr)
		}
		if o.Requests > maxReq {
			t.Errorf("%s: %d requests, want at most %d", w.Name, o.Requests, maxReq)
		}
	}
	if got, want := c.next.Load(), uint32(2*maxReq); got < want/2 || got > want {
		t.Errorf("%d calls spread over the connections, want %d", got, want)
	}
	// The Connect clients refuse Envoy workloads rather than send nothing.
	jc := NewJSONClient(base, 1)
	t.Cleanup(jc.Close)
	if _, _, err := jc.Do(context.Background(), NewEnvoyHotKey("t"), 0, new(bytes.Buffer)); !errors.Is(err, errEnvoyOnly) {
		t.Errorf("JSONClient.Do(envoy workload) error = %v, want %v", err, errEnvoyOnly)
	}
}

func TestEnvoyWorkloads(t *testing.T) {
	u := NewEnvoyUniform("p")
	if got, want := u.Len(), uniformKeys; got != want {
		t.Errorf("uniform Len() = %d, want %d", got, want)
	}
	keys := map[string]bool{}
	for _, r := range u.envoy {
		if r.GetDomain() != envoyDomain || len(r.GetDescriptors()) != 1 {
			t.Fatalf("request %v: want one descriptor in domain %q", r, envoyDomain)
		}
		e := r.GetDescriptors()[0].GetEntries()
		if len(e) != 1 || e[0].GetKey() != "user" {
			t.Fatalf("request %v: want one user entry", r)
		}
		keys[e[0].GetValue()] = true
	}
	if got, want := len(keys), uniformKeys; got != want {
		t.Errorf("%d distinct values, want %d", got, want)
	}
	h := NewEnvoyHotKey("p")
	if got, want := h.Len(), 1; got != want {
		t.Errorf("hot key Len() = %d, want %d", got, want)
	}
	if !strings.Contains(envoyRules, "key: hot") || !strings.Contains(envoyRules, "key: user") {
		t.Errorf("rules %q lack the workloads' descriptor keys", envoyRules)
	}
}

func TestRunMaxRequests(t *testing.T) {
	c := ceilingJSON(t, 4)
	for _, rate := range []float64{0, 5000} {
		o := Run(context.Background(), c, testUniform(), Load{Conns: 4, Rate: rate, Duration: 5 * time.Second, MaxRequests: 100})
		if got := o.Requests + o.Errors; got == 0 || got > 100 {
			t.Errorf("rate %v: %d requests, %d errors, want 1 to 100 in all", rate, o.Requests, o.Errors)
		}
		if o.Elapsed >= 5*time.Second {
			t.Errorf("rate %v: elapsed %v, want the run to end when its 100 requests are sent", rate, o.Elapsed)
		}
	}
}

func TestSummarize(t *testing.T) {
	rs := []Result{
		{Workload: "ceiling", Mode: modeClose, Protocol: protoEnvoy, Store: "ceiling", ReqPerSec: 40000, GenBusy: 0.5},
		{Workload: "ceiling", Mode: modeClose, Protocol: protoJSON, Store: "ceiling", ReqPerSec: 20000, GenBusy: 0.6},
		{Workload: "uniform10k", Mode: modeClose, Protocol: protoEnvoy, Store: "redis", ReqPerSec: 26000},
		{Workload: "uniform10k", Mode: modeOpen, Protocol: protoEnvoy, Store: "redis", Rate: 13000, P99Ms: 1.5, GenBusy: 0.4,
			PairedCeilingP99Ms: ptr(0.75), PairedCeilingGenBusy: ptr(0.3)},
		{Workload: pairedCeiling, Mode: modeClose, Protocol: protoJSON, Store: "ceiling", ReqPerSec: 99999, PairedWith: "x"},
		{Workload: "hotkey", Mode: modeClose, Protocol: protoJSON, Store: "redis", ReqPerSec: 10000},
		{Workload: "uniform10k", Mode: modeClose, Protocol: protoJSON, Store: "memory", ReqPerSec: 9000, PairedCeiling: ptr(10000.0),
			PairedCeilingGenBusy: ptr(0.95)},
		{Workload: "hotkey", Mode: modeOpen, Protocol: protoJSON, Store: "redis", Rate: 5000, P99Ms: 1, Unsent: 3, PairedCeilingP99Ms: ptr(1.0)},
	}
	gs := Summarize(rs, testRule)
	if got, want := len(gs), 3; got != want {
		t.Fatalf("Summarize() = %d goals, want %d: %+v", got, want, gs)
	}
	env, js, mem := gs[0], gs[1], gs[2]
	if mem.Ratio == nil || *mem.Ratio != 0.9 || mem.CeilingReqPerSec != 10000 {
		t.Errorf("paired memory goal = %+v (ratio %s), want ratio 0.9 against its paired ceiling", mem, fmtp(mem.Ratio))
	}
	if mem.Refused == "" || mem.RatioMet() || mem.Met() {
		t.Errorf("paired memory goal = %+v, want its ratio refused: its ceiling's generator was 95%% busy", mem)
	}
	if env.Protocol != protoEnvoy || env.Ratio == nil || *env.Ratio != 0.65 || env.Refused != "" || !env.OpenMet() || !env.Met() {
		t.Errorf("envoy goal = %+v (ratio %s), want ratio 0.65, p99 1.5 ms within 2x the ceiling's 0.75, met", env, fmtp(env.Ratio))
	}
	if js.Ratio == nil || *js.Ratio != 0.5 || js.RatioMet() || js.OpenMet() || js.Met() {
		t.Errorf("json hot key goal = %+v (ratio %s), want ratio 0.5 (goal 0.9), p99 with unsent requests: not met", js, fmtp(js.Ratio))
	}
	if got := Refusals(gs); len(got) != 1 || !strings.Contains(got[0], "95% busy") {
		t.Errorf("Refusals() = %q, want one, for the 95%% busy ceiling", got)
	}
	summaryContains(t, gs, "0.65", "1.50 @ 13000", "0.75", "(3 unsent)", ">= 0.90", "refused (0.90)", "40% / 30%")

	// Over 2x the ceiling's p99, or a node open row whose generator was
	// too busy, fails the open-loop goal.
	rs[3].P99Ms = 1.6
	if g := Summarize(rs, testRule)[0]; g.OpenMet() {
		t.Errorf("p99 1.6 ms against the ceiling's 0.75: OpenMet() = true, want false")
	}
	rs[3].P99Ms, rs[3].GenBusy = 1.5, 0.8
	if g := Summarize(rs, testRule)[0]; g.OpenMet() || g.OpenRefused == "" {
		t.Errorf("node open row's generator 80%% busy: %+v, want the open-loop comparison refused", g)
	}
}

// summaryContains fails t unless WriteSummary's table of gs contains
// each of wants.
func summaryContains(t *testing.T, gs []GoalResult, wants ...string) {
	t.Helper()
	var b bytes.Buffer
	if err := WriteSummary(&b, gs); err != nil {
		t.Fatal(err)
	}
	for _, want := range wants {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteSummary() = %q, want it to contain %q", b.String(), want)
		}
	}
}

// TestSummarizeCPU checks the CPU ratio: the ceiling's CPU per request
// (its paired row's when paired) over the node's with its Redis's.
func TestSummarizeCPU(t *testing.T) {
	rs := []Result{
		{Workload: "ceiling", Mode: modeClose, Protocol: protoJSON, Store: "ceiling", ReqPerSec: 20000, CPUPerReqUs: 40},
		{Workload: "uniform10k", Mode: modeClose, Protocol: protoJSON, Store: "redis", ReqPerSec: 9000, CPUPerReqUs: 60, RedisCPUPerReqUs: ptr(20.0)},
		{Workload: "uniform10k", Mode: modeClose, Protocol: protoJSON, Store: "memory", ReqPerSec: 9000, CPUPerReqUs: 50,
			PairedCeiling: ptr(10000.0), PairedCeilingCPU: 45},
	}
	gs := Summarize(rs, testRule)
	if got, want := len(gs), 2; got != want {
		t.Fatalf("Summarize() = %d goals, want %d: %+v", got, want, gs)
	}
	red, mem := gs[0], gs[1]
	if red.CPUPerReqUs != 80 || red.CeilingCPUPerReqUs != 40 || red.CPURatio == nil || *red.CPURatio != 0.5 {
		t.Errorf("redis goal = %+v (CPU ratio %s), want 80 us/req against 40, ratio 0.5", red, fmtp(red.CPURatio))
	}
	if mem.CPUPerReqUs != 50 || mem.CeilingCPUPerReqUs != 45 || mem.CPURatio == nil || *mem.CPURatio != 0.9 {
		t.Errorf("memory goal = %+v (CPU ratio %s), want 50 us/req against its paired ceiling's 45, ratio 0.9", mem, fmtp(mem.CPURatio))
	}
	summaryContains(t, gs, "80.0", "40.0", "0.50", "45.0", "0.90")
	if got := cpuSplit(rs[1]); got != "node 60.0 + redis 20.0" {
		t.Errorf("cpuSplit() = %q, want node 60.0 + redis 20.0", got)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	c := ceilingJSON(t, 2)
	for _, rate := range []float64{0, 1000} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		Run(ctx, c, testUniform(), Load{Conns: 2, Rate: rate, Duration: time.Minute})
		cancel()
		if el := time.Since(start); el > 30*time.Second {
			t.Errorf("rate %v: Run() took %v after its context ended", rate, el)
		}
	}
}

func TestParseCPUTimes(t *testing.T) {
	for _, tt := range []struct {
		stat         string
		total, steal uint64
		ok           bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  100 2 30 800 5 1 2 60 7 0\ncpu0 50 1 15 400 2 0 1 30 3 0\n", 1000, 60, true},
		{"cpu  100 2 30 800 5 1 2 0\n", 940, 0, true},
		{"cpu  100 2 30 800 5 1 2\n", 0, 0, false},
		{"intr 1 2 3 4 5 6 7 8 9\n", 0, 0, false},
		{"cpu  100 2 30 800 5 1 2 x\n", 0, 0, false},
	} {
		total, steal, ok := parseCPUTimes(tt.stat)
		if total != tt.total || steal != tt.steal || ok != tt.ok {
			t.Errorf("parseCPUTimes(%q) = %d, %d, %v, want %d, %d, %v", tt.stat, total, steal, ok, tt.total, tt.steal, tt.ok)
		}
	}
	if got := stealShare(1000, 60, true, 2000, 110, true); got != 0.05 {
		t.Errorf("stealShare = %v, want 0.05", got)
	}
	if got := stealShare(1000, 60, false, 2000, 110, true); got != -1 {
		t.Errorf("stealShare with a failed reading = %v, want -1", got)
	}
}
