package api_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/envoyrls"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
)

// rlsClient is go-control-plane's generated gRPC client for Envoy's
// rate-limit service, over h2c to s, as Envoy itself calls it.
func (s *testServer) rlsClient(t *testing.T) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(s.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// desc builds a request descriptor from key, value pairs.
func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func rlsReq(domain string, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// st is an expected descriptor status; perUnit 0 with unit UNKNOWN means
// no current_limit.
type st struct {
	code      rlsv3.RateLimitResponse_Code
	perUnit   uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
	sec  = rlsv3.RateLimitResponse_RateLimit_SECOND
	mnt  = rlsv3.RateLimitResponse_RateLimit_MINUTE
	day  = rlsv3.RateLimitResponse_RateLimit_DAY
)

var noLimit = st{code: ok}

func gotStatus(s *rlsv3.RateLimitResponse_DescriptorStatus) st {
	return st{code: s.GetCode(), perUnit: s.GetCurrentLimit().GetRequestsPerUnit(), unit: s.GetCurrentLimit().GetUnit(), remaining: s.GetLimitRemaining()}
}

// call sends req and checks the overall code and statuses.
func call(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, overall rlsv3.RateLimitResponse_Code, want ...st) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	if got := resp.GetOverallCode(); got != overall {
		t.Errorf("ShouldRateLimit(%v): overall_code = %v, want %v", req, got, overall)
	}
	if len(resp.GetStatuses()) != len(want) {
		t.Fatalf("ShouldRateLimit(%v): %d statuses, want %d", req, len(resp.GetStatuses()), len(want))
	}
	for i, w := range want {
		if got := gotStatus(resp.GetStatuses()[i]); got != w {
			t.Errorf("ShouldRateLimit(%v): statuses[%d] = %+v, want %+v", req, i, got, w)
		}
	}
	return resp
}

// spend sends req n times, each answered OK with the remaining count going
// down from start, for a single-descriptor request.
func spend(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, n int, perUnit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, start uint32) {
	t.Helper()
	for i := 0; i < n; i++ {
		call(t, c, req, ok, st{ok, perUnit, unit, start - uint32(i) - 1})
	}
}

func loadExamples(t *testing.T) *rules.Set {
	t.Helper()
	rs, err := rules.Load("testdata/envoyproxy")
	if err != nil {
		t.Fatalf("LoadRules(testdata/envoyproxy): %v", err)
	}
	if got, want := rs.Summary(), "0 rules, 10 domains (edge_proxy_per_ip: 2 limits; example4: 1 limit; example6: 2 limits; example7: 2 limits; example8: 2 limits; example9: 1 limit; internal: 2 limits; messaging: 2 limits; mongo_cps: 2 limits; rl: 8 limits)"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
	return rs
}

// TestEnvoyExamples enforces envoyproxy/ratelimit's documented example
// configurations, loaded unchanged, through go-control-plane's gRPC client,
// on both stores.
func TestEnvoyExamples(t *testing.T) {
	examples := loadExamples(t)
	for _, sf := range stores {
		t.Run(sf.name, func(t *testing.T) {
			s := newServer(t, api.Config{Store: sf.new(t), Rules: examples})
			c := s.rlsClient(t)

			t.Run("example1 mongo_cps", func(t *testing.T) {
				spend(t, c, rlsReq("mongo_cps", desc("database", "users")), 3, 500, sec, 500)
				call(t, c, rlsReq("mongo_cps", desc("database", "default")), ok, st{ok, 500, sec, 499})
				call(t, c, rlsReq("mongo_cps", desc("database", "other")), ok, noLimit)
			})

			t.Run("example2 nested and value-less keys, one descriptor over limit", func(t *testing.T) {
				marketing := desc("message_type", "marketing", "to_number", "2061111111")
				number := desc("to_number", "2061111111")
				for i := uint32(1); i <= 5; i++ {
					call(t, c, rlsReq("messaging", marketing, number), ok, st{ok, 5, day, 5 - i}, st{ok, 100, day, 100 - i})
				}
				// The marketing limit is spent; the per-number limit is not,
				// and still counts this request.
				call(t, c, rlsReq("messaging", marketing, number), over, st{over, 5, day, 0}, st{ok, 100, day, 94})
				// Another number has its own counters.
				call(t, c, rlsReq("messaging", desc("message_type", "marketing", "to_number", "2062222222")), ok, st{ok, 5, day, 4})
				// A marketing descriptor one level deep is only a
				// placeholder: no limit.
				call(t, c, rlsReq("messaging", desc("message_type", "marketing")), ok, noLimit)
			})

			t.Run("example3 most specific match, requests_per_unit 0", func(t *testing.T) {
				spend(t, c, rlsReq("edge_proxy_per_ip", desc("remote_address", "50.0.0.1")), 10, 10, sec, 10)
				call(t, c, rlsReq("edge_proxy_per_ip", desc("remote_address", "50.0.0.1")), over, st{over, 10, sec, 0})
				call(t, c, rlsReq("edge_proxy_per_ip", desc("remote_address", "50.0.0.5")), over, st{over, 0, sec, 0})
			})

			t.Run("example4 depth must match", func(t *testing.T) {
				call(t, c, rlsReq("example4", desc("key", "value", "subkey", "subvalue")), ok, st{ok, 300, sec, 299})
				call(t, c, rlsReq("example4", desc("key", "value")), ok, noLimit)
				call(t, c, rlsReq("example4", desc("key", "value", "subkey", "subvalue", "extra", "x")), ok, noLimit)
			})

			t.Run("example5 unlimited", func(t *testing.T) {
				call(t, c, rlsReq("internal", desc("ldap", "x"), desc("azure", "y")), ok, st{ok, 0, 0, math.MaxUint32}, st{ok, 100, mnt, 99})
			})

			t.Run("example6 shadow_mode", func(t *testing.T) {
				userA := rlsReq("example6", desc("service", "auth-service", "user", "user-a"))
				spend(t, c, userA, 10, 10, sec, 10)
				// Over the limit, but in shadow mode: OK, nothing left.
				call(t, c, userA, ok, st{ok, 10, sec, 0})
				userB := rlsReq("example6", desc("service", "auth-service", "user", "user-b"))
				spend(t, c, userB, 20, 20, sec, 20)
				call(t, c, userB, over, st{over, 20, sec, 0})
			})

			t.Run("example7 replaces", func(t *testing.T) {
				one := desc("key_1", "value_1", "user", "bkthomps")
				two := desc("key_2", "value_2", "user", "bkthomps")
				// Both match: the 5/s limit is replaced and not counted.
				for i := uint32(1); i <= 6; i++ {
					call(t, c, rlsReq("example7", one, two), ok, noLimit, st{ok, 10, sec, 10 - i})
				}
				// Alone, the 5/s limit is untouched by the requests above.
				call(t, c, rlsReq("example7", one), ok, st{ok, 5, sec, 4})
			})

			t.Run("example8 detailed_metric", func(t *testing.T) {
				call(t, c, rlsReq("example8", desc("key1", "other")), ok, st{ok, 10, mnt, 9})
				call(t, c, rlsReq("example8", desc("key1", "value1")), ok, st{ok, 20, mnt, 19})
			})

			t.Run("example9 wildcard", func(t *testing.T) {
				call(t, c, rlsReq("example9", desc("key1", "value_1")), ok, st{ok, 20, mnt, 19})
				call(t, c, rlsReq("example9", desc("key1", "value_2")), ok, st{ok, 20, mnt, 19})
				call(t, c, rlsReq("example9", desc("key1", "other")), ok, noLimit)
				// Counters are per domain: example8's key1=value1 above
				// does not count here.
				call(t, c, rlsReq("example9", desc("key1", "value1")), ok, st{ok, 20, mnt, 19})
			})

			t.Run("example.yaml", func(t *testing.T) {
				call(t, c, rlsReq("rl", desc("source_cluster", "proxy", "destination_cluster", "mock")), ok, st{ok, 1, mnt, 0})
				call(t, c, rlsReq("rl", desc("source_cluster", "proxy", "destination_cluster", "mock")), over, st{over, 1, mnt, 0})
				call(t, c, rlsReq("rl", desc("foo", "foo", "bar", "banned")), over, st{over, 0, mnt, 0})
				call(t, c, rlsReq("rl", desc("foo", "foo", "bay", "x")), ok, st{ok, 0, 0, math.MaxUint32})
				call(t, c, rlsReq("rl", desc("qux", "x")), ok, st{ok, 0, 0, math.MaxUint32})
				shady := rlsReq("rl", desc("foo", "foo", "baz", "shady"))
				call(t, c, shady, ok, st{ok, 1, mnt, 0})
				call(t, c, shady, ok, st{ok, 1, mnt, 0})
				notShady := rlsReq("rl", desc("foo", "foo", "baz", "not-so-shady"))
				call(t, c, notShady, ok, st{ok, 1, sec, 0})
				call(t, c, notShady, over, st{over, 1, sec, 0})
			})

			t.Run("unknown domain and descriptor", func(t *testing.T) {
				call(t, c, rlsReq("nope", desc("a", "b")), ok, noLimit)
				call(t, c, rlsReq("mongo_cps", desc("table", "users"), desc("database", "users")), ok, noLimit, st{ok, 500, sec, 496})
			})

			wantMetrics(t, s,
				`rlcluster_decisions_total{outcome="shadow_denied",rule="example6.service.user_user-a"} 1`,
				`rlcluster_decisions_total{outcome="denied",rule="example6.service.user_user-b"} 1`,
				`rlcluster_decisions_total{outcome="allowed",rule="messaging.to_number"} 6`,
				`rlcluster_decisions_total{outcome="denied",rule="rl.foo.bar_banned"} 1`,
				`rlcluster_decisions_total{outcome="shadow_denied",rule="rl.foo.baz_shady"} 1`,
				`rlcluster_decision_duration_seconds_count{method="ShouldRateLimit"}`,
			)
		})
	}
}

// TestEnvoyOneStoreCall checks that all of a request's descriptors are
// decided in one store call, and that the replaced limit's name shows.
func TestEnvoyOneStoreCall(t *testing.T) {
	cs := &countingStore{Store: region.NewMemory(region.MemoryConfig{})}
	s := newServer(t, api.Config{Store: cs, Rules: loadExamples(t)})
	c := s.rlsClient(t)
	resp := call(t, c, rlsReq("messaging",
		desc("message_type", "marketing", "to_number", "1"),
		desc("to_number", "1"),
		desc("nothing", "here"),
	), ok, st{ok, 5, day, 4}, st{ok, 100, day, 99}, noLimit)
	if got, want := cs.calls.Load(), int64(1); got != want {
		t.Errorf("store Check calls = %d, want %d", got, want)
	}
	// Unknown and unlimited descriptors never reach the store.
	call(t, c, rlsReq("internal", desc("ldap", "x")), ok, st{ok, 0, 0, math.MaxUint32})
	call(t, c, rlsReq("nope", desc("a", "b")), ok, noLimit)
	if got, want := cs.calls.Load(), int64(1); got != want {
		t.Errorf("store Check calls = %d, want %d", got, want)
	}
	if d := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration(); d <= 0 || d > 24*time.Hour {
		t.Errorf("duration_until_reset = %v, want in (0, 24h]", d)
	}
	call(t, c, rlsReq("example7", desc("key_1", "value_1", "user", "u")), ok, noLimit)
	resp = call(t, c, rlsReq("example7", desc("key_1", "value_1", "user", "bkthomps")), ok, st{ok, 5, sec, 4})
	if got, want := resp.GetStatuses()[0].GetCurrentLimit().GetName(), "specific_limit"; got != want {
		t.Errorf("current_limit.name = %q, want %q", got, want)
	}
}

// TestEnvoyHitsAddend spends hits_addend from the request and from a
// descriptor, which overrides it; a descriptor's explicit 0 only looks.
func TestEnvoyHitsAddend(t *testing.T) {
	s := newServer(t, api.Config{Rules: loadExamples(t)})
	c := s.rlsClient(t)
	req := rlsReq("internal", desc("azure", "a"))
	req.HitsAddend = 30
	call(t, c, req, ok, st{ok, 100, mnt, 70})
	call(t, c, req, ok, st{ok, 100, mnt, 40})
	d := desc("azure", "a")
	d.HitsAddend = wrapperspb.UInt64(40)
	req2 := rlsReq("internal", d)
	req2.HitsAddend = 99 // the descriptor's own wins
	call(t, c, req2, ok, st{ok, 100, mnt, 0})
	call(t, c, req, over, st{over, 100, mnt, 0})
	peek := desc("azure", "a")
	peek.HitsAddend = wrapperspb.UInt64(0)
	call(t, c, rlsReq("internal", peek), ok, st{ok, 100, mnt, 0})
	look := desc("azure", "c")
	look.HitsAddend = wrapperspb.UInt64(0)
	call(t, c, rlsReq("internal", look), ok, st{ok, 100, mnt, 100})
	call(t, c, rlsReq("internal", look), ok, st{ok, 100, mnt, 100})
	// More hits than the limit can ever hold: over, nothing counted.
	fresh := rlsReq("internal", desc("azure", "b"))
	fresh.HitsAddend = 101
	call(t, c, fresh, over, st{over, 100, mnt, 0})
	fresh.HitsAddend = 1
	call(t, c, fresh, ok, st{ok, 100, mnt, 99})
}

// TestEnvoyGlobalShadowMode: statuses say what was decided; overall_code
// is OK, and the metrics count what would have been denied.
func TestEnvoyGlobalShadowMode(t *testing.T) {
	s := newServer(t, api.Config{Rules: loadExamples(t), ShadowMode: true})
	c := s.rlsClient(t)
	req := rlsReq("rl", desc("source_cluster", "proxy", "destination_cluster", "mock"))
	call(t, c, req, ok, st{ok, 1, mnt, 0})
	call(t, c, req, ok, st{over, 1, mnt, 0})
	call(t, c, rlsReq("rl", desc("foo", "foo", "bar", "banned")), ok, st{over, 0, mnt, 0})
	body := wantMetrics(t, s,
		`rlcluster_decisions_total{outcome="shadow_denied",rule="rl.source_cluster_proxy.destination_cluster_mock"} 1`,
		`rlcluster_decisions_total{outcome="shadow_denied",rule="rl.foo.bar_banned"} 1`,
	)
	if strings.Contains(body, `outcome="denied"`) {
		t.Errorf("/metrics counts a denial in shadow mode:\n%s", logtest.Lines(body, "rlcluster_decisions_total"))
	}
}

// TestShadowModeConnect: a native rule in shadow mode, and global shadow
// mode, answer allowed with retry_after above zero where they would deny.
func TestShadowModeConnect(t *testing.T) {
	rs, err := rules.Parse([]byte("rules:\n  - name: soft\n    limit: 1\n    window: 1m\n    shadow_mode: true\n  - name: hard\n    limit: 1\n    window: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		global     bool
		rule       string
		wantSecond bool
		outcome    string
	}{
		{"rule shadow", false, "soft", true, "shadow_denied"},
		{"no shadow", false, "hard", false, "denied"},
		{"global shadow", true, "hard", true, "shadow_denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, api.Config{Rules: rs, ShadowMode: tc.global})
			c := s.client(t, false)
			req := &ratelimitv1.CheckRequest{Key: "k", Rule: tc.rule}
			first, err := c.Check(context.Background(), connect.NewRequest(req))
			if err != nil || !first.Msg.Allowed || first.Msg.RetryAfter.AsDuration() != 0 {
				t.Fatalf("first Check = %v, %v; want allowed with retry_after 0", first, err)
			}
			second, err := c.Check(context.Background(), connect.NewRequest(req))
			if err != nil {
				t.Fatal(err)
			}
			if got := second.Msg.Allowed; got != tc.wantSecond {
				t.Errorf("second Check allowed = %v, want %v", got, tc.wantSecond)
			}
			if got := second.Msg.RetryAfter.AsDuration(); got <= 0 {
				t.Errorf("second Check retry_after = %v, want > 0", got)
			}
			if got, want := second.Msg.Shadow, tc.wantSecond; got != want {
				t.Errorf("second Check shadow = %v, want %v", got, want)
			}
			if first.Msg.Shadow {
				t.Error("first Check shadow = true, want false")
			}
			// The forward-auth endpoint decides through the same path.
			wantStatus := http.StatusTooManyRequests
			if tc.wantSecond {
				wantStatus = http.StatusOK
			}
			for i, want := range []int{http.StatusOK, wantStatus} {
				req, _ := http.NewRequest(http.MethodGet, s.URL+"/check/"+tc.rule, nil)
				req.Header.Set("X-Forwarded-For", "203.0.113.7")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("/check/%s %d: status %d, want %d", tc.rule, i+1, resp.StatusCode, want)
				}
			}
			want := fmt.Sprintf(`rlcluster_decisions_total{outcome=%q,rule=%q} 2`, tc.outcome, tc.rule)
			wantMetrics(t, s, want)
		})
	}
}

