package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// t0 is 30 s into the minute bucket 29,000,000 (2025-02-20 09:20:30 UTC).
var t0 = time.UnixMilli(29_000_000*60_000 + 30_000)

// testServer is an API server on a real loopback listener that speaks
// HTTP/1.1 and h2c, as rlnode's does.
type testServer struct {
	URL   string
	API   *api.Server
	Store region.Store
	Reg   *prometheus.Registry
}

// newServer starts cfg's handler (with the in-memory stack rlnode opens
// without Redis, a fixed clock at t0 and a fresh registry unless cfg sets
// them; a stack's metrics and failover wired in as rlnode does) and stops
// it when t ends.
func newServer(t *testing.T, cfg api.Config) *testServer {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = storetest.Open(t, region.Config{Region: cfg.Region})
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return t0 }
	}
	reg := prometheus.NewRegistry()
	if cfg.Registerer == nil {
		cfg.Registerer = reg
	}
	if st, ok := cfg.Store.(*region.Stack); ok {
		// As rlnode wires a stack: its layers' metrics, and its failover
		// for /readyz.
		cfg.Registerer.MustRegister(st.Collectors()...)
		if cfg.Failover == nil {
			cfg.Failover = st.Failover
		}
	}
	h, err := api.NewHandler(cfg)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	srv := apitest.Serve(t, h)
	return &testServer{URL: srv.URL, API: h, Store: cfg.Store, Reg: reg}
}

// protocols are the ways the tests call the service.
var protocols = []struct {
	name string
	opts []connect.ClientOption
	h2c  bool
}{
	{name: "connect-json", opts: []connect.ClientOption{connect.WithProtoJSON()}},
	{name: "grpc", opts: []connect.ClientOption{connect.WithGRPC()}, h2c: true},
	{name: "grpc-web", opts: []connect.ClientOption{connect.WithGRPCWeb()}},
}

func (s *testServer) client(t *testing.T, h2c bool, opts ...connect.ClientOption) ratelimitv1connect.RateLimitServiceClient {
	t.Helper()
	hc := http.DefaultClient
	if h2c {
		hc = apitest.H2CClient(t)
	}
	return ratelimitv1connect.NewRateLimitServiceClient(hc, s.URL, opts...)
}

func inline(limit uint64, w time.Duration) *ratelimitv1.Limit {
	return &ratelimitv1.Limit{Limit: limit, Window: durationpb.New(w)}
}

// TestAcceptance101 is the acceptance: 101 Checks for a
// 100-per-minute inline limit answer allowed 100 times, then denied with the
// right retry_after.
func TestAcceptance101(t *testing.T) {
	// The 100 hits all come at one instant, 30 s into the bucket. The
	// default sliding window knows it (their span is one millisecond): they
	// leave the trailing window all at once, 60 s later. The two-bucket
	// counter takes them as spread over the bucket: in the next bucket,
	// starting in 30 s, they count as previous with weight (60000-e)/60000,
	// and floor(100 * (60000-e)/60000) <= 99 first holds at e = 1 ms.
	algos := []struct {
		algo   ratelimitv1.Algorithm
		retry  time.Duration
		weight float64
	}{
		{ratelimitv1.Algorithm_ALGORITHM_UNSPECIFIED, time.Minute, 0},
		{ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW_TWO_BUCKET, 30*time.Second + time.Millisecond, 0.5},
	}
	for _, st := range stores {
		for _, pr := range protocols {
			for _, al := range algos {
				t.Run(st.name+"/"+pr.name+"/"+al.algo.String(), func(t *testing.T) {
					s := newServer(t, api.Config{Store: st.new(t)})
					c := s.client(t, pr.h2c, pr.opts...)
					ctx := context.Background()
					lim := inline(100, time.Minute)
					lim.Algorithm = al.algo
					req := &ratelimitv1.CheckRequest{Key: "alice", Limit: lim}
					for i := 1; i <= 100; i++ {
						resp, err := c.Check(ctx, connect.NewRequest(req))
						if err != nil {
							t.Fatalf("Check %d: %v", i, err)
						}
						if !resp.Msg.Allowed {
							t.Fatalf("Check %d: denied, want allowed", i)
						}
						if got, want := resp.Msg.Remaining, uint64(100-i); got != want {
							t.Errorf("Check %d: remaining = %d, want %d", i, got, want)
						}
					}
					resp, err := c.Check(ctx, connect.NewRequest(req))
					if err != nil {
						t.Fatalf("Check 101: %v", err)
					}
					m := resp.Msg
					if m.Allowed {
						t.Fatalf("Check 101: allowed, want denied")
					}
					if got, want := m.RetryAfter.AsDuration(), al.retry; got != want {
						t.Errorf("retry_after = %v, want %v", got, want)
					}
					if got, want := m.Remaining, uint64(0); got != want {
						t.Errorf("remaining = %d, want %d", got, want)
					}
					if got, want := m.Limit, uint64(100); got != want {
						t.Errorf("limit = %d, want %d", got, want)
					}
					stats := m.Stats
					if got, want := stats.Bucket, int64(29_000_000); got != want {
						t.Errorf("stats.bucket = %d, want %d", got, want)
					}
					if got, want := stats.Current, uint64(100); got != want {
						t.Errorf("stats.current = %d, want %d", got, want)
					}
					if got, want := stats.Estimate, uint64(100); got != want {
						t.Errorf("stats.estimate = %d, want %d", got, want)
					}
					if got, want := stats.PreviousWeight, al.weight; got != want {
						t.Errorf("stats.previous_weight = %v, want %v", got, want)
					}
					if len(stats.Regions) != 1 || stats.Regions[0].Region != "local" || stats.Regions[0].Current != 100 {
						t.Errorf("stats.regions = %v, want [local current 100]", stats.Regions)
					}
					// Before this request: whole 100, nothing weighted.
					if got := stats.Whole; got != 100 || len(stats.Terms) != 0 || stats.ElapsedMs != 30000 {
						t.Errorf("stats whole %d terms %v elapsed %d, want 100, none, 30000", got, stats.Terms, stats.ElapsedMs)
					}
				})
			}
		}
	}
}

