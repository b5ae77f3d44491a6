package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/forwardauth"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// checkRules are the rules the /check tests use: at t0 (30 s into the
// minute) a fixed window's bucket ends in exactly 30 s.
func checkRules(t *testing.T) *rules.Set {
	t.Helper()
	rs, err := rules.New([]rules.Rule{
		{Name: "fw", Limit: window.Limit{Limit: 2, Window: time.Minute, Algorithm: window.FixedWindow}},
		{Name: "sw", Limit: window.Limit{Limit: 2, Window: time.Minute}},
		{Name: "other", Limit: window.Limit{Limit: 1, Window: time.Minute, Algorithm: window.FixedWindow}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// fwdAuth sends one forward-auth request, as a proxy does: GET with the
// client's headers, and returns the status, headers and body. Every GET of
// the tests goes through it.
func fwdAuth(t *testing.T, url string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	resp, body := apitest.Get(t, url, hdr)
	return resp.StatusCode, resp.Header, body
}

// wantHeaders checks h against want; "" means absent.
// storePeek asks the store what one more hit of rule on the forward-auth
// key would get, without consuming it.
func storePeek(t *testing.T, s *testServer, rule, key string) region.Result {
	t.Helper()
	r, ok := s.API.Rules().Lookup(rule)
	if !ok {
		t.Fatalf("no rule %q", rule)
	}
	res := make([]region.Result, 1)
	req := region.Request{Key: decision.ForwardAuthKey(rule, key), Limit: r.Limit, Hits: 1, Now: t0, Peek: true}
	if err := s.Store.Check(context.Background(), []region.Request{req}, res); err != nil {
		t.Fatal(err)
	}
	return res[0]
}

func wantHeaders(t *testing.T, what string, h http.Header, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got := h.Get(k); got != w {
			t.Errorf("%s: %s = %q, want %q", what, k, got, w)
		}
	}
}

func TestHTTPCheckDecisionsAndHeaders(t *testing.T) {
	s := newServer(t, api.Config{Rules: checkRules(t)})
	xff := map[string]string{"X-Forwarded-For": "203.0.113.7, 10.0.0.1"}
	steps := []struct {
		name   string
		url    string
		hdr    map[string]string
		status int
		want   map[string]string
	}{
		{"first allowed", "/check/fw", xff, 200, map[string]string{
			"RateLimit-Policy": `"fw";q=2;w=60`, "RateLimit": `"fw";r=1;t=30`, "Retry-After": "", "X-RateLimit-Limit": "",
		}},
		{"second allowed", "/check/fw", xff, 200, map[string]string{
			"RateLimit": `"fw";r=0;t=30`, "Retry-After": "",
		}},
		{"third denied", "/check/fw", xff, 429, map[string]string{
			"RateLimit-Policy": `"fw";q=2;w=60`, "RateLimit": `"fw";r=0;t=30`, "Retry-After": "30",
		}},
		{"same address with a port and a trailing path is the same key", "/check/fw/some/original/path",
			map[string]string{"X-Forwarded-For": "203.0.113.7:51234"}, 429, map[string]string{"Retry-After": "30"}},
		{"another address has its own count", "/check/fw", map[string]string{"X-Forwarded-For": "198.51.100.1"}, 200, map[string]string{
			"RateLimit": `"fw";r=1;t=30`,
		}},
		{"another rule counts apart", "/check/other", xff, 200, map[string]string{
			"RateLimit-Policy": `"other";q=1;w=60`, "RateLimit": `"other";r=0;t=30`,
		}},
		{"rule from the header", "/check", map[string]string{"X-Forwarded-For": "203.0.113.7", "X-RateLimit-Rule": "other"}, 429, map[string]string{
			"RateLimit": `"other";r=0;t=30`, "Retry-After": "30",
		}},
		{"the path wins over the header", "/check/sw", map[string]string{"X-Forwarded-For": "203.0.113.7", "X-RateLimit-Rule": "fw"}, 200, map[string]string{
			"RateLimit-Policy": `"sw";q=2;w=60`,
		}},
		{"deny_status=403 for nginx", "/check/fw?deny_status=403", xff, 403, map[string]string{
			"RateLimit": `"fw";r=0;t=30`, "Retry-After": "30",
		}},
	}
	for _, st := range steps {
		status, h, body := fwdAuth(t, s.URL+st.url, st.hdr)
		if status != st.status {
			t.Errorf("%s: status %d, want %d (%s)", st.name, status, st.status, body)
		}
		wantHeaders(t, st.name, h, st.want)
		if got := h.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s: Cache-Control = %q, want no-store", st.name, got)
		}
	}

	// The counts are the named rule's, in the forward-auth namespace under
	// the documented key: fw holds 2 of 2 for the client address.
	if got := storePeek(t, s, "fw", "x-forwarded-for=203.0.113.7"); got.Allowed || got.Remaining != 0 {
		t.Errorf("store peek (fw, x-forwarded-for=203.0.113.7) = allowed %v remaining %d, want denied, 0", got.Allowed, got.Remaining)
	}

	wantMetrics(t, s,
		`rlcluster_decisions_total{outcome="allowed",rule="fw"} 3`,
		`rlcluster_decisions_total{outcome="denied",rule="fw"} 3`,
		`rlcluster_decisions_total{outcome="allowed",rule="other"} 1`,
		`rlcluster_decisions_total{outcome="denied",rule="other"} 1`,
		`rlcluster_decision_duration_seconds_count{method="HTTPCheck"} 9`,
	)
}

func TestHTTPCheckSlidingWindow(t *testing.T) {
	// Sliding window, limit 2 per minute, at 30 s into the bucket with
	// nothing before: the hits all come at that instant, so they leave the
	// trailing window together, 60 s from now.
	s := newServer(t, api.Config{Rules: checkRules(t), Check: forwardauth.Config{LegacyHeaders: true}})
	xff := map[string]string{"X-Forwarded-For": "2001:db8::1"}
	status, h, _ := fwdAuth(t, s.URL+"/check/sw", xff)
	if status != 200 {
		t.Fatalf("status %d, want 200", status)
	}
	wantHeaders(t, "first", h, map[string]string{
		"RateLimit-Policy": `"sw";q=2;w=60`, "RateLimit": `"sw";r=1;t=60`,
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "60",
	})
	fwdAuth(t, s.URL+"/check/sw", xff)
	status, h, body := fwdAuth(t, s.URL+"/check/sw", xff)
	if status != 429 {
		t.Fatalf("status %d, want 429", status)
	}
	// Two hits at one instant: the third is allowed once they have left
	// the trailing window, 60 s from now (the two-bucket counter would
	// admit it 30.001 s from now, taking them as spread over the bucket).
	wantHeaders(t, "denied", h, map[string]string{
		"RateLimit": `"sw";r=0;t=60`, "Retry-After": "60",
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0",
	})
	if want := "rate limited: retry after 60s\n"; body != want {
		t.Errorf("body = %q, want %q", body, want)
	}
}

func TestHTTPCheckKeyHeaders(t *testing.T) {
	s := newServer(t, api.Config{Rules: checkRules(t), Check: forwardauth.Config{
		Path:        "/auth",
		KeyHeaders:  []string{"X-Api-Key", "Authorization+X-Forwarded-For", "X-Real-IP"},
		DefaultRule: "other",
		DenyStatus:  403,
	}})
	const secret = "Bearer s3cr3t-token-value"
	sum := sha256.Sum256([]byte(secret))
	hashed := "sha256:" + hex.EncodeToString(sum[:16])
	keySum := sha256.Sum256([]byte("k-123"))
	tests := []struct {
		name string
		hdr  map[string]string
		key  string // the documented key the request counts under
	}{
		{"first alternative: an API key, hashed", map[string]string{"X-Api-Key": "k-123", "X-Forwarded-For": "203.0.113.7"},
			"x-api-key=sha256:" + hex.EncodeToString(keySum[:16])},
		{"a combination", map[string]string{"Authorization": secret, "X-Forwarded-For": "::ffff:203.0.113.7"},
			"authorization=" + hashed + "&x-forwarded-for=203.0.113.7"},
		{"Authorization alone does not complete its combination", map[string]string{"Authorization": secret, "X-Real-IP": "198.51.100.2"},
			"x-real-ip=198.51.100.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h, _ := fwdAuth(t, s.URL+"/auth", tt.hdr)
			if status != 200 {
				t.Fatalf("status %d, want 200", status)
			}
			wantHeaders(t, "allowed", h, map[string]string{"RateLimit": `"other";r=0;t=30`})
			status, _, _ = fwdAuth(t, s.URL+"/auth", tt.hdr)
			if status != 403 {
				t.Errorf("second request: status %d, want the configured 403", status)
			}
			if storePeek(t, s, "other", tt.key).Allowed {
				t.Errorf("store peek (other, %q) allowed, want the count /auth made under that key", tt.key)
			}
		})
	}
	body := get(t, s.URL+"/metrics", http.StatusOK)
	for _, leak := range []string{"s3cr3t", "k-123"} {
		if strings.Contains(body, leak) {
			t.Errorf("/metrics shows the credential %q", leak)
		}
	}
}

func TestHTTPCheckBadInput(t *testing.T) {
	s := newServer(t, api.Config{Rules: checkRules(t), Check: forwardauth.Config{KeyHeaders: []string{"X-Forwarded-For", "Authorization"}}})
	tests := []struct {
		name string
		url  string
		hdr  map[string]string
		want string
	}{
		{"no rule", "/check", map[string]string{"X-Forwarded-For": "203.0.113.7"}, "rule: none named"},
		{"unknown rule", "/check/nope", map[string]string{"X-Forwarded-For": "203.0.113.7"}, `rule: unknown rule "nope"`},
		{"no key header", "/check/fw", map[string]string{"X-Other": "x"}, "no key: none of the key headers is present (X-Forwarded-For, Authorization)"},
		{"malformed X-Forwarded-For", "/check/fw", map[string]string{"X-Forwarded-For": "not-an-ip, 10.0.0.1", "Authorization": "Bearer hush"}, "X-Forwarded-For: the leftmost entry is not an IP address"},
		{"bad deny_status", "/check/fw?deny_status=500", map[string]string{"X-Forwarded-For": "203.0.113.7"}, `deny_status: "500", want 429 or 403`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := fwdAuth(t, s.URL+tt.url, tt.hdr)
			if status != 400 {
				t.Errorf("status %d, want 400", status)
			}
			if !strings.Contains(body, tt.want) {
				t.Errorf("body = %q, want it to contain %q", body, tt.want)
			}
			if strings.Contains(body, "hush") {
				t.Errorf("body = %q shows the Authorization value", body)
			}
		})
	}
	wantMetrics(t, s,
		`rlcluster_decisions_total{outcome="error",rule="unknown"} 3`,
		`rlcluster_decisions_total{outcome="error",rule="fw"} 2`,
	)
}

