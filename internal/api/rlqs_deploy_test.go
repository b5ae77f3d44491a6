package api_test

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/rlqs/rlqsfilter"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
)

// rlqsExample reads deploy/envoy/envoy-rlqs.yaml, the Envoy
// configuration for the rate limit quota filter that the README shows,
// checks it against Envoy's v3 API as TestEnvoyConfigExample does, and
// returns its filter's configuration and the bucket settings of its
// catch-all matcher.
func rlqsExample(t *testing.T) (*rlqsfilterv3.RateLimitQuotaFilterConfig, *rlqsfilterv3.RateLimitQuotaBucketSettings) {
	t.Helper()
	bs := envoyExample(t, "../../deploy/envoy/envoy-rlqs.yaml")
	clusters := map[string]bool{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = true
	}
	var hcm hcmv3.HttpConnectionManager
	if err := bs.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var cfg rlqsfilterv3.RateLimitQuotaFilterConfig
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&cfg); err != nil {
		t.Fatalf("the first HTTP filter is not rate_limit_quota: %v", err)
	}
	if c := cfg.GetRlqsServer().GetEnvoyGrpc().GetClusterName(); !clusters[c] || c != "rlcluster" {
		t.Errorf("rlqs_server names cluster %q, want the defined rlcluster", c)
	}
	var bucket rlqsfilterv3.RateLimitQuotaBucketSettings
	if err := cfg.GetBucketMatchers().GetOnNoMatch().GetAction().GetTypedConfig().UnmarshalTo(&bucket); err != nil {
		t.Fatalf("the catch-all matcher's action is not bucket settings: %v", err)
	}
	return &cfg, &bucket
}

// TestEnvoyRLQSConfigExample: the example is a valid Envoy configuration
// whose filter reports to rlnode every second on domain quota, one bucket
// per x-tenant header, allowing all until the first assignment and
// denying all on an expired one.
func TestEnvoyRLQSConfigExample(t *testing.T) {
	cfg, bucket := rlqsExample(t)
	if cfg.GetDomain() != "quota" {
		t.Errorf("domain %q, want quota", cfg.GetDomain())
	}
	if got := bucket.GetReportingInterval().AsDuration().String(); got != "1s" {
		t.Errorf("reporting_interval %s, want 1s", got)
	}
	if _, ok := bucket.GetBucketIdBuilder().GetBucketIdBuilder()["tenant"]; !ok {
		t.Error("the bucket id has no tenant entry")
	}
	if got := bucket.GetExpiredAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule().String(); got != "DENY_ALL" {
		t.Errorf("expired assignment behavior %s, want DENY_ALL", got)
	}
}

