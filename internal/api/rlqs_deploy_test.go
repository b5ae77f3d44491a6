package api_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
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