// TestEnvoyResponseHeaders: the most limiting descriptor's numbers.
func TestEnvoyResponseHeaders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers envoyrls.Headers
		prefix  string
	}{
		{"draft", envoyrls.HeadersDraft, "RateLimit-"},
		{"x", envoyrls.HeadersX, "X-RateLimit-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, api.Config{Rules: loadExamples(t), RLSHeaders: tc.headers})
			c := s.rlsClient(t)
			// t0 is 30 s into a minute: azure's minute resets in 30 s.
			resp := call(t, c, rlsReq("internal", desc("azure", "a"), desc("ldap", "x"), desc("nope", "y")), ok, st{ok, 100, mnt, 99}, st{ok, 0, 0, math.MaxUint32}, noLimit)
			got := map[string]string{}
			for _, h := range resp.GetResponseHeadersToAdd() {
				got[h.GetKey()] = h.GetValue()
			}
			want := map[string]string{tc.prefix + "Limit": "100", tc.prefix + "Remaining": "99"}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("header %s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			if r := got[tc.prefix+"Reset"]; r == "" || r == "0" {
				t.Errorf("header %sReset = %q, want seconds > 0", tc.prefix, r)
			}
			// Over the limit: that descriptor's numbers.
			resp = call(t, c, rlsReq("edge_proxy_per_ip", desc("remote_address", "50.0.0.1"), desc("remote_address", "50.0.0.5")), over, st{ok, 10, sec, 9}, st{over, 0, sec, 0})
			got = map[string]string{}
			for _, h := range resp.GetResponseHeadersToAdd() {
				got[h.GetKey()] = h.GetValue()
			}
			if got[tc.prefix+"Limit"] != "0" || got[tc.prefix+"Remaining"] != "0" || got[tc.prefix+"Reset"] != "1" {
				t.Errorf("headers = %v, want limit 0, remaining 0, reset 1", got)
			}
		})
	}
	s := newServer(t, api.Config{Rules: loadExamples(t)})
	resp := call(t, s.rlsClient(t), rlsReq("internal", desc("azure", "a")), ok, st{ok, 100, mnt, 99})
	if h := resp.GetResponseHeadersToAdd(); len(h) != 0 {
		t.Errorf("headers without RLSHeaders = %v, want none", h)
	}
}

