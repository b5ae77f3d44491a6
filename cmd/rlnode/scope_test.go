package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/polltest"
)

// TestScopeThreeRegions runs three rlnodes, each in its own region, joined
// over gossip on real loopback sockets. Alone, a node accepts a token
// bucket with global scope (there are no other regions to disagree with);
// once the three regions are members, every node refuses a region-local
// algorithm with global scope as invalid_argument naming the field, inline
// or through a rule, and accepts it with scope region. Region-scoped counts
// stay in their region while global ones replicate.
func TestScopeThreeRegions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeAtomic(t, rulesFile, `rules:
  - {name: burst, limit: 10, window: 1m, algorithm: token_bucket}
  - {name: burst-here, limit: 10, window: 1m, algorithm: token_bucket, scope: region}
`)
	args := func(region string, join ...string) []string {
		a := []string{"--listen=127.0.0.1:0", "--region=" + region, "--node-name=" + region + "-1", "--gossip-addr=127.0.0.1:0", "--rules=" + rulesFile}
		for _, j := range join {
			a = append(a, "--join="+j)
		}
		return a
	}
	eu, euDone, euLogs := start(t, ctx, args("eu"), env(nil))
	m := gossipRE.FindStringSubmatch(euLogs.String())
	if m == nil {
		t.Fatalf("eu's logs lack its gossip address:\n%s", euLogs)
	}
	if !strings.Contains(euLogs.String(), `rule 1 (burst): algorithm: token_bucket is region-local and scope is global`) {
		t.Errorf("eu's logs do not warn about rule burst:\n%s", euLogs)
	}
	const (
		tbGlobal  = `{"key":"carol","limit":{"limit":10,"window":"60s","algorithm":"ALGORITHM_TOKEN_BUCKET"}}`
		tbRegion  = `{"key":"carol","limit":{"limit":10,"window":"60s","algorithm":"ALGORITHM_TOKEN_BUCKET","scope":"SCOPE_REGION"}}`
		logGlobal = `{"key":"carol","limit":{"limit":10,"window":"60s","algorithm":"ALGORITHM_SLIDING_LOG","scope":"SCOPE_GLOBAL"}}`
	)
	check := func(base string) string { return base + "/ratelimit.v1.RateLimitService/Check" }
	if code, b := post(t, check(eu), tbGlobal); code != http.StatusOK || !strings.Contains(b, `"allowed":true`) || !strings.HasSuffix(b, `"scope":"SCOPE_GLOBAL"}`) {
		t.Errorf("eu alone: Check global token bucket = %d %s, want allowed with SCOPE_GLOBAL", code, b)
	}

	us, usDone, usLogs := start(t, ctx, args("us", m[1]), env(nil))
	ap, apDone, apLogs := start(t, ctx, args("ap", m[1]), env(nil))
	nodes := map[string]string{"eu": eu, "us": us, "ap": ap}
	for name, base := range nodes {
		polltest.Until(t, 15*time.Second, name+" sees three regions alive", func() bool {
			_, metrics := get(t, base+"/metrics")
			for other := range nodes {
				if other != name && !strings.Contains(metrics, `rlcluster_gossip_members{region="`+other+`",state="alive"} 1`) {
					return false
				}
			}
			return true
		})
	}

	for name, base := range nodes {
		for _, tc := range []struct{ body, want string }{
			{tbGlobal, `limit.scope: ALGORITHM_TOKEN_BUCKET is region-local and the scope is global, and this cluster has 3 regions`},
			{logGlobal, `limit.scope: ALGORITHM_SLIDING_LOG is region-local and the scope is global, and this cluster has 3 regions`},
			{`{"key":"carol","rule":"burst"}`, `rule: rule \"burst\": scope: token_bucket is region-local and the rule's scope is global, and this cluster has 3 regions`},
		} {
			if code, b := post(t, check(base), tc.body); code != http.StatusBadRequest || !strings.Contains(b, `"code":"invalid_argument"`) || !strings.Contains(b, tc.want) {
				t.Errorf("%s: Check %s = %d %s, want 400 invalid_argument with %q", name, tc.body, code, b, tc.want)
			}
		}
		for _, body := range []string{tbRegion, `{"key":"carol","rule":"burst-here"}`} {
			if code, b := post(t, check(base), body); code != http.StatusOK || !strings.Contains(b, `"allowed":true`) || !strings.HasSuffix(b, `"scope":"SCOPE_REGION"}`) {
				t.Errorf("%s: Check %s = %d %s, want allowed with SCOPE_REGION", name, body, code, b)
			}
		}
	}

	// Region-scoped sliding-window hits stay in eu; a global hit sent after
	// them reaches us, so theirs would have too had they been sent.
	const (
		swRegion = `{"key":"dave","limit":{"limit":10,"window":"3600s","scope":"SCOPE_REGION"}}`
		swGlobal = `{"key":"dave","limit":{"limit":10,"window":"3600s"}}`
	)
	for i := 0; i < 4; i++ {
		if code, b := post(t, check(eu), swRegion); code != http.StatusOK || !strings.Contains(b, `"allowed":true`) {
			t.Fatalf("eu: region-scoped Check %d = %d %s", i+1, code, b)
		}
	}
	if code, b := post(t, check(eu), swGlobal); code != http.StatusOK || !strings.Contains(b, `"current":"1"`) {
		t.Fatalf("eu: global Check = %d %s, want current 1 (apart from the region-scoped counter)", code, b)
	}
	polltest.Until(t, 15*time.Second, "us sees eu's global hit", func() bool {
		return peek(t, us, swGlobal).Response.Stats.Current == "1"
	})
	if p := peek(t, us, swRegion); p.Response.Stats.Current != "0" || len(p.Response.Stats.Regions) != 1 || (p.Response.Stats.Regions[0].Region != "us" && !strings.HasPrefix(p.Response.Stats.Regions[0].Region, "us~")) {
		t.Errorf("us: region-scoped Peek = %+v, want current 0 and us alone (us, or us~<node> on the in-memory store)", p.Response.Stats)
	}
	if p := peek(t, eu, swRegion); p.Response.Stats.Current != "4" {
		t.Errorf("eu: region-scoped Peek current = %s, want 4", p.Response.Stats.Current)
	}

	cancel()
	wait(t, euDone, euLogs)
	wait(t, usDone, usLogs)
	wait(t, apDone, apLogs)
}

// TestValidateWarnsRegionLocal: `rlnode validate` accepts a region-local
// algorithm with global scope, and warns on stderr where it is and what a
// cluster of several regions will do with it.
func TestValidateWarnsRegionLocal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeAtomic(t, path, "rules:\n  - name: burst\n    limit: 10\n    window: 1m\n    algorithm: token_bucket\n  - {name: here, limit: 1, window: 1s, algorithm: sliding_log, scope: region}\n")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"validate", "--rules", path}, env(nil), &out, &errOut); err != nil {
		t.Fatalf("validate = %v; stderr:\n%s", err, errOut.String())
	}
	if got, want := out.String(), path+": valid: 2 rules, 0 domains\n"; got != want {
		t.Errorf("validate printed %q, want %q", got, want)
	}
	want := "warning: " + path + ":5: rule 1 (burst): algorithm: token_bucket is region-local and scope is global: accepted while the cluster has one region, " +
		"refused (invalid_argument) while it has more; set scope: region for one limit per region, or use sliding_window or fixed_window for one global limit\n"
	if got := errOut.String(); got != want {
		t.Errorf("validate stderr:\n%s\nwant:\n%s", got, want)
	}
}
