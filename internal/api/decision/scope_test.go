package decision_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// newDecider returns a Decider on a memory store in region eu, whose
// other regions are pool.
func newDecider(t *testing.T, rs *rules.Set, pool *apitest.Pool) *decision.Decider {
	t.Helper()
	d, err := decision.New(decision.Config{
		Store:       region.NewMemory(region.MemoryConfig{Region: "eu"}),
		Region:      "eu",
		Pool:        pool,
		MaxKeyBytes: 1024,
		MaxHits:     1 << 20,
		MaxWindow:   window.MaxWindow,
		MaxLogLimit: 1000,
		Logger:      slog.New(slog.DiscardHandler),
		Registerer:  prometheus.NewRegistry(),
	}, rs)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func inline(algo ratelimitv1.Algorithm, scope ratelimitv1.Scope) *ratelimitv1.Limit {
	return &ratelimitv1.Limit{Limit: 100, Window: durationpb.New(time.Minute), Algorithm: algo, Scope: scope}
}

// TestInlineScope: a region-local algorithm with global scope (asked for
// or by default) is invalid_argument naming limit.scope while the cluster
// has more than one region; with region scope, or in one region, it is
// accepted; the replicated algorithms are accepted with either scope.
func TestInlineScope(t *testing.T) {
	pool := &apitest.Pool{}
	d := newDecider(t, nil, pool)
	now := time.Unix(1_700_000_000, 0)
	const refused = "checks[2].limit.scope: ALGORITHM_TOKEN_BUCKET is region-local and the scope is global, and this cluster has 3 regions: " +
		"set scope to SCOPE_REGION for one limit per region, or use ALGORITHM_SLIDING_WINDOW or ALGORITHM_FIXED_WINDOW for one global limit"
	for _, tc := range []struct {
		name    string
		regions int64
		limit   *ratelimitv1.Limit
		scope   rules.Scope
		err     string // "" when accepted
	}{
		{"token bucket, default scope, 3 regions", 3, inline(ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, ratelimitv1.Scope_SCOPE_UNSPECIFIED), 0, refused},
		{"token bucket, global, 3 regions", 3, inline(ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, ratelimitv1.Scope_SCOPE_GLOBAL), 0, refused},
		{"sliding log, global, 2 regions", 2, inline(ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG, ratelimitv1.Scope_SCOPE_GLOBAL), 0,
			"checks[2].limit.scope: ALGORITHM_SLIDING_LOG is region-local and the scope is global, and this cluster has 2 regions: " +
				"set scope to SCOPE_REGION for one limit per region, or use ALGORITHM_SLIDING_WINDOW or ALGORITHM_FIXED_WINDOW for one global limit"},
		{"token bucket, region, 3 regions", 3, inline(ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, ratelimitv1.Scope_SCOPE_REGION), rules.ScopeRegion, ""},
		{"sliding log, region, 3 regions", 3, inline(ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG, ratelimitv1.Scope_SCOPE_REGION), rules.ScopeRegion, ""},
		{"token bucket, global, 1 region", 1, inline(ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, ratelimitv1.Scope_SCOPE_GLOBAL), rules.ScopeGlobal, ""},
		{"token bucket, default, no count yet", 0, inline(ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, ratelimitv1.Scope_SCOPE_UNSPECIFIED), rules.ScopeGlobal, ""},
		{"sliding window, global, 3 regions", 3, inline(ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW, ratelimitv1.Scope_SCOPE_GLOBAL), rules.ScopeGlobal, ""},
		{"fixed window, default, 3 regions", 3, inline(ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW, ratelimitv1.Scope_SCOPE_UNSPECIFIED), rules.ScopeGlobal, ""},
		{"sliding window, region, 3 regions", 3, inline(ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW, ratelimitv1.Scope_SCOPE_REGION), rules.ScopeRegion, ""},
		{"unknown scope", 1, inline(ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW, ratelimitv1.Scope(7)), 0,
			"checks[2].limit.scope: unknown scope 7 (want SCOPE_GLOBAL or SCOPE_REGION)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool.N.Store(tc.regions)
			req, err := d.Validate(decision.Input{NS: decision.Inline, Field: "checks[2].", Key: "alice", Limit: tc.limit, Now: now})
			if tc.err != "" {
				if err == nil {
					t.Fatalf("Validate = %+v, want an error", req)
				}
				if got, want := connect.CodeOf(err), connect.CodeInvalidArgument; got != want {
					t.Errorf("code = %v, want %v", got, want)
				}
				if got := decision.Message(err); got != tc.err {
					t.Errorf("message = %q, want %q", got, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if req.Scope != tc.scope {
				t.Errorf("Scope = %v, want %v", req.Scope, tc.scope)
			}
			want := decision.InlineKey("alice")
			if tc.scope == rules.ScopeRegion {
				want = decision.RegionKey(want)
			}
			if req.Store.Key != want {
				t.Errorf("store key = %q, want %q", req.Store.Key, want)
			}
		})
	}
}

// TestRuleScope: a rule with a region-local algorithm and global scope is
// refused naming the rule and its scope while the cluster has more than
// one region, in the Connect API, forward-auth and Envoy alike; the same
// rule is accepted again when the cluster is back to one region.
func TestRuleScope(t *testing.T) {
	rs, err := rules.Parse([]byte(`rules:
  - {name: burst, limit: 10, window: 1s, algorithm: token_bucket}
  - {name: burst-here, limit: 10, window: 1s, algorithm: token_bucket, scope: region}
  - {name: api, limit: 10, window: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	envoy, err := rules.Parse([]byte("domain: shop\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: sliding_log}\n" +
		"  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: sliding_log, scope: region}\n"))
	if err != nil {
		t.Fatal(err)
	}
	pool := &apitest.Pool{}
	pool.N.Store(3)
	d := newDecider(t, rs, pool)
	now := time.Unix(1_700_000_000, 0)
	const ruleRefused = `rule: rule "burst": scope: token_bucket is region-local and the rule's scope is global, and this cluster has 3 regions: ` +
		"set scope: region in its rules file for one limit per region, or use sliding_window or fixed_window for one global limit"
	for _, ns := range []decision.Namespace{decision.Inline, decision.ForwardAuth} {
		_, err := d.Validate(decision.Input{NS: ns, Key: "alice", Rule: "burst", Now: now})
		if connect.CodeOf(err) != connect.CodeInvalidArgument || decision.Message(err) != ruleRefused {
			t.Errorf("namespace %d, rule burst: Validate = %v, want invalid_argument %q", ns, err, ruleRefused)
		}
		for rule, scope := range map[string]rules.Scope{"burst-here": rules.ScopeRegion, "api": rules.ScopeGlobal} {
			if req, err := d.Validate(decision.Input{NS: ns, Key: "alice", Rule: rule, Now: now}); err != nil || req.Scope != scope {
				t.Errorf("namespace %d, rule %s: Validate = %+v, %v; want scope %v", ns, rule, req, err, scope)
			}
		}
	}
	dom := envoy.Domain("shop")
	ip := dom.Match([]rules.Entry{{Key: "ip", Value: "1.2.3.4"}})
	_, err = d.Validate(decision.Input{NS: decision.Envoy, Field: "descriptors[1].", Key: "shop/ip=1.2.3.4", Envoy: ip, Now: now})
	const envoyRefused = "descriptors[1].rate_limit.scope: limit shop.ip: sliding_log is region-local and its scope is global, and this cluster has 3 regions: " +
		"set scope: region on its rate_limit for one limit per region, or use sliding_window or fixed_window for one global limit"
	if connect.CodeOf(err) != connect.CodeInvalidArgument || decision.Message(err) != envoyRefused {
		t.Errorf("envoy shop.ip: Validate = %v, want invalid_argument %q", err, envoyRefused)
	}
	user := dom.Match([]rules.Entry{{Key: "user", Value: "bob"}})
	req, err := d.Validate(decision.Input{NS: decision.Envoy, Key: "shop/user=bob", Envoy: user, Now: now})
	if err != nil || req.Scope != rules.ScopeRegion || req.Store.Key != decision.RegionKey(decision.EnvoyKey("shop/user=bob")) {
		t.Errorf("envoy shop.user: Validate = %+v, %v; want region scope under %q", req, err, decision.RegionKey(decision.EnvoyKey("shop/user=bob")))
	}

	// The Envoy adapter passes the global-scope key prebuilt; a region
	// scope still moves it to the region's own counter.
	sk, _ := decision.EnvoyStoreKey("shop", []rules.Entry{{Key: "user", Value: "bob"}})
	req, err = d.Validate(decision.Input{NS: decision.Envoy, Key: "shop/user=bob", StoreKey: sk, Envoy: user, Now: now})
	if err != nil || req.Store.Key != decision.RegionKey(decision.EnvoyKey("shop/user=bob")) {
		t.Errorf("envoy shop.user with StoreKey: Validate = %+v, %v; want region scope under %q", req, err, decision.RegionKey(decision.EnvoyKey("shop/user=bob")))
	}

	// Regions come and go: with one region left, the rule is accepted.
	pool.N.Store(1)
	if req, err := d.Validate(decision.Input{NS: decision.Inline, Key: "alice", Rule: "burst", Now: now}); err != nil || req.Scope != rules.ScopeGlobal {
		t.Errorf("one region, rule burst: Validate = %+v, %v; want accepted with global scope", req, err)
	}
}

// TestRegionScopeIsNotReplicated: a region-scoped counter decision
// queues nothing for the other regions, counts apart from the same key's
// global counter, and its outcome says which scope applied; the pool
// hears of every decision of either scope that the store made, but of no
// Peek.
func TestRegionScopeIsNotReplicated(t *testing.T) {
	pool := &apitest.Pool{}
	pool.N.Store(3)
	d := newDecider(t, nil, pool)
	now := time.Unix(1_700_000_000, 0)
	decide := func(scope ratelimitv1.Scope, peek bool) decision.Outcome {
		t.Helper()
		req, err := d.Validate(decision.Input{NS: decision.Inline, Key: "alice", Limit: inline(ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW, scope), Now: now, Peek: peek})
		if err != nil {
			t.Fatal(err)
		}
		var out [1]decision.Outcome
		if err := d.Decide(context.Background(), []decision.Request{req}, out[:]); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	for i := 0; i < 3; i++ {
		if o := decide(ratelimitv1.Scope_SCOPE_REGION, false); !o.Allowed || o.Scope != rules.ScopeRegion {
			t.Fatalf("region-scoped Check %d = %+v, want allowed with region scope", i+1, o)
		}
	}
	if got := keys(pool.Totals()); len(got) != 0 {
		t.Errorf("region-scoped Checks replicated %v, want nothing", got)
	}
	if o := decide(ratelimitv1.Scope_SCOPE_GLOBAL, true); o.Estimate != 0 || o.Scope != rules.ScopeGlobal {
		t.Errorf("global Peek after 3 region-scoped hits = estimate %d, scope %v; want 0, global", o.Estimate, o.Scope)
	}
	if o := decide(ratelimitv1.Scope_SCOPE_UNSPECIFIED, false); !o.Allowed || o.Scope != rules.ScopeGlobal {
		t.Errorf("global Check = %+v, want allowed with global scope", o)
	}
	if got, want := strings.Join(keys(pool.Totals()), ","), decision.InlineKey("alice"); got != want {
		t.Errorf("replicated keys = %q, want %q", got, want)
	}
	if o := decide(ratelimitv1.Scope_SCOPE_REGION, true); o.Estimate != 3 {
		t.Errorf("region-scoped Peek = estimate %d, want 3", o.Estimate)
	}
	rk, gk := decision.RegionKey(decision.InlineKey("alice")), decision.InlineKey("alice")
	if got, want := strings.Join(pool.DecidedKeys(), ","), strings.Join([]string{rk, rk, rk, gk}, ","); got != want {
		t.Errorf("decided keys = %q, want %q", got, want)
	}
}

// keys returns the totals' keys.
func keys(ts []region.Total) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Key)
	}
	return out
}
