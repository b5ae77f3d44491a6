package rules_test

import (
	"strings"
	"testing"

	"github.com/rlcluster/rlcluster/internal/api/rules"
)

func TestMatchWildcard(t *testing.T) {
	for _, tc := range []struct {
		pattern, value string
		want           bool
	}{
		{"files/*", "files/a", true},
		{"files/*", "files/", true},
		{"files/*", "file", false},
		{"/api*v1", "/api/users/v1", true},
		{"/api*v1", "/apiv1", true},
		{"/api*v1", "/api/users/v2", false},
		{"/api*v1", "/av1", false},
		{"svc*ep*rpc", "svc-a-ep-b-rpc", true},
		{"svc*ep*rpc", "svcrpc", false},
		{"svc*ep*rpc", "svcep-rpc", true},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"*", "", true},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	} {
		if got := rules.MatchWildcard(tc.pattern, tc.value); got != tc.want {
			t.Errorf("MatchWildcard(%q, %q) = %v, want %v", tc.pattern, tc.value, got, tc.want)
		}
	}
}

// loadDomain loads one of envoyproxy/ratelimit's test configurations,
// unchanged, and returns its one domain.
func loadDomain(t *testing.T, file, domain string) *rules.Domain {
	t.Helper()
	rs, err := rules.Load("../testdata/envoyproxy-tests/" + file)
	if err != nil {
		t.Fatalf("Load(%s): %v", file, err)
	}
	d := rs.Domain(domain)
	if d == nil {
		t.Fatalf("Load(%s): no domain %q", file, domain)
	}
	return d
}

