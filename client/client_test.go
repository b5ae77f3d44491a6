package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/rlcluster/rlcluster/client"
	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/porttest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// t0 is 30 s into a minute.
var t0 = time.Unix(1_750_000_830, 0)

// node is an in-process rlnode handler on a real loopback server.
type node struct {
	URL  string
	hits atomic.Int64 // requests that reached the server
}

// startTestNode serves api.NewHandler over store (memory when nil) with
// the rules fw (fixed window, 2/min) and sw (sliding window, 2/min) and the
// clock at t0.
func startTestNode(t *testing.T, store region.Store) *node {
	t.Helper()
	if store == nil {
		store = region.NewMemory(region.MemoryConfig{})
	}
	rs, err := rules.New([]rules.Rule{
		{Name: "fw", Limit: window.Limit{Limit: 2, Window: time.Minute, Algorithm: window.FixedWindow}},
		{Name: "sw", Limit: window.Limit{Limit: 2, Window: time.Minute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Store: store, Rules: rs, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{}
	n.URL = apitest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.hits.Add(1)
		h.ServeHTTP(w, r)
	})).URL
	return n
}

// countingClient counts the HTTP requests the client attempts.
type countingClient struct {
	n atomic.Int64
}

func (c *countingClient) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultClient.Do(r)
}

func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatalf("New(%q): %v", url, err)
	}
	return c
}

// protocols are the client's two protocols, by name, with the options
// that select each.
func protocols(t *testing.T) []struct {
	name string
	opts []client.Option
} {
	return []struct {
		name string
		opts []client.Option
	}{
		{"connect", nil},
		{"grpc", []client.Option{client.WithGRPC(), client.WithHTTPClient(apitest.H2CClient(t))}},
	}
}

func TestCheckAndPeek(t *testing.T) {
	n := startTestNode(t, nil)
	for _, proto := range protocols(t) {
		t.Run(proto.name, func(t *testing.T) {
			c := newClient(t, n.URL, proto.opts...)
			ctx := context.Background()
			key := "alice-" + proto.name
			p, err := c.Peek(ctx, key, client.Rule("fw"))
			if err != nil || !p.Allowed || p.Remaining != 1 {
				t.Fatalf("Peek = %+v, %v, want allowed with 1 remaining after it", p, err)
			}
			want := []client.Decision{
				{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 30 * time.Second},
				{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 30 * time.Second},
				{Allowed: false, Limit: 2, Remaining: 0, ResetAfter: 30 * time.Second, RetryAfter: 30 * time.Second},
			}
			for i, w := range want {
				got, err := c.Check(ctx, key, client.Rule("fw"))
				if err != nil {
					t.Fatalf("Check %d: %v", i+1, err)
				}
				// A fixed window counts the current bucket only.
				if got, want := got.Stats.Current, min(uint64(i+1), 2); got != want {
					t.Errorf("Check %d: Stats.Current = %d, want %d", i+1, got, want)
				}
				if rs := got.Stats.Regions; len(rs) != 1 || rs[0].Region != "local" || rs[0].Current != got.Stats.Current {
					t.Errorf("Check %d: Stats.Regions = %+v, want local's count alone", i+1, rs)
				}
				got.Stats = client.Stats{}
				if !reflect.DeepEqual(got, w) {
					t.Errorf("Check %d = %+v, want %+v", i+1, got, w)
				}
			}
			// An inline limit; CheckN spends several hits.
			got, err := c.CheckN(ctx, key, 3, client.Limit{Limit: 5, Window: time.Hour, Algorithm: client.FixedWindow})
			if err != nil || !got.Allowed || got.Remaining != 2 || got.Limit != 5 {
				t.Errorf("CheckN(3 of 5) = %+v, %v, want allowed with 2 remaining", got, err)
			}
		})
	}
}

