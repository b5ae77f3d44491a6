package api_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/rlqs/rlqsfilter"
	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// rlqsExample reads deploy/envoy/envoy-rlqs.yaml, the Envoy
// configuration for the rate limit quota filter that the README shows,
// checks it against Envoy's v3 API as TestEnvoyConfigExample does, and
// returns its filter's configuration and the bucket settings of its
// catch-all matcher.
func rlqsExample(t *testing.T) (*rlqsfilterv3.RateLimitQuotaFilterConfig, *rlqsfilterv3.RateLimitQuotaBucketSettings) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/envoy/envoy-rlqs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+string(b)+"```") {
		t.Error("README.md does not show deploy/envoy/envoy-rlqs.yaml verbatim")
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("not a valid Envoy v3 bootstrap: %v", err)
	}
	validateDeep(t, "bootstrap", bs.ProtoReflect())
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