// TestEnvoyOverrideLabels: overrides carry caller-chosen entries, which
// never become metric labels: every override of a domain counts under
// "<domain>.override", so 200 requests with fresh entry keys add no series.
func TestEnvoyOverrideLabels(t *testing.T) {
	s := newServer(t, api.Config{Rules: loadExamples(t)})
	c := s.rlsClient(t)
	override := func(i int) *rlsv3.RateLimitRequest {
		d := desc(fmt.Sprintf("k%d", i), "v")
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
		return rlsReq("internal", d)
	}
	call(t, c, override(0), ok, st{ok, 5, mnt, 4})
	before, err := testutil.GatherAndCount(s.Reg, "rlcluster_decisions_total")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 200; i++ {
		call(t, c, override(i), ok, st{ok, 5, mnt, 4})
	}
	after, err := testutil.GatherAndCount(s.Reg, "rlcluster_decisions_total")
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("rlcluster_decisions_total series: %d before 200 fresh overrides, %d after; want no new series", before, after)
	}
	wantMetrics(t, s, `rlcluster_decisions_total{outcome="allowed",rule="internal.override"} 201`)
}

// TestEnvoyLimitOverride: a descriptor's own limit replaces the
// configured one, as Envoy's dynamic metadata overrides do.
func TestEnvoyLimitOverride(t *testing.T) {
	s := newServer(t, api.Config{Rules: loadExamples(t)})
	c := s.rlsClient(t)
	d := desc("azure", "z")
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_SECOND}
	call(t, c, rlsReq("internal", d), ok, st{ok, 2, sec, 1})
	call(t, c, rlsReq("internal", d), ok, st{ok, 2, sec, 0})
	call(t, c, rlsReq("internal", d), over, st{over, 2, sec, 0})
	// The configured limit counts apart.
	call(t, c, rlsReq("internal", desc("azure", "z")), ok, st{ok, 100, mnt, 99})
	// As in envoyproxy/ratelimit, an unknown domain applies no override.
	call(t, c, rlsReq("nope", d), ok, noLimit)
}

