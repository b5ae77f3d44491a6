package auth_test

import (
	"context"
	"net/http"
	"net/url"
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
	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/forwardauth"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	apistatus "github.com/rlcluster/rlcluster/internal/api/status"
	"github.com/rlcluster/rlcluster/internal/region"
)

// emptyWatcher watches every key and has seen nothing yet.
type emptyWatcher struct{}

func (emptyWatcher) Watch(context.Context, string) (apistatus.Watch, error) {
	return apistatus.Watch{}, nil
}
func (emptyWatcher) Staleness() []apistatus.StalenessSample { return nil }

// TestScopesClosedPerDimension: a token bound to a scope may use exactly
// the dimensions its scope names. Each token below names one dimension
// (rules, inline limits, Envoy domains; prefixes with rules or with
// inline), and each use below exercises one dimension over a real socket
// (Connect and /check for rules, Connect for inline limits, grpc-go for
// Envoy domains, the status page for watching each kind of counter key).
// Every pair is tried; a use is allowed only when its dimension is named
// (and, with prefixes, its key has one). Before scopes were closed, a
// rules= token could spend and watch any Envoy domain and a domains=
// token any rule and inline limit.
func TestScopesClosedPerDimension(t *testing.T) {
	tokens := map[string]string{
		"rules":           "tok-rules-0123456789 rules=api",
		"inline":          "tok-inline-012345678 inline=yes",
		"domains":         "tok-domains-01234567 domains=edge",
		"rules+prefixes":  "tok-rulepre-0123456 rules=api prefixes=t/",
		"inline+prefixes": "tok-inlpre-01234567 inline=yes prefixes=t/",
		"unbound":         "tok-unbound-0123456",
	}
	var entries []string
	for _, e := range tokens {
		entries = append(entries, e)
	}
	toks, err := auth.NewTokens(entries)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeTestFile(t, dir+"/rules.yaml", "rules:\n  - name: api\n    limit: 1000\n    window: 1m\n  - name: other\n    limit: 1000\n    window: 1m\n")
	writeTestFile(t, dir+"/edge.yaml", "domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n")
	all, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Rules: all, Watcher: emptyWatcher{},
		Check: forwardauth.Config{KeyHeaders: []string{"X-Forwarded-For"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveBehind(t, toks, h)
	rls := rlsv3.NewRateLimitServiceClient(grpcConn(t, srv.URL))
	minute := durationpb.New(time.Minute)

	// Each use returns whether it was allowed, failing t on any answer
	// but allowed or refused for the token's scope.
	type use struct {
		dim string // the dimension it needs
		key string // its key, for prefixes ("" : bound by Rules or Domains only)
		do  func(t *testing.T, tok string) bool
	}
	connectCheck := func(req *ratelimitv1.CheckRequest) func(*testing.T, string) bool {
		return func(t *testing.T, tok string) bool {
			c := ratelimitv1connect.NewRateLimitServiceClient(http.DefaultClient, srv.URL, connect.WithProtoJSON(), bearer(tok))
			_, err := c.Check(context.Background(), connect.NewRequest(req))
			if err != nil && connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("Check(%v): %v, want allowed or permission_denied", req, err)
			}
			return err == nil
		}
	}
	httpGet := func(path string, hdr map[string]string) func(*testing.T, string) bool {
		return func(t *testing.T, tok string) bool {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusForbidden {
				t.Fatalf("GET %s: %d, want 200 or 403", path, resp.StatusCode)
			}
			return resp.StatusCode == http.StatusOK
		}
	}
	watch := func(key string) func(*testing.T, string) bool {
		return httpGet("/status.json?watch="+url.QueryEscape(key), nil)
	}
	uses := map[string]use{
		"connect rule":        {"rules", "t/alice", connectCheck(&ratelimitv1.CheckRequest{Key: "t/alice", Rule: "api"})},
		"connect rule, other": {"rules:other", "t/alice", connectCheck(&ratelimitv1.CheckRequest{Key: "t/alice", Rule: "other"})},
		"connect rule, u/":    {"rules", "u/alice", connectCheck(&ratelimitv1.CheckRequest{Key: "u/alice", Rule: "api"})},
		"check rule":          {"rules", "", httpGet("/check/api", map[string]string{"X-Forwarded-For": "203.0.113.7"})},
		"inline":              {"inline", "t/alice", connectCheck(&ratelimitv1.CheckRequest{Key: "t/alice", Limit: &ratelimitv1.Limit{Limit: 1000, Window: minute}})},
		"inline, u/":          {"inline", "u/alice", connectCheck(&ratelimitv1.CheckRequest{Key: "u/alice", Limit: &ratelimitv1.Limit{Limit: 1000, Window: minute}})},
		"envoy domain": {"domains", "", func(t *testing.T, tok string) bool {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
			_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
				{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/"}}}}})
			if err != nil && status.Code(err) != codes.PermissionDenied {
				t.Fatalf("ShouldRateLimit: %v, want OK or PermissionDenied", err)
			}
			return err == nil
		}},
		"watch rule key":         {"rules", "t/alice", watch("r:api:t/alice")},
		"watch rule key, u/":     {"rules", "u/alice", watch("r:api:u/alice")},
		"watch forward-auth key": {"rules", "", watch("f:api:203.0.113.7")},
		"watch inline key":       {"inline", "t/alice", watch("i:t/alice")},
		"watch inline key, u/":   {"inline", "u/alice", watch("i:u/alice")},
		"watch envoy key":        {"domains", "", watch("e:edge/path=%2F")},
	}
	for name, entry := range tokens {
		tok := auth.Token(entry)
		prefixed := strings.Contains(entry, "prefixes=t/")
		for uname, u := range uses {
			want := false
			switch {
			case name == "unbound":
				want = true
			case u.dim == "rules:other":
				want = false // no scope here names rule "other"
			case strings.HasPrefix(name, u.dim):
				want = !prefixed || u.key == "" || strings.HasPrefix(u.key, "t/")
			}
			t.Run(name+"/"+uname, func(t *testing.T) {
				if got := u.do(t, tok); got != want {
					t.Errorf("token %q, %s: allowed = %v, want %v", entry[strings.Index(entry, " ")+1:], uname, got, want)
				}
			})
		}
	}
}

// TestScopePrefixesAlone: prefixes= names no dimension to spend, so a
// token bound only to prefixes is refused when the tokens load.
func TestScopePrefixesAlone(t *testing.T) {
	for _, tc := range []struct {
		entry, want string
	}{
		{"tok-prefix-only-0123 prefixes=a/", "prefixes= binds the keys of rules= or inline=yes"},
		{"tok-inline-bad-01234 inline=maybe", "inline=: want yes or no"},
		{"tok-inline-twice-012 inline=yes inline=no", "inline= given twice"},
	} {
		if _, err := auth.NewTokens([]string{tc.entry}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewTokens(%q) = %v, want an error containing %q", tc.entry, err, tc.want)
		}
	}
	if _, err := auth.NewTokens([]string{"tok-inline-no-012345 inline=no rules=a prefixes=a/"}); err != nil {
		t.Errorf("NewTokens(inline=no rules=a prefixes=a/) = %v, want it accepted", err)
	}
}