func entries(kv ...string) []rules.Entry {
	var es []rules.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, rules.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// TestShareThreshold loads envoyproxy/ratelimit's share_threshold test
// configuration unchanged: a wildcard with share_threshold rewrites the
// entry it matched to the wildcard, so that every matching value counts
// under one key; an exact value still wins over a wildcard; a wildcard
// without it leaves the value as sent.
func TestShareThreshold(t *testing.T) {
	d := loadDomain(t, "share_threshold.yaml", "test-domain")
	for _, tc := range []struct {
		name    string
		in      []rules.Entry
		perUnit uint64 // 0: no limit
		want    string // the entries after Match, "key=value" with "*=" for a shared one
	}{
		{"top-level wildcard", entries("files", "files/a.txt"), 100, "files*=files/*"},
		{"nested under an exact value", entries("nested", "parent", "files", "nested/x"), 200, "nested=parent files*=nested/*"},
		{"same key at two levels", entries("files", "top/1", "files", "nested/2"), 300, "files*=top/* files*=nested/*"},
		{"shared parent, value-less child", entries("route", "api/v1", "method", "GET"), 60, "route*=api/* method=GET"},
		{"mixed: shared then not shared", entries("path", "path/a", "file", "file/b", "type", "pdf"), 120, "path*=path/* file=file/b type=pdf"},
		{"both shared", entries("user", "user/1", "resource", "res/2", "action", "read"), 150, "user*=user/* resource*=res/* action=read"},
		{"exact value wins", entries("file", "test1"), 50, "file=test1"},
		{"wildcard after the exact value", entries("file", "test2"), 100, "file*=test*"},
		{"middle wildcard", entries("midpath", "/api/users/v1"), 100, "midpath*=/api*v1"},
		{"middle wildcard, no match", entries("midpath", "/api/users/v2"), 0, "midpath=/api/users/v2"},
		{"several wildcards", entries("multiroute", "svc-a-ep-b-rpc"), 50, "multiroute*=svc*ep*rpc"},
		{"nested middle wildcards", entries("tenant", "t1prod", "resource", "res-a-v2"), 60, "tenant*=t*prod resource*=res*v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := d.Match(tc.in)
			var got uint64
			if lim != nil {
				got = lim.Limit.Limit
			}
			if got != tc.perUnit {
				t.Errorf("Match: requests_per_unit %d, want %d", got, tc.perUnit)
			}
			parts := make([]string, len(tc.in))
			for i, e := range tc.in {
				sep := "="
				if e.Shared {
					sep = "*="
				}
				parts[i] = e.Key + sep + e.Value
			}
			if got := strings.Join(parts, " "); got != tc.want {
				t.Errorf("entries after Match = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestQuotaModeAndMetadataLoad loads envoyproxy/ratelimit's quota and
// metadata configurations unchanged and checks what they set.
func TestQuotaModeAndMetadataLoad(t *testing.T) {
	q := loadDomain(t, "quota.yaml", "quota")
	for _, v := range []string{"service_1", "service_2"} {
		if lim := q.Match(entries("service", v)); lim == nil || !lim.QuotaMode || lim.Metadata != nil {
			t.Errorf("Match(service=%s) = %+v, want a quota_mode limit without metadata", v, lim)
		}
	}
	m := loadDomain(t, "metadata.yaml", "test-domain")
	lim := m.Match(entries("key1", "value1", "subkey1", "other"))
	if lim == nil || lim.Metadata.GetFields()["name"].GetStringValue() != "service_1" || lim.QuotaMode {
		t.Errorf("Match(key1=value1, subkey1=other) = %+v, want metadata name service_1", lim)
	}
	if lim := m.Match(entries("key1", "value1", "subkey1", "subvalue1")); lim == nil || lim.Metadata != nil || lim.Limit.Limit != 10 {
		t.Errorf("Match(key1=value1, subkey1=subvalue1) = %+v, want 10 per second without metadata", lim)
	}
	lim = m.Match(entries("key2", "x"))
	if got := lim.Metadata.GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue(); got != "service_2" {
		t.Errorf("Match(key2=x): metadata service_with_quota.name = %q, want service_2", got)
	}
}

func TestEnvoyFeatureErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"share_threshold without a wildcard",
			"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`line 5: domain "d": descriptors[0].share_threshold: applies to a wildcard value (one holding a '*'), not "v"`},
		{"metadata not a mapping",
			"domain: d\ndescriptors:\n  - key: k\n    metadata: [a, b]\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`line 4: domain "d": descriptors[0].metadata: must be a mapping`},
		{"quota_mode not a boolean",
			"domain: d\ndescriptors:\n  - key: k\n    quota_mode: maybe\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`line 4: domain "d": descriptors[0].quota_mode: must be true or false, got "maybe"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rules.Parse([]byte(tc.yaml)); err == nil || err.Error() != tc.want {
				t.Errorf("Parse error = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestBurst: burst sets a token bucket's capacity in both formats, and is
// refused with any other algorithm or above 1000 times the limit.
func TestBurst(t *testing.T) {
	rs, err := rules.Parse([]byte("rules:\n  - name: api\n    limit: 5\n    window: 1s\n    algorithm: token_bucket\n    burst: 20\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := rs.Lookup("api"); r.Limit.Burst != 20 || r.Limit.Capacity() != 20 {
		t.Errorf("native rule: Burst %d Capacity %d, want 20 20", r.Limit.Burst, r.Limit.Capacity())
	}
	rs, err = rules.Parse([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 20}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if lim := rs.Domain("d").Match(entries("k", "v")); lim == nil || lim.Limit.Burst != 20 {
		t.Errorf("envoy limit: %+v, want burst 20", lim)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"native, not a token bucket", "rules:\n  - name: a\n    limit: 5\n    window: 1s\n    burst: 20\n",
			"line 5: rule 1 (a): burst: applies to token_bucket only, not sliding_window"},
		{"native, too large", "rules:\n  - name: a\n    limit: 5\n    window: 1s\n    algorithm: token_bucket\n    burst: 5001\n",
			"line 6: rule 1 (a): burst: must be at most 1000 times the limit (5), got 5001"},
		{"native, zero", "rules:\n  - name: a\n    limit: 5\n    window: 1s\n    algorithm: token_bucket\n    burst: 0\n",
			"line 6: rule 1 (a): burst: must be from 1 to 2^53, got 0"},
		{"envoy, not a token bucket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      burst: 20\n",
			`line 7: domain "d": descriptors[0].rate_limit.burst: applies to token_bucket only, not sliding_window`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rules.Parse([]byte(tc.yaml)); err == nil || err.Error() != tc.want {
				t.Errorf("Parse error = %v, want %q", err, tc.want)
			}
		})
	}
}
