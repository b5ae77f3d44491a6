package auth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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

const (
	tokA = "token-a-0123456789"
	tokB = "token-b-0123456789"
)

func TestTokens(t *testing.T) {
	toks, err := auth.NewTokens([]string{tokA, tokB})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tok  string
		want bool
	}{
		{"first", tokA, true},
		{"second", tokB, true},
		{"prefix", tokA[:len(tokA)-1], false},
		{"longer", tokA + "x", false},
		{"empty", "", false},
		{"other", "token-c-0123456789", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := toks.Valid(tc.tok); got != tc.want {
				t.Errorf("Valid(%q) = %v, want %v", tc.tok, got, tc.want)
			}
		})
	}

	// A bad set is refused, names the token by position only, and keeps
	// the old tokens.
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"none", nil, "no bearer token"},
		{"short", []string{tokA, "short-secret"}, "token 2: 12 bytes, want at least 16"},
		{"space", []string{"has space 0123456789"}, "token 1: word 2 is not admin, or rules=, inline=, domains= or prefixes="},
		{"control", []string{"has\x01control-0123456789"}, "token 1: must be visible ASCII"},
		{"scope twice", []string{tokA + " rules=a rules=b"}, "token 1: rules= given twice"},
		{"empty scope entry", []string{tokA + " prefixes=a,,b"}, "token 1: prefixes=: an empty entry"},
	} {
		t.Run("set "+tc.name, func(t *testing.T) {
			err := toks.Set(tc.set)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Set() = %v, want an error containing %q", err, tc.want)
			}
			for _, s := range tc.set {
				if len(s) > 3 && strings.Contains(err.Error(), s) {
					t.Errorf("Set() error %q shows a token", err)
				}
			}
			if !toks.Valid(tokA) || toks.Len() != 2 {
				t.Errorf("after a failed Set: Valid(tokA) = %v, Len = %d; want the old tokens", toks.Valid(tokA), toks.Len())
			}
		})
	}
	if err := toks.Set([]string{tokB}); err != nil {
		t.Fatal(err)
	}
	if toks.Valid(tokA) || !toks.Valid(tokB) {
		t.Errorf("after Set([tokB]): Valid(tokA) = %v, Valid(tokB) = %v; want false, true", toks.Valid(tokA), toks.Valid(tokB))
	}
	var zero auth.Tokens
	if zero.Valid("") || zero.Valid(tokA) {
		t.Error("zero Tokens accepted a token")
	}
}

func TestParseTokens(t *testing.T) {
	got := auth.ParseTokens([]byte("# rotated 2026-11-23\n  " + tokA + "  \n\n" + tokB + "\r\n"))
	if len(got) != 2 || got[0] != tokA || got[1] != tokB {
		t.Errorf("ParseTokens = %q, want [%q %q]", got, tokA, tokB)
	}
}

// bearer adds a bearer token to every Connect request.
func bearer(tok string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+tok)
			return next(ctx, req)
		}
	}))
}