func TestEnvoyInvalidArgument(t *testing.T) {
	s := newServer(t, api.Config{Rules: loadExamples(t), MaxKeyBytes: 64, MaxHits: 100})
	c := s.rlsClient(t)
	neg := desc("a", "b")
	neg.IsNegativeHits = true
	month := desc("a", "b")
	month.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MONTH, UnitMultiplier: wrapperspb.UInt32(2)}
	unknown := desc("a", "b")
	unknown.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_UNKNOWN}
	// 2^32-1 days overflows a time.Duration; 8 days is only too long.
	overflow := desc("azure", "b")
	overflow.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_DAY, UnitMultiplier: wrapperspb.UInt32(math.MaxUint32)}
	eightDays := desc("azure", "b")
	eightDays.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_DAY, UnitMultiplier: wrapperspb.UInt32(8)}
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"no domain", rlsReq("", desc("a", "b")), "domain: required"},
		{"no descriptors", rlsReq("d"), "descriptors: at least one is required"},
		{"no entries", rlsReq("d", desc("a", "b"), desc()), "descriptors[1].entries: at least one is required"},
		{"empty key", rlsReq("d", desc("", "b")), "descriptors[0].entries[0].key: must not be empty"},
		{"too long", rlsReq("d", desc("a", strings.Repeat("x", 64))), "-byte key, more than the maximum of 64"},
		// Short as sent, but each '/' is escaped to 3 bytes in the key.
		{"too long escaped", rlsReq("d", desc("a", strings.Repeat("/", 30))), "-byte key, more than the maximum of 64"},
		{"hits over max", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}, HitsAddend: 101},
			"descriptors[0].hits_addend: 101 is more than the maximum of 100"},
		{"negative hits", rlsReq("d", neg), "descriptors[0].is_negative_hits: not supported"},
		{"two months override", rlsReq("d", month), "descriptors[0].limit: unit_multiplier 2: a MONTH is a calendar window, not a multiple of one"},
		{"unknown unit override", rlsReq("d", unknown), "descriptors[0].limit: unit UNKNOWN is not supported (second, minute, hour, day, month or year)"},
		{"overflowing multiplier", rlsReq("internal", overflow), "descriptors[0].limit: unit_multiplier 4294967295 makes a window longer than 168h0m0s"},
		{"multiplier past a week", rlsReq("internal", eightDays), "descriptors[0].limit: unit_multiplier 8 makes a window longer than 168h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.ShouldRateLimit(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Errorf("ShouldRateLimit = %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
}