func TestHTTPCheckStoreDown(t *testing.T) {
	s := newServer(t, api.Config{Store: storetest.Down{Err: errDown}, Rules: checkRules(t)})
	status, h, body := fwdAuth(t, s.URL+"/check/fw", map[string]string{"X-Forwarded-For": "203.0.113.7"})
	if status != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", status)
	}
	if !strings.Contains(body, "store unavailable") {
		t.Errorf("body = %q, want it to say the store is unavailable", body)
	}
	if got := h.Get("RateLimit"); got != "" {
		t.Errorf("RateLimit = %q on a failure, want none", got)
	}
}

func TestHTTPCheckConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  forwardauth.Config
		want string
	}{
		{"trailing slash", forwardauth.Config{Path: "/check/"}, "Check.Path"},
		{"no leading slash", forwardauth.Config{Path: "check"}, "Check.Path"},
		{"taken", forwardauth.Config{Path: "/metrics"}, "Check.Path"},
		{"RPC namespace", forwardauth.Config{Path: "/ratelimit.v1.RateLimitService"}, "Check.Path"},
		{"deny status", forwardauth.Config{DenyStatus: 500}, "Check.DenyStatus: 500"},
		{"header name", forwardauth.Config{KeyHeaders: []string{"X-Ok+Bad Name"}}, `Check.KeyHeaders[0]: "Bad Name"`},
		{"empty header in a combination", forwardauth.Config{KeyHeaders: []string{"X-Ok", "A+"}}, `Check.KeyHeaders[1]: ""`},
		{"default rule name", forwardauth.Config{DefaultRule: "bad rule"}, "Check.DefaultRule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Check: tt.cfg})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewHandler(%+v) = %v, want an error containing %q", tt.cfg, err, tt.want)
			}
		})
	}
}
