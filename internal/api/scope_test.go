package api_test

import (
	"context"
	"net/http"
	"strings"

	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// TestScope: in a cluster of three regions, a token bucket with global
// scope is invalid_argument naming limit.scope (alone and inside a
// batch), with region scope it is decided and the answer says so; with
// one region the global token bucket is decided. Over every protocol.
func TestScope(t *testing.T) {
	regions := &apitest.Pool{}
	s := newServer(t, api.Config{Pool: regions})
	tokenBucket := func(scope ratelimitv1.Scope) *ratelimitv1.Limit {
		l := inline(10, time.Minute)
		l.Algorithm, l.Scope = ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, scope
		return l
	}
	ctx := context.Background()
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			regions.N.Store(3)
			c := s.client(t, pr.h2c, pr.opts...)
			for _, sc := range []ratelimitv1.Scope{ratelimitv1.Scope_SCOPE_UNSPECIFIED, ratelimitv1.Scope_SCOPE_GLOBAL} {
				_, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "alice", Limit: tokenBucket(sc)}))
				if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "limit.scope: ALGORITHM_TOKEN_BUCKET is region-local") ||
					!strings.Contains(err.Error(), "3 regions") {
					t.Errorf("Check token bucket, %v, 3 regions = %v; want invalid_argument naming limit.scope", sc, err)
				}
				_, err = c.Peek(ctx, connect.NewRequest(&ratelimitv1.PeekRequest{Key: "alice", Limit: tokenBucket(sc)}))
				if connect.CodeOf(err) != connect.CodeInvalidArgument {
					t.Errorf("Peek token bucket, %v, 3 regions = %v; want invalid_argument", sc, err)
				}
			}
			resp, err := c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "alice", Limit: tokenBucket(ratelimitv1.Scope_SCOPE_REGION)}))
			if err != nil || !resp.Msg.Allowed || resp.Msg.Scope != ratelimitv1.Scope_SCOPE_REGION {
				t.Errorf("Check token bucket, region scope = %v, %v; want allowed, SCOPE_REGION", resp, err)
			}
			batch, err := c.CheckBatch(ctx, connect.NewRequest(&ratelimitv1.CheckBatchRequest{Checks: []*ratelimitv1.CheckRequest{
				{Key: "alice", Limit: tokenBucket(ratelimitv1.Scope_SCOPE_REGION)},
				{Key: "alice", Limit: tokenBucket(ratelimitv1.Scope_SCOPE_GLOBAL)},
				{Key: "alice", Limit: inline(10, time.Minute)},
			}}))
			if err != nil {
				t.Fatal(err)
			}
			res := batch.Msg.Results
			if got := res[0].GetResponse().GetScope(); got != ratelimitv1.Scope_SCOPE_REGION {
				t.Errorf("batch[0] scope = %v, want SCOPE_REGION", got)
			}
			if e := res[1].GetError(); e.GetCode() != "invalid_argument" || !strings.HasPrefix(e.GetMessage(), "checks[1].limit.scope: ") {
				t.Errorf("batch[1] = %v, want invalid_argument naming checks[1].limit.scope", res[1])
			}
			if got := res[2].GetResponse().GetScope(); got != ratelimitv1.Scope_SCOPE_GLOBAL {
				t.Errorf("batch[2] (sliding window, default scope) scope = %v, want SCOPE_GLOBAL", got)
			}

			regions.N.Store(1)
			resp, err = c.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Key: "alice", Limit: tokenBucket(ratelimitv1.Scope_SCOPE_UNSPECIFIED)}))
			if err != nil || !resp.Msg.Allowed || resp.Msg.Scope != ratelimitv1.Scope_SCOPE_GLOBAL {
				t.Errorf("Check token bucket, one region = %v, %v; want allowed, SCOPE_GLOBAL", resp, err)
			}
		})
	}
}