func TestInvalidArgument(t *testing.T) {
	rs, err := rules.New([]rules.Rule{{Name: "per-user", Limit: window.Limit{Limit: 10, Window: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, api.Config{Rules: rs})
	cases := []struct {
		name string
		req  *ratelimitv1.CheckRequest
		want string // the message
		// binary marks requests that JSON cannot carry.
		binary bool
	}{
		{"empty key", &ratelimitv1.CheckRequest{Limit: inline(10, time.Minute)}, "key: must not be empty", false},
		{"long key", &ratelimitv1.CheckRequest{Key: strings.Repeat("k", 1025), Limit: inline(10, time.Minute)}, "key: 1025 bytes, more than the maximum of 1024", false},
		{"hits over limit", &ratelimitv1.CheckRequest{Key: "a", Hits: 11, Limit: inline(10, time.Minute)}, "hits: 11 is more than the limit of 10", false},
		{"hits over rule limit", &ratelimitv1.CheckRequest{Key: "a", Hits: 11, Rule: "per-user"}, "hits: 11 is more than the limit of 10", false},
		{"unknown rule", &ratelimitv1.CheckRequest{Key: "a", Rule: "nope"}, `rule: unknown rule "nope"`, false},
		{"both", &ratelimitv1.CheckRequest{Key: "a", Rule: "per-user", Limit: inline(10, time.Minute)}, "rule: set exactly one of rule and limit, not both", false},
		{"neither", &ratelimitv1.CheckRequest{Key: "a"}, "limit: required when no rule is named (set exactly one of rule and limit)", false},
		{"limit 0", &ratelimitv1.CheckRequest{Key: "a", Limit: inline(0, time.Minute)}, "limit.limit: must be from 1 to 2^53 (9007199254740992), got 0", false},
		{"limit over 2^53", &ratelimitv1.CheckRequest{Key: "a", Limit: inline(1<<53+1, time.Minute)}, "limit.limit: must be from 1 to 2^53 (9007199254740992), got 9007199254740993", false},
		{"no window", &ratelimitv1.CheckRequest{Key: "a", Limit: &ratelimitv1.Limit{Limit: 10}}, "limit.window: required, from 1s to 168h0m0s", false},
		{"strict fixed window", &ratelimitv1.CheckRequest{Key: "a", Limit: &ratelimitv1.Limit{Limit: 10, Window: durationpb.New(time.Minute), Algorithm: ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW, Strict: true}}, "limit.strict: applies to the sliding window algorithm only, not fixed_window", false},
		{"window too short", &ratelimitv1.CheckRequest{Key: "a", Limit: inline(10, 999*time.Millisecond)}, "limit.window: must be from 1s to 168h0m0s, got 999ms", false},
		{"window too long", &ratelimitv1.CheckRequest{Key: "a", Limit: inline(10, 8*24*time.Hour)}, "limit.window: must be from 1s to 168h0m0s, got 192h0m0s", false},
		{"window not whole ms", &ratelimitv1.CheckRequest{Key: "a", Limit: inline(10, 1500*time.Microsecond+time.Second)}, "limit.window: must be a whole number of milliseconds, got 1.0015s", false},
		{"window negative", &ratelimitv1.CheckRequest{Key: "a", Limit: &ratelimitv1.Limit{Limit: 10, Window: &durationpb.Duration{Seconds: -5}}}, "limit.window: must be from 1s to 168h0m0s, got -5s", false},
		{"window malformed", &ratelimitv1.CheckRequest{Key: "a", Limit: &ratelimitv1.Limit{Limit: 10, Window: &durationpb.Duration{Seconds: 5, Nanos: -1}}}, "limit.window: not a valid duration (seconds 5, nanos -1)", true},
		{"unknown algorithm", &ratelimitv1.CheckRequest{Key: "a", Limit: &ratelimitv1.Limit{Limit: 10, Window: durationpb.New(time.Minute), Algorithm: 99}}, "limit.algorithm: unknown algorithm 99", false},
	}
	for _, pr := range protocols {
		c := s.client(t, pr.h2c, pr.opts...)
		for _, tc := range cases {
			if tc.binary && pr.name == "connect-json" {
				continue
			}
			t.Run(pr.name+"/"+tc.name, func(t *testing.T) {
				_, err := c.Check(context.Background(), connect.NewRequest(tc.req))
				checkInvalid(t, "Check", err, tc.want)
				p := &ratelimitv1.PeekRequest{Key: tc.req.Key, Hits: tc.req.Hits, Rule: tc.req.Rule, Limit: tc.req.Limit}
				_, err = c.Peek(context.Background(), connect.NewRequest(p))
				checkInvalid(t, "Peek", err, tc.want)
				resp, err := c.CheckBatch(context.Background(), connect.NewRequest(&ratelimitv1.CheckBatchRequest{
					Checks: []*ratelimitv1.CheckRequest{{Key: "ok " + pr.name + tc.name, Limit: inline(10, time.Minute)}, tc.req},
				}))
				if err != nil {
					t.Fatalf("CheckBatch: %v", err)
				}
				if got := resp.Msg.Results[0].GetResponse(); got == nil || !got.Allowed {
					t.Errorf("CheckBatch results[0] = %v, want allowed", resp.Msg.Results[0])
				}
				e := resp.Msg.Results[1].GetError()
				if e == nil {
					t.Fatalf("CheckBatch results[1] = %v, want an error", resp.Msg.Results[1])
				}
				if got, want := e.Code, "invalid_argument"; got != want {
					t.Errorf("CheckBatch results[1].error.code = %q, want %q", got, want)
				}
				if want := "checks[1]." + tc.want; !strings.HasPrefix(e.Message, want) {
					t.Errorf("CheckBatch results[1].error.message = %q, want it to start with %q", e.Message, want)
				}
			})
		}
	}
}

// checkInvalid fails t unless err is invalid_argument with the message want.
func checkInvalid(t *testing.T, method string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want invalid_argument %q", method, want)
	}
	if got, wantCode := connect.CodeOf(err), connect.CodeInvalidArgument; got != wantCode {
		t.Errorf("%s: code = %v, want %v (%v)", method, got, wantCode, err)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%s: error %v is not a *connect.Error", method, err)
	}
	if ce.Message() != want {
		t.Errorf("%s: message = %q, want %q", method, ce.Message(), want)
	}
}

func TestHitsZeroMeansOne(t *testing.T) {
	s := newServer(t, api.Config{})
	c := s.client(t, false)
	resp, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: "k", Hits: 0, Limit: inline(5, time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Msg.Remaining, uint64(4); got != want {
		t.Errorf("remaining = %d, want %d", got, want)
	}
	resp, err = c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: "k", Hits: 4, Limit: inline(5, time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Msg.Remaining, uint64(0); !resp.Msg.Allowed || got != want {
		t.Errorf("allowed, remaining = %v, %d, want true, %d", resp.Msg.Allowed, got, want)
	}
}

func TestRulesCountSeparately(t *testing.T) {
	rs, err := rules.Parse([]byte(`
rules:
  - name: per-user
    limit: 2
    window: 1m
  - name: per-user-fixed
    limit: 2
    window: 1m
    algorithm: fixed_window
`))
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, api.Config{Rules: rs})
	c := s.client(t, false)
	ctx := context.Background()
	check := func(rule string, lim *ratelimitv1.Limit) bool {
		t.Helper()
		resp, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "alice", Rule: rule, Limit: lim}))
		if err != nil {
			t.Fatalf("Check(%s): %v", rule, err)
		}
		return resp.Msg.Allowed
	}
	steps := []struct {
		rule string
		lim  *ratelimitv1.Limit
		want bool
	}{
		{"per-user", nil, true},
		{"per-user", nil, true},
		{"per-user", nil, false},
		{"per-user-fixed", nil, true}, // another rule, another counter
		{"per-user-fixed", nil, true},
		{"per-user-fixed", nil, false},
		{"", inline(2, time.Minute), true}, // inline: the caller's key, apart from the rules
		{"", inline(2, time.Minute), true},
		{"", inline(2, time.Minute), false},
		{"", inline(2, time.Hour), true}, // another window, another counter
	}
	for i, st := range steps {
		if got := check(st.rule, st.lim); got != st.want {
			t.Errorf("step %d (%s): allowed = %v, want %v", i, st.rule, got, st.want)
		}
	}

	// Swapping the rules takes effect for the next request.
	bigger, err := rules.New([]rules.Rule{{Name: "per-user", Limit: window.Limit{Limit: 3, Window: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	s.API.SetRules(bigger)
	if got := check("per-user", nil); !got {
		t.Errorf("after SetRules with limit 3: allowed = false, want true")
	}
	_, err = c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "alice", Rule: "per-user-fixed"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("removed rule: err = %v, want invalid_argument", err)
	}
}

// countingStore counts Check calls.
type countingStore struct {
	region.Store
	calls atomic.Int64
}

func (s *countingStore) Check(ctx context.Context, reqs []region.Request, res []region.Result) error {
	s.calls.Add(1)
	return s.Store.Check(ctx, reqs, res)
}

func TestCheckBatch(t *testing.T) {
	for _, sf := range stores {
		for _, pr := range protocols {
			testCheckBatch(t, sf.name, sf.new, pr.name, pr.h2c, pr.opts)
		}
	}
}

func testCheckBatch(t *testing.T, storeName string, newStore func(*testing.T) region.Store, proto string, h2c bool, opts []connect.ClientOption) {
	t.Run(storeName+"/"+proto, func(t *testing.T) {
		store := &countingStore{Store: newStore(t)}
		s := newServer(t, api.Config{Store: store})
		c := s.client(t, h2c, opts...)
		resp, err := c.CheckBatch(context.Background(), connect.NewRequest(&ratelimitv1.CheckBatchRequest{
			Checks: []*ratelimitv1.CheckRequest{
				{Key: "a", Hits: 2, Limit: inline(3, time.Minute)},
				{Key: "", Limit: inline(3, time.Minute)},
				{Key: "a", Hits: 2, Limit: inline(3, time.Minute)}, // same key: sees the first
				{Key: "b", Limit: inline(3, time.Minute)},
			},
		}))
		if err != nil {
			t.Fatal(err)
		}
		rs := resp.Msg.Results
		if got, want := len(rs), 4; got != want {
			t.Fatalf("len(results) = %d, want %d", got, want)
		}
		if r := rs[0].GetResponse(); r == nil || !r.Allowed || r.Remaining != 1 {
			t.Errorf("results[0] = %v, want allowed, remaining 1", rs[0])
		}
		if e := rs[1].GetError(); e == nil || e.Code != "invalid_argument" || e.Message != "checks[1].key: must not be empty" {
			t.Errorf("results[1] = %v, want invalid_argument checks[1].key: must not be empty", rs[1])
		}
		if r := rs[2].GetResponse(); r == nil || r.Allowed || r.RetryAfter.AsDuration() <= 0 {
			t.Errorf("results[2] = %v, want denied with a retry_after", rs[2])
		}
		if r := rs[3].GetResponse(); r == nil || !r.Allowed || r.Remaining != 2 {
			t.Errorf("results[3] = %v, want allowed, remaining 2", rs[3])
		}
		if got, want := store.calls.Load(), int64(1); got != want {
			t.Errorf("store Check calls = %d, want %d (one round trip per batch)", got, want)
		}

		// An empty batch is an empty answer; an oversized one is refused.
		resp, err = c.CheckBatch(context.Background(), connect.NewRequest(&ratelimitv1.CheckBatchRequest{}))
		if err != nil || len(resp.Msg.Results) != 0 {
			t.Errorf("empty batch = %v, %v, want no results", resp, err)
		}
		big := make([]*ratelimitv1.CheckRequest, api.DefaultMaxBatch+1)
		for i := range big {
			big[i] = &ratelimitv1.CheckRequest{Key: "x", Limit: inline(1<<40, time.Minute)}
		}
		_, err = c.CheckBatch(context.Background(), connect.NewRequest(&ratelimitv1.CheckBatchRequest{Checks: big}))
		checkInvalid(t, "CheckBatch", err, "checks: more than the maximum of 1000 checks")
	})
}

func TestPeek(t *testing.T) {
	for _, sf := range stores {
		for _, pr := range append(protocols, struct {
			name string
			opts []connect.ClientOption
			h2c  bool
		}{name: "connect-get", opts: []connect.ClientOption{connect.WithProtoJSON(), connect.WithHTTPGet()}}) {
			testPeek(t, sf.name+"/"+pr.name, sf.new, pr.h2c, pr.opts)
		}
	}
}

func testPeek(t *testing.T, name string, newStore func(*testing.T) region.Store, h2c bool, opts []connect.ClientOption) {
	t.Run(name, func(t *testing.T) {
		s := newServer(t, api.Config{Store: newStore(t)})
		c := s.client(t, h2c, opts...)
		ctx := context.Background()
		lim := inline(3, time.Minute)
		for i := 0; i < 2; i++ {
			if _, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "p", Limit: lim})); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 3; i++ { // peeking consumes nothing
			resp, err := c.Peek(ctx, connect.NewRequest(&ratelimitv1.PeekRequest{Key: "p", Limit: lim}))
			if err != nil {
				t.Fatal(err)
			}
			if r := resp.Msg.Response; !r.Allowed || r.Remaining != 0 || r.Stats.Current != 2 {
				t.Errorf("Peek %d = %v, want allowed, remaining 0, current 2", i, r)
			}
		}
		resp, err := c.Peek(ctx, connect.NewRequest(&ratelimitv1.PeekRequest{Key: "p", Hits: 2, Limit: lim}))
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.Msg.Response; r.Allowed || r.RetryAfter.AsDuration() != time.Minute {
			// The two hits came at one instant, 30 s into the bucket: they
			// leave the trailing window together, a minute later.
			t.Errorf("Peek 2 hits = %v, want denied, retry_after 1m", r)
		}
		chk, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "p", Limit: lim}))
		if err != nil || !chk.Msg.Allowed {
			t.Errorf("Check after peeks = %v, %v, want allowed", chk, err)
		}
	})
}

