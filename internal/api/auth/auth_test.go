package auth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
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
		{"space", []string{"has space 0123456789"}, "token 1: word 2 is not rules=, domains= or prefixes="},
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