// TestEnvoyStoreDown: a store failure is Unavailable, which Envoy's
// failure_mode_deny decides on.
func TestEnvoyStoreDown(t *testing.T) {
	s := newServer(t, api.Config{Store: storetest.Down{Err: errDown}, Rules: loadExamples(t)})
	_, err := s.rlsClient(t).ShouldRateLimit(context.Background(), rlsReq("internal", desc("azure", "a")))
	if got, want := status.Code(err), codes.Unavailable; got != want {
		t.Errorf("ShouldRateLimit code = %v, want %v (err %v)", got, want, err)
	}
}

// TestEnvoyConnectJSON: the procedure also answers the Connect protocol,
// as envoyproxy/ratelimit's /json endpoint answers JSON.
func TestEnvoyConnectJSON(t *testing.T) {
	s := newServer(t, api.Config{Rules: loadExamples(t)})
	code, body := postJSON(t, s.URL+"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
		`{"domain":"internal","descriptors":[{"entries":[{"key":"azure","value":"a"}]}]}`)
	if code != http.StatusOK || !strings.Contains(body, `"overallCode":"OK"`) || !strings.Contains(body, `"limitRemaining":99`) {
		t.Errorf("POST ShouldRateLimit = %d %s", code, body)
	}
}

func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, b := apitest.Post(t, url, body, nil)
	return resp.StatusCode, b
}