// TestPeekHTTPGet uses the GET form documented in the README.
func TestPeekHTTPGet(t *testing.T) {
	s := newServer(t, api.Config{})
	q := url.Values{
		"encoding": {"json"},
		"message":  {`{"key":"alice","limit":{"limit":100,"window":"60s"}}`},
	}
	resp, err := http.Get(s.URL + ratelimitv1connect.RateLimitServicePeekProcedure + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"allowed":true,"limit":"100","remaining":"99"`) {
		t.Errorf("GET Peek = %d %s, want 200 with allowed and remaining 99", resp.StatusCode, body)
	}
	// Zero fields are shown too, so that a denial reads "allowed":false.
	if !strings.Contains(string(body), `"estimate":"0"`) {
		t.Errorf("GET Peek = %s, want zero fields shown", body)
	}
}

// errDown is the error of the tests' store that is down, as a Redis that
// refuses connections would answer.
var errDown = errors.New("connection refused")

func TestStoreErrorIsUnavailable(t *testing.T) {
	s := newServer(t, api.Config{Store: storetest.Down{Err: errDown}})
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			c := s.client(t, pr.h2c, pr.opts...)
			ctx := context.Background()
			_, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "a", Limit: inline(1, time.Second)}))
			if got, want := connect.CodeOf(err), connect.CodeUnavailable; got != want {
				t.Errorf("Check code = %v, want %v (%v)", got, want, err)
			}
			_, err = c.Peek(ctx, connect.NewRequest(&ratelimitv1.PeekRequest{Key: "a", Limit: inline(1, time.Second)}))
			if got, want := connect.CodeOf(err), connect.CodeUnavailable; got != want {
				t.Errorf("Peek code = %v, want %v (%v)", got, want, err)
			}
			_, err = c.CheckBatch(ctx, connect.NewRequest(&ratelimitv1.CheckBatchRequest{Checks: []*ratelimitv1.CheckRequest{{Key: "a", Limit: inline(1, time.Second)}}}))
			if got, want := connect.CodeOf(err), connect.CodeUnavailable; got != want {
				t.Errorf("CheckBatch code = %v, want %v (%v)", got, want, err)
			}
		})
	}
	wantMetrics(t, s,
		"rlcluster_store_errors_total 9",
		`rlcluster_decisions_total{outcome="error",rule="inline"} 6`,
	)
	if body := get(t, s.URL+"/readyz", http.StatusServiceUnavailable); !strings.Contains(body, "connection refused") {
		t.Errorf("/readyz = %q, want the store's error", body)
	}
	get(t, s.URL+"/healthz", http.StatusOK)
}

// wantMetrics fails t for each of want that s's /metrics lacks, and
// returns the body.
func wantMetrics(t *testing.T, s *testServer, want ...string) string {
	t.Helper()
	body := get(t, s.URL+"/metrics", http.StatusOK)
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %q:\n%s", w, logtest.Lines(body, "rlcluster_"))
		}
	}
	return body
}

// get GETs u and returns the body, failing t unless the status is
// wantStatus.
func get(t *testing.T, u string, wantStatus int) string {
	t.Helper()
	status, _, body := fwdAuth(t, u, nil)
	if status != wantStatus {
		t.Errorf("GET %s: status %d, want %d: %s", u, status, wantStatus, body)
	}
	return body
}

func TestMetricsAndProbes(t *testing.T) {
	rs, err := rules.New([]rules.Rule{{Name: "r", Limit: window.Limit{Limit: 1, Window: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, api.Config{Rules: rs})
	c := s.client(t, false)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "a", Rule: "r"}))
	}
	c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "a", Rule: "nope"}))
	c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "a", Limit: inline(5, time.Minute)}))
	wantMetrics(t, s,
		`rlcluster_decisions_total{outcome="allowed",rule="r"} 1`,
		`rlcluster_decisions_total{outcome="denied",rule="r"} 2`,
		`rlcluster_decisions_total{outcome="error",rule="unknown"} 1`,
		`rlcluster_decisions_total{outcome="allowed",rule="inline"} 1`,
		`rlcluster_decision_duration_seconds_bucket{method="Check",le="5e-05"}`,
		`rlcluster_decision_duration_seconds_count{method="Check"} 5`,
		"rlcluster_keys_held 2",
		"rlcluster_keys_evicted_total 0",
		"rlcluster_store_errors_total 0",
	)
	if got := get(t, s.URL+"/readyz", http.StatusOK); got != "ok\n" {
		t.Errorf("/readyz = %q, want ok", got)
	}
	if got := get(t, s.URL+"/healthz", http.StatusOK); got != "ok\n" {
		t.Errorf("/healthz = %q, want ok", got)
	}
}

// TestDenyCacheMetrics: the layers of a stack, registered as rlnode
// registers them, count the API's decisions; here a deny cache in front of
// a failover whose Redis is down (the stack's own metrics are tested in
// region's TestStackCollectors).
func TestDenyCacheMetrics(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	store := storetest.Open(t, region.Config{Redis: region.RedisConfig{URL: srv.URL()},
		Failover: region.FailoverConfig{ProbeMin: time.Hour}, DenyCache: &region.DenyCacheConfig{}})
	s := newServer(t, api.Config{Store: store})
	c := s.client(t, false)
	ctx := context.Background()
	// One admitted, one denied by the store, three denied from memory;
	// the first check also reads the key's reset instant and the store's
	// reset marker, each in this UTC year's bucket and the last one's
	// (four more misses).
	for i := 0; i < 5; i++ {
		if _, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "a", Limit: inline(1, time.Minute)})); err != nil {
			t.Fatal(err)
		}
	}
	wantMetrics(t, s,
		`rlcluster_decisions_total{outcome="denied",rule="inline"} 4`,
		"rlcluster_deny_cache_hits_total 3",
		"rlcluster_deny_cache_misses_total 6",
		"rlcluster_deny_cache_evictions_total 0",
		"rlcluster_deny_cache_entries 1",
		`rlcluster_store_mode{mode="local"} 1`,
		"rlcluster_store_fallback_decisions_total 6",
	)
}

func TestReadyChecks(t *testing.T) {
	var fail atomic.Bool
	s := newServer(t, api.Config{ReadyChecks: []api.ReadyCheck{{Name: "gossip", Check: func(context.Context) error {
		if fail.Load() {
			return errors.New("no members")
		}
		return nil
	}}}})
	get(t, s.URL+"/readyz", http.StatusOK)
	fail.Store(true)
	if got := get(t, s.URL+"/readyz", http.StatusServiceUnavailable); got != "not ready: gossip: no members\n" {
		t.Errorf("/readyz = %q", got)
	}
}

// TestPool: a Check shows a remote region's count with the age the Pool
// reports, and only admitted counter decisions with global scope are
// queued for the other regions.
func TestPool(t *testing.T) {
	pool := &apitest.Pool{Ages: map[string]time.Duration{"eu": 1500 * time.Millisecond}}
	rs, err := rules.New([]rules.Rule{{Name: "r", Limit: window.Limit{Limit: 10, Window: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	store := region.NewMemory(region.MemoryConfig{Region: "us"})
	s := newServer(t, api.Config{Store: store, Region: "us", Pool: pool, Rules: rs})
	ctx := context.Background()
	bucket := int64(29_000_000)
	if err := store.Merge(ctx, []region.Total{{Key: decision.RuleKey("r", "alice"), Window: time.Minute, Bucket: bucket, Region: "eu", Count: 4}}); err != nil {
		t.Fatal(err)
	}
	c := s.client(t, true, connect.WithGRPC())
	resp, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "alice", Rule: "r", Hits: 2}))
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Msg.Stats
	if got, want := st.Current, uint64(6); got != want {
		t.Errorf("stats.current = %d, want %d", got, want)
	}
	if got, want := len(st.Regions), 2; got != want {
		t.Fatalf("stats.regions = %v, want 2 regions", st.Regions)
	}
	eu, us := st.Regions[0], st.Regions[1]
	if eu.Region != "eu" || eu.Current != 4 || eu.Age.AsDuration() != 1500*time.Millisecond {
		t.Errorf("regions[0] = %v, want eu current 4 age 1.5s", eu)
	}
	if us.Region != "us" || us.Current != 2 || us.Age != nil {
		t.Errorf("regions[1] = %v, want us current 2, no age", us)
	}
	// A peek, a denial, an inline token bucket: none is replicated.
	c.Peek(ctx, connect.NewRequest(&ratelimitv1.PeekRequest{Key: "alice", Rule: "r"}))
	c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "alice", Rule: "r", Hits: 5}))
	c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "alice", Limit: &ratelimitv1.Limit{Limit: 5, Window: durationpb.New(time.Minute), Algorithm: ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET}}))
	c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "alice", Limit: inline(5, time.Minute)}))
	dirty := pool.Totals()
	// The totals carry where in the bucket the hits fell (30 s in), as a
	// coarse trail for the default sliding window, and the limit and the
	// estimate admitted at, for replication by urgency.
	at := func(n uint64) window.Trail { return window.Trail{{At: 30000, Cum: n}} }
	want := []region.Total{
		{Key: decision.RuleKey("r", "alice"), Window: time.Minute, Bucket: bucket, Region: "us", Count: 2, Trail: at(2), Limit: 10, Estimate: 6},
		{Key: decision.InlineKey("alice"), Window: time.Minute, Bucket: bucket, Region: "us", Count: 1, Trail: at(1), Limit: 5, Estimate: 1},
	}
	if len(dirty) != len(want) {
		t.Fatalf("Dirty calls = %v, want %v", dirty, want)
	}
	for i := range want {
		if !reflect.DeepEqual(dirty[i], want[i]) {
			t.Errorf("Dirty[%d] = %v, want %v", i, dirty[i], want[i])
		}
	}
}

func TestHealthWithGRPCGo(t *testing.T) {
	s := newServer(t, api.Config{})
	conn, err := grpc.NewClient(strings.TrimPrefix(s.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", ratelimitv1connect.RateLimitServiceName} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health Check(%q): %v", svc, err)
		}
		if got, want := resp.Status, healthpb.HealthCheckResponse_SERVING; got != want {
			t.Errorf("health Check(%q) = %v, want %v", svc, got, want)
		}
	}
	s.API.SetServing(false)
	resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: ratelimitv1connect.RateLimitServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Status, healthpb.HealthCheckResponse_NOT_SERVING; got != want {
		t.Errorf("after SetServing(false): %v, want %v", got, want)
	}
}

func TestReflection(t *testing.T) {
	s := newServer(t, api.Config{})
	rc := grpcreflect.NewClient(apitest.H2CClient(t), s.URL, connect.WithGRPC())
	stream := rc.NewStream(context.Background())
	t.Cleanup(func() { stream.Close() })
	names, err := stream.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, n := range names {
		got[string(n)] = true
	}
	for _, want := range []string{"ratelimit.v1.RateLimitService", "envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"} {
		if !got[want] {
			t.Errorf("ListServices() = %v, want %s in it", names, want)
		}
	}
	files, err := stream.FileContainingSymbol("ratelimit.v1.RateLimitService")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 || files[0].GetName() != "ratelimit/v1/ratelimit.proto" {
		t.Errorf("FileContainingSymbol: got %d files, first %q", len(files), files[0].GetName())
	}
}

// jsonPath is one way the JSON API is served.
type jsonPath struct {
	name string
	cfg  api.Config
}

// jsonPaths are the fast path and Connect's handler (a configured
// interceptor, here one that does nothing, turns the fast path off).
func jsonPaths() []jsonPath {
	noop := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc { return next })
	return []jsonPath{
		{"fast path", api.Config{}},
		{"connect", api.Config{HandlerOptions: []connect.HandlerOption{connect.WithInterceptors(noop)}}},
	}
}

// TestJSONUnknownNamesAreInvalid: a misspelled algorithm name or field in
// a JSON request is invalid_argument, not a silent default, on the fast
// path and through Connect (interceptors configured turn the fast path
// off).
func TestJSONUnknownNamesAreInvalid(t *testing.T) {
	for _, srv := range jsonPaths() {
		s := newServer(t, srv.cfg)
		for _, tc := range []struct{ name, body string }{
			{"misspelled enum name", `{"key":"a","limit":{"limit":"5","window":"60s","algorithm":"ALGORITHM_TOKEN_BUKET"}}`},
			{"config-style enum name", `{"key":"a","limit":{"limit":"5","window":"60s","algorithm":"token_bucket"}}`},
			{"unknown field", `{"key":"a","limt":{"limit":"5","window":"60s"}}`},
			{"unknown limit field", `{"key":"a","limit":{"limit":"5","window":"60s","algo":"ALGORITHM_TOKEN_BUCKET"}}`},
		} {
			t.Run(srv.name+"/"+tc.name, func(t *testing.T) {
				code, body := postJSON(t, s.URL+"/ratelimit.v1.RateLimitService/Check", tc.body)
				if code != http.StatusBadRequest || !strings.Contains(body, `"code":"invalid_argument"`) {
					t.Errorf("POST Check %s = %d %s, want 400 invalid_argument", tc.body, code, body)
				}
			})
		}
		code, body := postJSON(t, s.URL+"/ratelimit.v1.RateLimitService/Check", `{"key":"a","limit":{"limit":"5","window":"60s","algorithm":"ALGORITHM_TOKEN_BUCKET"}}`)
		if code != http.StatusOK {
			t.Errorf("%s: POST Check with a known algorithm = %d %s, want 200", srv.name, code, body)
		}
	}
}

// TestStatsRecomputeEstimate: with remote regions' halves merged in, every
// answer's stats give back its estimate with integer math alone, as the
// proto documents (whole plus the terms), and the terms follow from the
// regions' halves and elapsed_ms; the decision is estimate + hits <= limit.
// Weighted and strict sliding window, and the two-bucket counter.
func TestStatsRecomputeEstimate(t *testing.T) {
	var now atomic.Int64
	base := t0.Truncate(time.Minute).UnixMilli()
	store := region.NewMemory(region.MemoryConfig{Region: "us"})
	s := newServer(t, api.Config{Store: store, Region: "us", Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	c := s.client(t, true, connect.WithGRPC())
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 1))
	for _, al := range []struct {
		algo   ratelimitv1.Algorithm
		strict bool
	}{{0, false}, {0, true}, {ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW_TWO_BUCKET, false}} {
		lim := inline(40, time.Minute)
		lim.Algorithm, lim.Strict = al.algo, al.strict
		key := fmt.Sprintf("stats-%d-%v", al.algo, al.strict)
		remote := map[int64]*window.Trail{}
		denied := 0
		for i := range 400 {
			ms := base + int64(i)*450
			now.Store(ms)
			b := ms / 60000
			if rng.IntN(3) == 0 { // another region's hits, replicated
				h := remote[b]
				if h == nil {
					h = new(window.Trail)
					remote[b] = h
				}
				h.Add(ms-b*60000, 60000, 1+rng.Uint64N(2), false)
				if err := store.Merge(ctx, []region.Total{{Key: decision.InlineKey(key), Window: time.Minute, Bucket: b, Region: "eu", Count: h.Count(), Trail: *h}}); err != nil {
					t.Fatal(err)
				}
			}
			hits := 1 + rng.Uint64N(3)
			resp, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: key, Limit: lim, Hits: hits}))
			if err != nil {
				t.Fatal(err)
			}
			m := resp.Msg
			st := m.Stats
			est := st.Whole
			for _, tm := range st.Terms {
				est += window.MulDiv(tm.Count, tm.Numerator, tm.Denominator)
			}
			if est != st.Estimate || m.Allowed != (est+hits <= m.Limit) {
				t.Fatalf("step %d: estimate %d, whole + terms %d, hits %d, allowed %v: %v", i, st.Estimate, est, hits, m.Allowed, st)
			}
			if al.algo == 0 {
				var fromMarks uint64
				for _, rc := range st.Regions {
					for _, mk := range rc.PreviousMarks {
						if mk.AtMs > st.ElapsedMs {
							fromMarks += mk.Count
						}
					}
				}
				if got, want := st.Whole+fromMarks, st.Estimate; got != want {
					t.Fatalf("step %d: whole + the regions' marks after e = %d, estimate %d", i, got, want)
				}
			}
			if !m.Allowed {
				denied++
			}
		}
		if denied == 0 {
			t.Errorf("%s strict %v: nothing denied, the test checks little", al.algo, al.strict)
		}
	}
}

// TestPreviousMarksStillCounting checks that an answer lists the previous
// bucket's marks that still count (after elapsed_ms), with their hits,
// and not those that have left the trailing window: they would make every
// answer of a busy key a bucket's worth of marks long. The estimate's term
// for the region is the listed marks' hits.
func TestPreviousMarksStillCounting(t *testing.T) {
	start := t0.Truncate(time.Minute) // a bucket's start
	var now atomic.Int64
	now.Store(start.UnixMilli())
	srv := newServer(t, api.Config{Region: "eu", Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	c := ratelimitv1connect.NewRateLimitServiceClient(http.DefaultClient, srv.URL, connect.WithProtoJSON())
	check := func(at time.Duration, hits uint64) *ratelimitv1.CheckResponse {
		t.Helper()
		now.Store(start.Add(at).UnixMilli())
		resp, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: "busy", Hits: hits, Limit: inline(100, time.Minute)}))
		if err != nil {
			t.Fatalf("Check at %s: %v", at, err)
		}
		return resp.Msg
	}
	check(10*time.Second, 1)
	check(40*time.Second, 2)
	check(50*time.Second, 3)
	// At the next bucket's start every mark counts.
	if n := len(check(60*time.Second, 1).GetStats().GetRegions()[0].GetPreviousMarks()); n != 3 {
		t.Errorf("%d previous marks at the bucket's start, want 3", n)
	}
	// 25 s into the next bucket: the mark at 10 s has left, 40 s and 50 s
	// still count.
	got := check(85*time.Second, 1)
	st := got.GetStats()
	if st.GetElapsedMs() != 25_000 || st.GetPrevious() != 6 {
		t.Fatalf("elapsed %d ms, previous %d; want 25000, 6", st.GetElapsedMs(), st.GetPrevious())
	}
	marks := st.GetRegions()[0].GetPreviousMarks()
	want := []struct{ at, n int64 }{{40_000, 2}, {50_000, 3}}
	if len(marks) != len(want) {
		t.Fatalf("previous marks %v, want %v", marks, want)
	}
	for i, w := range want {
		if marks[i].GetAtMs() != w.at || int64(marks[i].GetCount()) != w.n {
			t.Errorf("mark %d = %v, want at %d ms, %d hits", i, marks[i], w.at, w.n)
		}
	}
	if terms := st.GetTerms(); len(terms) != 1 || terms[0].GetCount() != 5 || st.GetEstimate() != 6 {
		t.Errorf("terms %v, estimate %d; want one term of 5 hits, estimate 6 (with the hit at 60 s)", terms, st.GetEstimate())
	}
}

// TestOmitStats: a check that sets omit_stats gets the decision without
// stats, over JSON (the fast path and Connect's), protobuf, gRPC and in a
// batch, and is counted as any other; one that does not still gets them.
func TestOmitStats(t *testing.T) {
	srv := newServer(t, api.Config{Region: "eu"})
	lim := inline(3, time.Minute)
	for _, opts := range []struct {
		name string
		opt  []connect.ClientOption
	}{{"json", []connect.ClientOption{connect.WithProtoJSON()}}, {"proto", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}} {
		t.Run(opts.name, func(t *testing.T) {
			c := srv.client(t, true, opts.opt...)
			key := "omit-" + opts.name
			var remaining []uint64
			for i, omit := range []bool{true, false, true, true} {
				resp, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: key, Limit: lim, OmitStats: omit}))
				if err != nil {
					t.Fatalf("check %d: %v", i, err)
				}
				if got := resp.Msg.GetStats() != nil; got == omit {
					t.Errorf("check %d (omit_stats %v): stats set %v", i, omit, got)
				}
				remaining = append(remaining, resp.Msg.GetRemaining())
				if i == 3 && resp.Msg.GetAllowed() {
					t.Errorf("check 4 of a limit of 3 allowed")
				}
			}
			if !slices.Equal(remaining, []uint64{2, 1, 0, 0}) {
				t.Errorf("remaining %v, want [2 1 0 0]: every check counted", remaining)
			}
			peek, err := c.Peek(context.Background(), connect.NewRequest(&ratelimitv1.PeekRequest{Key: key, Limit: lim, OmitStats: true}))
			if err != nil || peek.Msg.GetResponse().GetStats() != nil || peek.Msg.GetResponse().GetAllowed() {
				t.Errorf("peek with omit_stats: %v, %v; want denied, no stats", peek, err)
			}
			batch, err := c.CheckBatch(context.Background(), connect.NewRequest(&ratelimitv1.CheckBatchRequest{Checks: []*ratelimitv1.CheckRequest{
				{Key: key + "-b", Limit: lim, OmitStats: true}, {Key: key + "-b", Limit: lim}}}))
			if err != nil {
				t.Fatal(err)
			}
			rs := batch.Msg.GetResults()
			if len(rs) != 2 || rs[0].GetResponse().GetStats() != nil || rs[1].GetResponse().GetStats() == nil || rs[1].GetResponse().GetRemaining() != 1 {
				t.Errorf("batch results %v: want the first without stats, the second with, remaining 1", rs)
			}
		})
	}
	// The body of a plain JSON answer has no stats member at all.
	resp, err := http.Post(srv.URL+"/ratelimit.v1.RateLimitService/Check", "application/json", strings.NewReader(`{"key":"raw","omitStats":true,"limit":{"limit":5,"window":"60s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), "stats") || !strings.Contains(string(body), `"remaining":"4"`) {
		t.Errorf("JSON answer %d %s: want 200, remaining 4, no stats", resp.StatusCode, body)
	}
}