// TestEnvoyRLQSExampleRoundTrip runs the example's filter settings
// (domain, reporting interval, no-assignment and expired behaviours) in
// the test client of Envoy's filter against a node with the README's
// rules for the domain, over gRPC on the node's main port: a bucket of
// the example's tenant entry gets a token bucket at the limit's rate.
func TestEnvoyRLQSExampleRoundTrip(t *testing.T) {
	cfg, bucket := rlqsExample(t)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rulesYAML string
	for _, b := range regexp.MustCompile("(?s)```yaml\n(domain: quota\n.*?)```").FindAllStringSubmatch(string(readme), -1) {
		rulesYAML = b[1]
	}
	if rulesYAML == "" {
		t.Fatal("README shows no rules for domain quota")
	}
	rs, err := rules.Parse([]byte(rulesYAML))
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, api.Config{Rules: rs, Now: time.Now})

	noAssign, err := rlqsfilter.StrategyFromProto(bucket.GetNoAssignmentBehavior().GetFallbackRateLimit())
	if err != nil {
		t.Fatal(err)
	}
	fallback, err := rlqsfilter.StrategyFromProto(bucket.GetExpiredAssignmentBehavior().GetFallbackRateLimit())
	if err != nil {
		t.Fatal(err)
	}
	f, err := rlqsfilter.New(rlqsfilter.Config{
		Domain:            cfg.GetDomain(),
		ReportingInterval: bucket.GetReportingInterval().AsDuration(),
		NoAssignment:      noAssign,
		Expired:           &rlqsfilter.Expired{Fallback: fallback, Timeout: bucket.GetExpiredAssignmentBehavior().GetExpiredAssignmentBehaviorTimeout().AsDuration()},
	})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(s.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, rlqsv3.NewRateLimitQuotaServiceClient(conn)) }()
	defer func() { cancel(); <-done }()

	id := map[string]string{}
	for k := range bucket.GetBucketIdBuilder().GetBucketIdBuilder() {
		id[k] = "acme" // the x-tenant header's value
	}
	if !f.Allow(id) {
		t.Error("the first request was denied under no_assignment_behavior ALLOW_ALL")
	}
	for {
		st, _ := f.State(id)
		if st.Phase == rlqsfilter.PhaseActive {
			tb := st.Strategy.TokenBucket
			if st.Strategy.Kind != rlqsfilter.KindTokenBucket || tb.TokensPerFill == 0 {
				t.Fatalf("assignment %v, want a token bucket", st.Strategy)
			}
			if r := float64(tb.TokensPerFill) / tb.FillInterval.Seconds(); r > 600.0/60*1.001 {
				t.Errorf("assignment %v: %.2f a second, past the limit's 10", st.Strategy, r)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatal("no assignment within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestQuotaNodeRestart: the node a filter leases from goes away and comes
// back on the same address with the same store (a node restarted in
// front of its Redis). The filter keeps its last assignment until its
// time to live, then applies the expired behaviour (deny all), opens a
// new stream when the node is back and gets a lease again; and what it
// admits in the whole run, within one window, stays within the limit.
func TestQuotaNodeRestart(t *testing.T) {
	rs, err := rules.Parse([]byte("rules:\n  - name: api\n    limit: 40\n    window: 1m\n    leasable: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := storetest.Open(t, region.Config{})
	start := func(addr string) *httptest.Server {
		t.Helper()
		h, err := api.NewHandler(api.Config{Store: store, Rules: rs, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := apitest.NewUnstarted(h)
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return srv
	}
	srv := start("127.0.0.1:0")
	addr := srv.Listener.Addr().String()

	const interval = 200 * time.Millisecond
	f, err := rlqsfilter.New(rlqsfilter.Config{
		Domain: "app", ReportingInterval: interval, NoAssignment: rlqsfilter.DenyAll(),
		Expired:          &rlqsfilter.Expired{Fallback: rlqsfilter.DenyAll(), Timeout: time.Minute},
		ReconnectBackoff: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, rlqsv3.NewRateLimitQuotaServiceClient(conn)) }()
	defer func() { cancel(); <-done }()

	id := map[string]string{"rule": "api", "key": "k"}
	admitted := 0
	// spend asks for 20 requests a second until cond holds, and returns
	// when.
	spend := func(what string, cond func(rlqsfilter.BucketState) bool) time.Time {
		t.Helper()
		for {
			if f.Allow(id) {
				admitted++
			}
			if st, _ := f.State(id); cond(st) {
				return time.Now()
			}
			if ctx.Err() != nil {
				t.Fatalf("no %s within 20 s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	active := func(st rlqsfilter.BucketState) bool { return st.Phase == rlqsfilter.PhaseActive }
	t0 := time.Now()
	spend("first lease", active)
	t.Logf("first lease after %v", time.Since(t0))
	spend("five admitted", func(rlqsfilter.BucketState) bool { return admitted >= 5 })

	st, _ := f.State(id)
	srv.CloseClientConnections()
	srv.Close()
	killed := time.Now()
	t.Logf("killed with %v of the assignment left", st.ExpiresAt.Sub(killed))
	expired := spend("expiry", func(st rlqsfilter.BucketState) bool { return st.Phase == rlqsfilter.PhaseExpired })
	// It expired at its time to live (the test polls every 50 ms).
	if late := expired.Sub(st.ExpiresAt); late > 200*time.Millisecond || expired.Before(st.ExpiresAt) {
		t.Errorf("the assignment expired %v after its time to live (the node went %v before it)", late, st.ExpiresAt.Sub(killed))
	}
	before := admitted
	for range 5 {
		if f.Allow(id) {
			admitted++
		}
	}
	if admitted != before {
		t.Errorf("the expired assignment's fallback (deny all) admitted %d", admitted-before)
	}

	start(addr)
	back := time.Now()
	spend("lease after the restart", active)
	t.Logf("leased again %v after the node came back", time.Since(back))
	before = admitted
	spend("an admission after the restart", func(rlqsfilter.BucketState) bool { return admitted > before })
	if got := f.Stats().Streams; got < 2 {
		t.Errorf("%d streams, want a new one after the restart", got)
	}
	if admitted > 40 {
		t.Errorf("admitted %d within a minute of a limit of 40 a minute", admitted)
	}
}