// TestJSONScope: the scope's JSON names are the enum's; an unknown name or
// number is invalid_argument, on the fast path and through Connect.
func TestJSONScope(t *testing.T) {
	for _, srv := range jsonPaths() {
		s := newServer(t, srv.cfg)
		for _, tc := range []struct{ name, body, want string }{
			{"misspelled", `{"key":"a","limit":{"limit":"5","window":"60s","scope":"SCOPE_REGON"}}`, ""},
			{"config-style name", `{"key":"a","limit":{"limit":"5","window":"60s","scope":"region"}}`, ""},
			{"unknown number", `{"key":"a","limit":{"limit":"5","window":"60s","scope":7}}`, "limit.scope: unknown scope 7"},
			{"scope outside limit", `{"key":"a","scope":"SCOPE_REGION","limit":{"limit":"5","window":"60s"}}`, ""},
		} {
			t.Run(srv.name+"/"+tc.name, func(t *testing.T) {
				code, body := postJSON(t, s.URL+"/ratelimit.v1.RateLimitService/Check", tc.body)
				if code != http.StatusBadRequest || !strings.Contains(body, `"code":"invalid_argument"`) || !strings.Contains(body, tc.want) {
					t.Errorf("POST Check %s = %d %s, want 400 invalid_argument %s", tc.body, code, body, tc.want)
				}
			})
		}
		for body, want := range map[string]string{
			`{"key":"b","limit":{"limit":"5","window":"60s","scope":"SCOPE_REGION"}}`:      `"scope":"SCOPE_REGION"`,
			`{"key":"b","limit":{"limit":"5","window":"60s","scope":2}}`:                   `"scope":"SCOPE_REGION"`,
			`{"key":"b","limit":{"limit":"5","window":"60s","scope":"SCOPE_GLOBAL"}}`:      `"scope":"SCOPE_GLOBAL"`,
			`{"key":"b","limit":{"limit":"5","window":"60s","scope":"SCOPE_UNSPECIFIED"}}`: `"scope":"SCOPE_GLOBAL"`,
			`{"key":"b","limit":{"limit":"5","window":"60s"}}`:                             `"scope":"SCOPE_GLOBAL"`,
		} {
			code, got := postJSON(t, s.URL+"/ratelimit.v1.RateLimitService/Check", body)
			if code != http.StatusOK || !strings.HasSuffix(got, `"shadow":false,`+want+`}`) {
				t.Errorf("%s: POST Check %s = %d %s, want 200 ending in %s", srv.name, body, code, got, want)
			}
		}
	}
}

// TestEnvoyScope: through Envoy's gRPC client, a sliding_log rate_limit with
// global scope is refused (InvalidArgument naming its scope and path) while
// the cluster has three regions and decided when it has one; with scope
// region it is decided either way.
func TestEnvoyScope(t *testing.T) {
	rs, err := rules.Parse([]byte(`domain: shop
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log, scope: region}
`))
	if err != nil {
		t.Fatal(err)
	}
	regions := &apitest.Pool{}
	regions.N.Store(3)
	s := newServer(t, api.Config{Rules: rs, Pool: regions})
	c := s.rlsClient(t)
	ctx := context.Background()
	_, err = c.ShouldRateLimit(ctx, rlsReq("shop", desc("user", "bob"), desc("ip", "1.2.3.4")))
	if want := "descriptors[1].rate_limit.scope: limit shop.ip: sliding_log is region-local and its scope is global, and this cluster has 3 regions"; status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("ShouldRateLimit(ip), 3 regions = %v, want InvalidArgument containing %q", err, want)
	}
	resp, err := c.ShouldRateLimit(ctx, rlsReq("shop", desc("user", "bob")))
	if err != nil || resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetLimitRemaining() != 4 {
		t.Errorf("ShouldRateLimit(user), 3 regions = %v, %v; want OK with 4 remaining", resp, err)
	}
	regions.N.Store(1)
	resp, err = c.ShouldRateLimit(ctx, rlsReq("shop", desc("ip", "1.2.3.4")))
	if err != nil || resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetLimitRemaining() != 4 {
		t.Errorf("ShouldRateLimit(ip), 1 region = %v, %v; want OK with 4 remaining", resp, err)
	}
}