// TestWithoutStats: a client made WithoutStats gets decisions without
// stats, counted as any other, over both protocols.
func TestWithoutStats(t *testing.T) {
	n := startTestNode(t, nil)
	for _, proto := range protocols(t) {
		t.Run(proto.name, func(t *testing.T) {
			ctx := context.Background()
			key := "brief-" + proto.name
			lim := client.Limit{Limit: 3, Window: time.Hour}
			full := newClient(t, n.URL, proto.opts...)
			brief := newClient(t, n.URL, append(proto.opts, client.WithoutStats())...)
			if d, err := full.Check(ctx, key, lim); err != nil || d.Stats.Current != 1 {
				t.Fatalf("Check = %+v, %v; want Stats.Current 1", d, err)
			}
			for i, want := range []uint64{1, 0} {
				d, err := brief.Check(ctx, key, lim)
				if err != nil || !d.Allowed || d.Remaining != want || !reflect.DeepEqual(d.Stats, client.Stats{}) {
					t.Errorf("brief Check %d = %+v, %v; want allowed, %d remaining, zero Stats", i+1, d, err, want)
				}
			}
			if d, err := brief.Peek(ctx, key, lim); err != nil || d.Allowed || !reflect.DeepEqual(d.Stats, client.Stats{}) {
				t.Errorf("brief Peek = %+v, %v; want denied, zero Stats", d, err)
			}
			if d, err := full.Peek(ctx, key, lim); err != nil || d.Stats.Current != 3 {
				t.Errorf("Peek = %+v, %v; want Stats.Current 3", d, err)
			}
		})
	}
}

func TestBadInputIsAnErrorEvenFailingOpen(t *testing.T) {
	n := startTestNode(t, nil)
	c := newClient(t, n.URL, client.WithFailureMode(client.FailOpen), client.WithRetries(3, time.Millisecond))
	for _, tt := range []struct {
		name string
		key  string
		p    client.Policy
		want string
	}{
		{"empty key", "", client.Rule("fw"), "key: must not be empty"},
		{"unknown rule", "k", client.Rule("nope"), `rule: unknown rule "nope"`},
		{"bad window", "k", client.Limit{Limit: 1, Window: time.Millisecond}, "limit.window"},
		{"nil policy", "k", nil, "nil Policy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := n.hits.Load()
			d, err := c.Check(context.Background(), tt.key, tt.p)
			if err == nil || !strings.Contains(err.Error(), tt.want) || d.Allowed {
				t.Fatalf("Check = %+v, %v, want an error containing %q", d, err, tt.want)
			}
			if tt.p != nil && connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("code %v, want invalid_argument", connect.CodeOf(err))
			}
			if got := n.hits.Load() - before; tt.p != nil && got != 1 {
				t.Errorf("%d requests, want 1 (bad input is not retried)", got)
			}
		})
	}
}

func TestFailureModesDeadNode(t *testing.T) {
	url := "http://" + porttest.ClosedAddr(t)
	for _, tt := range []struct {
		mode        client.FailureMode
		wantErr     bool
		wantAllowed bool
	}{
		{client.FailError, true, false},
		{client.FailOpen, false, true},
		{client.FailClosed, false, false},
	} {
		hc := &countingClient{}
		c := newClient(t, url, client.WithHTTPClient(hc), client.WithFailureMode(tt.mode), client.WithRetries(2, time.Millisecond))
		for _, call := range []struct {
			name string
			do   func() (client.Decision, error)
		}{
			{"Check", func() (client.Decision, error) { return c.Check(context.Background(), "k", client.Rule("fw")) }},
			{"Peek", func() (client.Decision, error) { return c.Peek(context.Background(), "k", client.Rule("fw")) }},
		} {
			hc.n.Store(0)
			d, err := call.do()
			if (err != nil) != tt.wantErr || d.Allowed != tt.wantAllowed {
				t.Errorf("mode %d %s = %+v, %v; want error %v, allowed %v", tt.mode, call.name, d, err, tt.wantErr, tt.wantAllowed)
			}
			if !tt.wantErr && (!d.Fallback || d.Err == nil) {
				t.Errorf("mode %d %s = %+v, want Fallback with its Err", tt.mode, call.name, d)
			}
			if tt.wantErr && connect.CodeOf(err) != connect.CodeUnavailable {
				t.Errorf("mode %d %s: code %v, want unavailable", tt.mode, call.name, connect.CodeOf(err))
			}
			// A refused connection surely did not reach the node, so even
			// Check is retried.
			if got := hc.n.Load(); got != 3 {
				t.Errorf("mode %d %s: %d attempts, want 1 + 2 retries", tt.mode, call.name, got)
			}
		}
	}
}