// TestEnvoyReflection: grpcurl can describe the Envoy service, and gRPC
// health reports it.
func TestEnvoyReflection(t *testing.T) {
	s := newServer(t, api.Config{})
	rc := grpcreflect.NewClient(apitest.H2CClient(t), s.URL, connect.WithGRPC())
	stream := rc.NewStream(context.Background())
	t.Cleanup(func() { stream.Close() })
	files, err := stream.FileContainingSymbol("envoy.service.ratelimit.v3.RateLimitService")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range files {
		names[f.GetName()] = true
	}
	for _, want := range []string{"envoy/service/ratelimit/v3/rls.proto", "envoy/extensions/common/ratelimit/v3/ratelimit.proto"} {
		if !names[want] {
			t.Errorf("FileContainingSymbol returned %v, want %s among them", names, want)
		}
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(s.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for _, serving := range []bool{true, false} {
		s.API.SetServing(serving)
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		want := healthpb.HealthCheckResponse_SERVING
		if !serving {
			want = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if err != nil || resp.GetStatus() != want {
			t.Errorf("health of the Envoy service (serving %v) = %v, %v; want %v", serving, resp.GetStatus(), err, want)
		}
	}
}

// BenchmarkShouldRateLimit is Envoy's call as Envoy makes it: gRPC over h2c
// on loopback, two descriptors of envoyproxy/ratelimit's Example 2, the
// in-memory store.
func BenchmarkShouldRateLimit(b *testing.B) {
	rs, err := rules.Load("testdata/envoyproxy")
	if err != nil {
		b.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Rules: rs})
	if err != nil {
		b.Fatal(err)
	}
	srv := apitest.Serve(b, h).URL
	conn, err := grpc.NewClient(strings.TrimPrefix(srv, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			num := fmt.Sprint(n.Add(1) % 10000)
			_, err := c.ShouldRateLimit(context.Background(), rlsReq("messaging",
				desc("message_type", "marketing", "to_number", num),
				desc("to_number", num)))
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