// TestRequireBearer runs real Connect (JSON and gRPC) and grpc-go clients
// against the handler behind RequireBearer.
func TestRequireBearer(t *testing.T) {
	toks, err := auth.NewTokens([]string{tokA})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	h.Handle("/extra", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	srv := serveBehind(t, toks, h)

	msg := &ratelimitv1.CheckRequest{Key: "alice", Limit: &ratelimitv1.Limit{Limit: 10, Window: durationpb.New(time.Minute)}}
	for _, tc := range []struct {
		name string
		opts []connect.ClientOption
		h2c  bool
		want connect.Code // 0: success
	}{
		{"connect no token", nil, false, connect.CodeUnauthenticated},
		{"connect wrong token", []connect.ClientOption{bearer(tokB)}, false, connect.CodeUnauthenticated},
		{"connect token", []connect.ClientOption{bearer(tokA)}, false, 0},
		{"grpc no token", []connect.ClientOption{connect.WithGRPC()}, true, connect.CodeUnauthenticated},
		{"grpc token", []connect.ClientOption{connect.WithGRPC(), bearer(tokA)}, true, 0},
		{"grpc-web no token", []connect.ClientOption{connect.WithGRPCWeb()}, false, connect.CodeUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := http.DefaultClient
			if tc.h2c {
				hc = apitest.H2CClient(t)
			}
			c := ratelimitv1connect.NewRateLimitServiceClient(hc, srv.URL, tc.opts...)
			_, err := c.Check(context.Background(), connect.NewRequest(msg))
			if got := connect.CodeOf(err); err != nil && got != tc.want || err == nil && tc.want != 0 {
				t.Errorf("Check() error = %v (code %v), want code %v", err, got, tc.want)
			}
			var ce *connect.Error
			if errors.As(err, &ce) && strings.Contains(ce.Message(), tokB) {
				t.Errorf("error %q echoes the token", ce.Message())
			}
		})
	}

	// Plain HTTP: a 401 with a challenge; open paths need nothing; a
	// mounted endpoint is covered.
	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"POST", "/ratelimit.v1.RateLimitService/Check", "", http.StatusUnauthorized},
		{"POST", "/ratelimit.v1.RateLimitService/Check", "Basic " + tokA, http.StatusUnauthorized},
		{"GET", "/extra", "", http.StatusUnauthorized},
		{"GET", "/extra", "bearer " + tokA, http.StatusNoContent},
		{"GET", "/", "", http.StatusUnauthorized}, // the status page and its data follow the API's auth
		{"GET", "/status.json", "", http.StatusUnauthorized},
		{"GET", "/status.json", "Bearer " + tokA, http.StatusOK},
		{"GET", "/healthz", "", http.StatusOK},
		{"GET", "/readyz", "", http.StatusOK},
		{"GET", "/metrics", "", http.StatusOK},
	} {
		r, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(`{"key":"k","limit":{"limit":3,"window":"60s"}}`))
		r.Header.Set("Content-Type", "application/json")
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s (auth %q) = %d, want %d", tc.method, tc.path, tc.auth, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s: WWW-Authenticate = %q, want Bearer", tc.method, tc.path, resp.Header.Get("WWW-Authenticate"))
		}
	}

	// 2 Connect, 1 gRPC, 1 gRPC-Web and 5 plain HTTP refusals so far.
	if got, want := toks.Rejected(), uint64(9); got != want {
		t.Errorf("Rejected() = %d, want %d", got, want)
	}

	// grpc-go: health checking is open; the service needs the token.
	conn := grpcConn(t, srv.URL)
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("grpc-go health Check without a token: %v, want it open", err)
	}
	var resp ratelimitv1.CheckResponse
	err = conn.Invoke(context.Background(), "/ratelimit.v1.RateLimitService/Check", msg, &resp)
	if got, want := status.Code(err), codes.Unauthenticated; got != want {
		t.Errorf("grpc-go Check without a token: %v, want %v", err, want)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tokA)
	if err := conn.Invoke(ctx, "/ratelimit.v1.RateLimitService/Check", msg, &resp); err != nil || !resp.Allowed {
		t.Errorf("grpc-go Check with the token: allowed %v, err %v; want allowed", resp.Allowed, err)
	}
}

// serveBehind serves h behind RequireBearer with toks (the default open
// paths) over HTTP/1.1 and h2c, as rlnode does, until t ends.
func serveBehind(t *testing.T, toks *auth.Tokens, h http.Handler) *httptest.Server {
	t.Helper()
	return apitest.Serve(t, auth.RequireBearer(toks, auth.DefaultOpenPaths, h))
}

// grpcConn is a grpc-go connection to url over h2c, closed when t ends.
func grpcConn(t *testing.T, url string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// BenchmarkTokensValid measures the per-request cost of checking a bearer
// token against 1 and 100 configured tokens.
func BenchmarkTokensValid(b *testing.B) {
	for _, n := range []int{1, 100} {
		toks := make([]string, n)
		for i := range toks {
			toks[i] = strings.Repeat("t", 24) + string(rune('A'+i%26)) + strings.Repeat("x", i/26)
		}
		set, err := auth.NewTokens(toks)
		if err != nil {
			b.Fatal(err)
		}
		last := toks[n-1]
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !set.Valid(last) {
						b.Fatal("Valid = false")
					}
				}
			})
		})
	}
}

func TestCheckEntry(t *testing.T) {
	for _, tc := range []struct{ entry, want string }{
		{"abc", "3 bytes, want at least 16"},
		{"0123456789abcdef", ""},
		{"0123456789abcdef rules=a", ""},
		{"0123456789abcde\x7f", "must be visible ASCII without spaces"},
		{"0123456789abcdef rules=", "rules=: an empty entry"},
	} {
		err := auth.CheckEntry(tc.entry)
		if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("CheckEntry(%q) = %v, want %q", tc.entry, err, tc.want)
		}
	}
	if got, want := auth.ParseTokenLines([]byte("# c\n\n  tok-a  \ntok-b rules=x\n")), []auth.TokenLine{{3, "tok-a"}, {4, "tok-b rules=x"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParseTokenLines = %v, want %v", got, want)
	}
}

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