func TestUnavailableNodeRetriesOnlyPeek(t *testing.T) {
	n := startTestNode(t, storetest.Down{Err: errors.New("store down")})
	c := newClient(t, n.URL, client.WithRetries(2, time.Millisecond), client.WithFailureMode(client.FailClosed))

	before := n.hits.Load()
	d, err := c.Check(context.Background(), "k", client.Rule("fw"))
	if err != nil || d.Allowed || !d.Fallback || connect.CodeOf(d.Err) != connect.CodeUnavailable {
		t.Errorf("Check = %+v, %v, want a fail-closed fallback for unavailable", d, err)
	}
	if got := n.hits.Load() - before; got != 1 {
		t.Errorf("Check reached the node %d times, want 1: it consumes hits and the node may have counted it", got)
	}

	before = n.hits.Load()
	if _, err := c.Peek(context.Background(), "k", client.Rule("fw")); err != nil {
		t.Errorf("Peek: %v", err)
	}
	if got := n.hits.Load() - before; got != 3 {
		t.Errorf("Peek reached the node %d times, want 1 + 2 retries (it has no side effects)", got)
	}
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })

	c := newClient(t, hang.URL, client.WithTimeout(50*time.Millisecond), client.WithFailureMode(client.FailOpen))
	d, err := c.Check(context.Background(), "k", client.Rule("fw"))
	if err != nil || !d.Allowed || !d.Fallback {
		t.Errorf("Check past the timeout = %+v, %v, want a fail-open fallback", d, err)
	}

	// When the caller gives up, there is no fallback: its context says so.
	ctx, cancel := context.WithCancel(context.Background())
	c = newClient(t, hang.URL, client.WithTimeout(0), client.WithFailureMode(client.FailOpen))
	time.AfterFunc(20*time.Millisecond, cancel)
	d, err = c.Check(ctx, "k", client.Rule("fw"))
	if err == nil || d.Allowed || d.Fallback {
		t.Errorf("Check with the caller's context cancelled = %+v, %v, want an error", d, err)
	}
	if !errors.Is(err, context.Canceled) && connect.CodeOf(err) != connect.CodeCanceled {
		t.Errorf("err = %v, want it to show the cancellation", err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, tt := range []struct {
		url  string
		opts []client.Option
		want string
	}{
		{"127.0.0.1:8080", nil, "want http:// or https://"},
		{"ftp://x", nil, "want http:// or https://"},
		{"http://x", []client.Option{client.WithRetries(-1, time.Millisecond)}, "WithRetries: -1 retries"},
		{"http://x", []client.Option{client.WithRetries(1, 0)}, "WithRetries: backoff 0s"},
		{"http://x", []client.Option{client.WithFailureMode(7)}, "unknown mode 7"},
		{"http://x", []client.Option{client.WithHTTPClient(nil)}, "nil client"},
	} {
		if _, err := client.New(tt.url, tt.opts...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%q) = %v, want an error containing %q", tt.url, err, tt.want)
		}
	}
}

