package auth_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/forwardauth"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
)

// TestScopedTokens: a token bound to rules, key prefixes and Envoy domains
// spends only those, through Connect (JSON and gRPC), /check and Envoy's
// gRPC client; an unbound token spends anything.
func TestScopedTokens(t *testing.T) {
	const (
		tenantA = "tenant-a-token-0123456789" // rules=api prefixes=tenant-a:
		edge    = "edge-proxy-token-01234567" // domains=internal
		admin   = "admin-token-0123456789abc" // unbound
	)
	entries := auth.ParseTokens([]byte("# tenants\n" + tenantA + " rules=api prefixes=tenant-a:\n" + edge + " domains=internal\n" + admin + "\n"))
	toks, err := auth.NewTokens(entries)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, y := range map[string]string{
		"rules.yaml":    "rules:\n  - name: api\n    limit: 5\n    window: 1m\n  - name: other\n    limit: 5\n    window: 1m\n",
		"internal.yaml": "domain: internal\ndescriptors:\n  - key: azure\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
		"other.yaml":    "domain: otherdomain\ndescriptors:\n  - key: azure\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
	} {
		writeTestFile(t, dir+"/"+name, y)
	}
	rs, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Rules: rs, Check: forwardauth.Config{DefaultRule: "api"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveBehind(t, toks, h)

	minute := durationpb.New(time.Minute)
	for _, pr := range []struct {
		name string
		opts []connect.ClientOption
		h2c  bool
	}{{"connect-json", []connect.ClientOption{connect.WithProtoJSON()}, false}, {"grpc", []connect.ClientOption{connect.WithGRPC()}, true}} {
		client := func(tok string) ratelimitv1connect.RateLimitServiceClient {
			hc := http.DefaultClient
			if pr.h2c {
				hc = apitest.H2CClient(t)
			}
			return ratelimitv1connect.NewRateLimitServiceClient(hc, srv.URL, append(pr.opts, bearer(tok))...)
		}
		for _, tc := range []struct {
			name string
			tok  string
			req  *ratelimitv1.CheckRequest
			want connect.Code // 0: allowed
		}{
			{"own rule and prefix", tenantA, &ratelimitv1.CheckRequest{Key: "tenant-a:alice", Rule: "api"}, 0},
			{"another tenant's prefix", tenantA, &ratelimitv1.CheckRequest{Key: "tenant-b:alice", Rule: "api"}, connect.CodePermissionDenied},
			{"another rule", tenantA, &ratelimitv1.CheckRequest{Key: "tenant-a:alice", Rule: "other"}, connect.CodePermissionDenied},
			{"inline limit", tenantA, &ratelimitv1.CheckRequest{Key: "tenant-a:alice", Limit: &ratelimitv1.Limit{Limit: 5, Window: minute}}, connect.CodePermissionDenied},
			{"unbound token", admin, &ratelimitv1.CheckRequest{Key: "tenant-b:alice", Rule: "other"}, 0},
			{"unbound token inline", admin, &ratelimitv1.CheckRequest{Key: "x", Limit: &ratelimitv1.Limit{Limit: 5, Window: minute}}, 0},
		} {
			t.Run(pr.name+"/"+tc.name, func(t *testing.T) {
				resp, err := client(tc.tok).Check(context.Background(), connect.NewRequest(tc.req))
				if got := connect.CodeOf(err); (tc.want == 0 && (err != nil || !resp.Msg.Allowed)) || (tc.want != 0 && got != tc.want) {
					t.Errorf("Check(%v) = %v, %v; want code %v", tc.req, resp, err, tc.want)
				}
			})
		}
		// In a batch, the refused check is an error result of its own.
		resp, err := client(tenantA).CheckBatch(context.Background(), connect.NewRequest(&ratelimitv1.CheckBatchRequest{Checks: []*ratelimitv1.CheckRequest{
			{Key: "tenant-a:bob", Rule: "api"}, {Key: "tenant-b:bob", Rule: "api"},
		}}))
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.Msg.Results; !r[0].GetResponse().GetAllowed() || r[1].GetError().GetCode() != "permission_denied" {
			t.Errorf("%s: CheckBatch results = %v, want allowed then permission_denied", pr.name, r)
		}
	}

	// /check: the rule binds (its key comes from headers, not the caller).
	for _, tc := range []struct {
		tok, path string
		want      int
	}{
		{tenantA, "/check/api", http.StatusOK},
		{tenantA, "/check/other", http.StatusForbidden},
		{admin, "/check/other", http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+tc.tok)
		req.Header.Set("X-Forwarded-For", "203.0.113.7")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s with %s's token: %d, want %d", tc.path, strings.SplitN(tc.tok, "-", 2)[0], resp.StatusCode, tc.want)
		}
	}

	// Envoy: the domain binds.
	rls := rlsv3.NewRateLimitServiceClient(grpcConn(t, srv.URL))
	for _, tc := range []struct {
		tok, domain string
		want        codes.Code
	}{
		{edge, "internal", codes.OK},
		{edge, "otherdomain", codes.PermissionDenied},
		{admin, "otherdomain", codes.OK},
	} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tc.tok)
		_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: tc.domain, Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "azure", Value: "a"}}},
		}})
		if got := status.Code(err); got != tc.want {
			t.Errorf("ShouldRateLimit(%s) with %s's token: %v, want %v", tc.domain, strings.SplitN(tc.tok, "-", 2)[0], err, tc.want)
		}
	}
}

func writeTestFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