// TestMiddlewareMatchesCheckEndpoint drives the middleware and rlnode's
// /check endpoint (a plain HTTP client doing forward-auth) through the same
// steps against one node, and wants the same decisions and headers.
func TestMiddlewareMatchesCheckEndpoint(t *testing.T) {
	n := startTestNode(t, nil)
	c := newClient(t, n.URL)
	var appHits atomic.Int64
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		appHits.Add(1)
		io.WriteString(w, "hello")
	})
	// Key on the client address in /check's key format (so the two would
	// share a counter for one address); each side uses its own address so
	// that both see the same sequence.
	byAddr := func(r *http.Request) string { return "x-forwarded-for=" + r.Header.Get("X-Forwarded-For") }
	mw := httptest.NewServer(client.Middleware(c, byAddr, client.Rule("sw"), client.WithLegacyHeaders())(app))
	t.Cleanup(mw.Close)

	steps := []struct {
		status    int
		rl        string
		retry     string
		remaining string
		reset     string
	}{
		// Hits at one instant leave the trailing window together, 60 s
		// later.
		{200, `"sw";r=1;t=60`, "", "1", "60"},
		{200, `"sw";r=0;t=60`, "", "0", "60"},
		{429, `"sw";r=0;t=60`, "60", "0", "60"},
	}
	for i, st := range steps {
		mresp, mbody := apitest.Get(t, mw.URL, map[string]string{"X-Forwarded-For": "203.0.113.1"})
		cresp, cbody := apitest.Get(t, n.URL+"/check/sw", map[string]string{"X-Forwarded-For": "203.0.113.2"})
		for _, r := range []struct {
			who    string
			resp   *http.Response
			body   string
			policy string
			legacy bool
		}{
			{"middleware", mresp, mbody, `"sw";q=2`, true}, // the client does not know a rule's window
			{"/check", cresp, cbody, `"sw";q=2;w=60`, false},
		} {
			if r.resp.StatusCode != st.status {
				t.Errorf("step %d %s: status %d, want %d (%s)", i+1, r.who, r.resp.StatusCode, st.status, r.body)
			}
			h := r.resp.Header
			for k, want := range map[string]string{"RateLimit-Policy": r.policy, "RateLimit": st.rl, "Retry-After": st.retry} {
				if got := h.Get(k); got != want {
					t.Errorf("step %d %s: %s = %q, want %q", i+1, r.who, k, got, want)
				}
			}
			if r.legacy {
				for k, want := range map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": st.remaining, "X-RateLimit-Reset": st.reset} {
					if got := h.Get(k); got != want {
						t.Errorf("step %d %s: %s = %q, want %q", i+1, r.who, k, got, want)
					}
				}
			}
		}
	}
	if got := appHits.Load(); got != 2 {
		t.Errorf("the app served %d requests, want the 2 allowed", got)
	}

	// An empty key is exempt: the app answers, no hit is spent, no headers.
	exempt := httptest.NewServer(client.Middleware(c, func(*http.Request) string { return "" }, client.Rule("sw"))(app))
	t.Cleanup(exempt.Close)
	resp, _ := apitest.Get(t, exempt.URL, nil)
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
		t.Errorf("exempt request: %d RateLimit %q, want 200 and no headers", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
}

func TestMiddlewareDeniedHandlerAndInlineLimit(t *testing.T) {
	n := startTestNode(t, nil)
	c := newClient(t, n.URL)
	denied := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":"slow down"}`)
	})
	h := client.Middleware(c, func(*http.Request) string { return "one" }, client.Limit{Limit: 1, Window: time.Minute, Algorithm: client.FixedWindow},
		client.WithDeniedHandler(denied))(http.NotFoundHandler())
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	apitest.Get(t, srv.URL, nil)
	resp, body := apitest.Get(t, srv.URL, nil)
	if resp.StatusCode != 429 || body != `{"error":"slow down"}` {
		t.Errorf("denied: %d %q, want the custom 429", resp.StatusCode, body)
	}
	for k, want := range map[string]string{"RateLimit-Policy": `"default";q=1;w=60`, "RateLimit": `"default";r=0;t=30`, "Retry-After": "30"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func TestMiddlewareFailureModes(t *testing.T) {
	url := "http://" + porttest.ClosedAddr(t)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })
	for _, tt := range []struct {
		mode   client.FailureMode
		status int
		body   string
	}{
		{client.FailOpen, 200, "app"},
		{client.FailClosed, 503, "rate limiter unavailable\n"},
		{client.FailError, 503, "rate limiter unavailable\n"},
	} {
		c := newClient(t, url, client.WithFailureMode(tt.mode))
		srv := httptest.NewServer(client.Middleware(c, func(*http.Request) string { return "k" }, client.Rule("fw"))(app))
		resp, body := apitest.Get(t, srv.URL, nil)
		srv.Close()
		if resp.StatusCode != tt.status || body != tt.body {
			t.Errorf("mode %d: %d %q, want %d %q", tt.mode, resp.StatusCode, body, tt.status, tt.body)
		}
		if got := resp.Header.Get("RateLimit"); got != "" {
			t.Errorf("mode %d: RateLimit = %q without a decision, want none", tt.mode, got)
		}
	}
}

// TestDependencies keeps the public client light: it may import the
// generated API, the header package and the state machine of quota
// leases (rlqsfilter, which brings go-control-plane's rate limit quota
// messages), nothing of the server.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := map[string]bool{
		"github.com/rlcluster/rlcluster/client":                              true,
		"github.com/rlcluster/rlcluster/gen/ratelimit/v1":                    true,
		"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect": true,
		"github.com/rlcluster/rlcluster/internal/ratelimitheader":            true,
		"github.com/rlcluster/rlcluster/internal/api/rlqs/rlqsfilter":        true,
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/rlcluster/") && !allowed[p] {
			t.Errorf("client imports %s", p)
		}
		for _, bad := range []string{"github.com/redis/", "github.com/hashicorp/memberlist", "github.com/prometheus/"} {
			if strings.HasPrefix(p, bad) {
				t.Errorf("client imports %s", p)
			}
		}
	}
}

// TestScope: in a cluster of three regions a global token bucket is an
// error naming limit.scope, even failing open; a region-scoped one is
// decided and the Decision says which scope applied.
func TestScope(t *testing.T) {
	threeRegions := &apitest.Pool{}
	threeRegions.N.Store(3)
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Now: func() time.Time { return t0 }, Pool: threeRegions})
	if err != nil {
		t.Fatal(err)
	}
	url := apitest.Serve(t, h).URL
	c := newClient(t, url, client.WithFailureMode(client.FailOpen))
	ctx := context.Background()
	d, err := c.Check(ctx, "alice", client.Limit{Limit: 5, Window: time.Minute, Algorithm: client.TokenBucket})
	if err == nil || connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "limit.scope") || d.Allowed {
		t.Errorf("Check(global token bucket) = %+v, %v; want an invalid_argument error naming limit.scope", d, err)
	}
	for _, tc := range []struct {
		limit client.Limit
		want  client.Scope
	}{
		{client.Limit{Limit: 5, Window: time.Minute, Algorithm: client.TokenBucket, Scope: client.ScopeRegion}, client.ScopeRegion},
		{client.Limit{Limit: 5, Window: time.Minute, Scope: client.ScopeRegion}, client.ScopeRegion},
		{client.Limit{Limit: 5, Window: time.Minute}, client.ScopeGlobal},
	} {
		d, err := c.Check(ctx, "alice", tc.limit)
		if err != nil || !d.Allowed || d.Scope != tc.want {
			t.Errorf("Check(%+v) = %+v, %v; want allowed with scope %v", tc.limit, d, err, tc.want)
		}
	}
}

// statsAsked records whether each Check it sends asks for stats (the
// Connect protocol's protobuf body) and forwards it.
type statsAsked struct {
	omitted []bool
}

func (s *statsAsked) Do(r *http.Request) (*http.Response, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var m ratelimitv1.CheckRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	s.omitted = append(s.omitted, m.GetOmitStats())
	r.Body = io.NopCloser(bytes.NewReader(b))
	return http.DefaultClient.Do(r)
}

// TestMiddlewareAsksNoStats: the middleware reads only the decision, so
// its checks ask the node to leave the stats out; the client's own
// Check still asks for them.
func TestMiddlewareAsksNoStats(t *testing.T) {
	n := startTestNode(t, nil)
	rec := &statsAsked{}
	c := newClient(t, n.URL, client.WithHTTPClient(rec))
	h := client.Middleware(c, func(*http.Request) string { return "mw" }, client.Rule("fw"))(http.NotFoundHandler())
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, _ := apitest.Get(t, srv.URL, nil)
	if got := resp.Header.Get("RateLimit"); got != `"fw";r=1;t=30` {
		t.Errorf("RateLimit = %q, want the decision's", got)
	}
	if _, err := c.Check(context.Background(), "mw", client.Rule("fw")); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.omitted, []bool{true, false}) {
		t.Errorf("omit_stats sent %v, want [true false]: the middleware's check without stats, Check's with", rec.omitted)
	}
}
