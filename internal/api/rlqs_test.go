package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// quotaRules is a domain for the quota service's tests: 100 a minute per
// tenant, unlimited for tenant "free", none at all for tenant "blocked".
const quotaRules = `domain: quota
descriptors:
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 100
    descriptors:
      - key: path
        rate_limit:
          unit: minute
          requests_per_unit: 10
  - key: tenant
    value: free
    rate_limit:
      unlimited: true
  - key: tenant
    value: blocked
    rate_limit:
      unit: minute
      requests_per_unit: 0
`

// clock is a test's settable clock.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *clock) Now() time.Time            { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration)   { c.ns.Add(int64(d)) }
func (c *clock) Set(t time.Time)           { c.ns.Store(t.UnixNano()) }
func (c *clock) Since(t time.Time) float64 { return c.Now().Sub(t).Seconds() }

// quotaServer serves rules on a node whose clock c sets.
func quotaServer(t *testing.T, yaml string, c *clock, cfg api.Config) *testServer {
	t.Helper()
	rs, err := rules.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Rules, cfg.Now = rs, c.Now
	return newServer(t, cfg)
}

// quotaStream opens StreamRateLimitQuotas on s with go-control-plane's
// generated client over h2c, as Envoy's filter calls it.
func (s *testServer) quotaStream(t *testing.T, ctx context.Context) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(s.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// usage is one bucket's report.
func usage(elapsed time.Duration, allowed, denied uint64, kv ...string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	id := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		id[kv[i]] = kv[i+1]
	}
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqsv3.BucketId{Bucket: id},
		TimeElapsed:        durationpb.New(elapsed),
		NumRequestsAllowed: allowed,
		NumRequestsDenied:  denied,
	}
}

// exchange sends one report and returns the response to it.
func exchange(t *testing.T, st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, domain string, us ...*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) *rlqsv3.RateLimitQuotaResponse {
	t.Helper()
	if err := st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: us}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if len(resp.GetBucketAction()) != len(us) {
		t.Fatalf("%d bucket actions for %d usages: %v", len(resp.GetBucketAction()), len(us), resp)
	}
	return resp
}

// leaseTokens is the most tokens a token bucket assignment can hand out
// over its time to live: its full bucket and its fills.
func leaseTokens(t *testing.T, a *rlqsv3.RateLimitQuotaResponse_BucketAction) (tb *typev3.TokenBucket, ttl time.Duration) {
	t.Helper()
	qa := a.GetQuotaAssignmentAction()
	if qa == nil || qa.GetRateLimitStrategy().GetTokenBucket() == nil {
		t.Fatalf("want a token bucket assignment, got %v", a)
	}
	return qa.GetRateLimitStrategy().GetTokenBucket(), qa.GetAssignmentTimeToLive().AsDuration()
}

// peekEnvoy returns what ShouldRateLimit reports remaining of the
// descriptor's limit, looking only.
func peekEnvoy(t *testing.T, s *testServer, domain string, kv ...string) uint32 {
	t.Helper()
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(0)
	resp, err := s.rlsClient(t).ShouldRateLimit(context.Background(), rlsReq(domain, d))
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatuses()[0].GetLimitRemaining()
}

// TestQuotaLeaseCharged: a bucket's first report gets a token bucket
// sized to its demand, and every token the assignment can hand out over
// its time to live is counted, before it is sent, on the counter that
// ShouldRateLimit decides the same descriptor on. A report at the same
// demand extends the assignment (the same strategy) and counts the fills
// its new time to live adds; a report at another demand replaces it.
func TestQuotaLeaseCharged(t *testing.T) {
	c := newClock(t0)
	s := quotaServer(t, quotaRules, c, api.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := s.quotaStream(t, ctx)

	resp := exchange(t, st, "quota", usage(0, 1, 0, "tenant", "acme"))
	tb, ttl := leaseTokens(t, resp.GetBucketAction()[0])
	if got := resp.GetBucketAction()[0].GetBucketId().GetBucket()["tenant"]; got != "acme" {
		t.Errorf("bucket_id tenant = %q, want acme", got)
	}
	rate := float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
	if tb.GetMaxTokens() < 1 || rate <= 0 || ttl <= 0 {
		t.Fatalf("assignment %v, ttl %v", tb, ttl)
	}
	remaining := peekEnvoy(t, s, "quota", "tenant", "acme")
	charged := 100 - uint64(remaining)
	// The lease's tokens over its life, with the delivery allowance of
	// 100 ms: nothing it can hand out is left uncounted.
	if min := uint64(tb.GetMaxTokens()) + uint64(rate*ttl.Seconds()); charged < min {
		t.Errorf("charged %d hits for a lease that can hand out %d (%v, ttl %v)", charged, min, tb, ttl)
	}
	if charged > 30 {
		t.Errorf("charged %d hits for a demand of one request", charged)
	}

	// A second later, a measured demand of a request a second, and a
	// second after that the same: the same strategy, a longer life, its
	// new fills counted.
	c.Advance(time.Second)
	resp = exchange(t, st, "quota", usage(time.Second, 1, 0, "tenant", "acme"))
	tb, _ = leaseTokens(t, resp.GetBucketAction()[0])
	charged = 100 - uint64(peekEnvoy(t, s, "quota", "tenant", "acme"))
	extends := s.metric(t, "rlcluster_rlqs_assignments_total", "action", "extend")
	c.Advance(time.Second)
	resp = exchange(t, st, "quota", usage(time.Second, 1, 0, "tenant", "acme"))
	tb2, _ := leaseTokens(t, resp.GetBucketAction()[0])
	if tb2.String() != tb.String() {
		t.Errorf("same demand: strategy %v, want %v unchanged (an extension)", tb2, tb)
	}
	charged2 := 100 - uint64(peekEnvoy(t, s, "quota", "tenant", "acme"))
	if charged2 <= charged {
		t.Errorf("extension counted nothing: %d then %d", charged, charged2)
	}
	if got := s.metric(t, "rlcluster_rlqs_assignments_total", "action", "extend"); got != extends+1 {
		t.Errorf("extend assignments = %v, want %v", got, extends+1)
	}

	// The status page counts the stream and its bucket.
	_, body := apitest.Get(t, s.URL+"/status.json", nil)
	var status struct {
		Leases struct{ Streams, Buckets int64 }
	}
	if err := json.Unmarshal([]byte(body), &status); err != nil {
		t.Fatal(err)
	}
	if status.Leases.Streams != 1 || status.Leases.Buckets != 1 {
		t.Errorf("status.json leases = %+v, want 1 stream and 1 bucket", status.Leases)
	}

	// Demand of 30 a second: at most the limit's rate, 100 a minute.
	c.Advance(time.Second)
	resp = exchange(t, st, "quota", usage(time.Second, 2, 28, "tenant", "acme"))
	tb3, _ := leaseTokens(t, resp.GetBucketAction()[0])
	if r := float64(tb3.GetTokensPerFill().GetValue()) / tb3.GetFillInterval().AsDuration().Seconds(); r > 100.0/60 {
		t.Errorf("demand of 30/s: %v, %.2f a second, want at most the limit's 1.67", tb3, r)
	}
	// No demand for ten seconds: a smaller lease replaces it.
	for range 10 {
		c.Advance(time.Second)
		resp = exchange(t, st, "quota", usage(time.Second, 0, 0, "tenant", "acme"))
	}
	if tb4, _ := leaseTokens(t, resp.GetBucketAction()[0]); tb4.String() == tb3.String() {
		t.Errorf("no demand: %v, want a smaller token bucket than %v", tb4, tb3)
	}
}

// TestQuotaNeverPastLimit: streams that ask for more than the limit
// between them are charged at most the limit in a window; once it is
// spent, they are told to deny all until their next report, and
// ShouldRateLimit on the same descriptor is denied too.
func TestQuotaNeverPastLimit(t *testing.T) {
	c := newClock(t0)
	s := quotaServer(t, quotaRules, c, api.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	for range 5 {
		streams = append(streams, s.quotaStream(t, ctx))
	}
	for round := range 20 {
		for _, st := range streams {
			// Each asks for 50 a second, far past 10 a minute.
			exchange(t, st, "quota", usage(time.Second, 0, 50, "tenant", "acme", "path", "/x"))
		}
		if round < 19 {
			c.Advance(100 * time.Millisecond)
		}
	}
	// 10 a minute for tenant acme, path /x: the leases hold all of it.
	if remaining := peekEnvoy(t, s, "quota", "tenant", "acme", "path", "/x"); remaining != 0 {
		t.Errorf("remaining %d after 20 rounds of 5 streams at 50/s, want the limit spent", remaining)
	}
	late := s.quotaStream(t, ctx)
	a := exchange(t, late, "quota", usage(0, 0, 1, "tenant", "acme", "path", "/x")).GetBucketAction()[0]
	if got := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); got != typev3.RateLimitStrategy_DENY_ALL {
		t.Errorf("a stream that asks once the leases hold the limit: %v, want deny all", a)
	}
	resp, err := s.rlsClient(t).ShouldRateLimit(ctx, rlsReq("quota", desc("tenant", "acme", "path", "/x")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("ShouldRateLimit after the leases spent the limit: %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	if charged := s.metric(t, "rlcluster_rlqs_charged_hits_total"); charged > 10 {
		t.Errorf("charged %v hits of a limit of 10 a minute within one window", charged)
	}
}

// TestQuotaBlanketAndAbandon: an unlimited limit is allow-all, a limit of
// 0 deny-all, a bucket no limit matches (or of an unknown domain) is
// abandoned, and none of them is charged.
func TestQuotaBlanketAndAbandon(t *testing.T) {
	c := newClock(t0)
	s := quotaServer(t, quotaRules, c, api.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := s.quotaStream(t, ctx)
	resp := exchange(t, st, "quota",
		usage(0, 5, 0, "tenant", "free"),
		usage(0, 5, 0, "tenant", "blocked"),
		usage(0, 5, 0, "region", "eu"))
	acts := resp.GetBucketAction()
	if got := acts[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); got != typev3.RateLimitStrategy_ALLOW_ALL || acts[0].GetQuotaAssignmentAction().GetAssignmentTimeToLive() == nil {
		t.Errorf("unlimited: %v, want allow all with a time to live", acts[0])
	}
	if got := acts[1].GetQuotaAssignmentAction().GetRateLimitStrategy(); got.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL || got.GetTokenBucket() != nil {
		t.Errorf("limit 0: %v, want deny all", acts[1])
	}
	if acts[2].GetAbandonAction() == nil {
		t.Errorf("no limit: %v, want abandon", acts[2])
	}
	other := s.quotaStream(t, ctx)
	if a := exchange(t, other, "nosuchdomain", usage(0, 1, 0, "tenant", "acme")).GetBucketAction()[0]; a.GetAbandonAction() == nil {
		t.Errorf("unknown domain: %v, want abandon", a)
	}
	if charged := s.metric(t, "rlcluster_rlqs_charged_hits_total"); charged != 0 {
		t.Errorf("charged %v hits for blanket and abandoned buckets", charged)
	}
}

// TestQuotaNativeRule: outside a configured domain, a bucket of exactly
// "rule" and "key" leases the native rule's key, on the same counter as
// Check's, when the rule is leasable.
func TestQuotaNativeRule(t *testing.T) {
	c := newClock(t0)
	s := quotaServer(t, "rules:\n  - name: login\n    limit: 50\n    window: 1m\n    leasable: true\n  - name: fixed\n    limit: 50\n    window: 1m\n", c, api.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := s.quotaStream(t, ctx)
	tb, _ := leaseTokens(t, exchange(t, st, "app", usage(0, 1, 0, "rule", "login", "key", "alice")).GetBucketAction()[0])
	cl := s.client(t, false)
	resp, err := cl.Check(ctx, connect.NewRequest(&ratelimitv1.CheckRequest{Rule: "login", Key: "alice", Hits: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetRemaining(); got >= 49 {
		t.Errorf("Check after a lease of %v: remaining %d, want the lease counted", tb, got)
	}
	if a := exchange(t, st, "", usage(0, 1, 0, "rule", "nosuch", "key", "alice")).GetBucketAction()[0]; a.GetAbandonAction() == nil {
		t.Errorf("unknown rule: %v, want abandon", a)
	}
	if a := exchange(t, st, "", usage(0, 1, 0, "rule", "fixed", "key", "alice")).GetBucketAction()[0]; a.GetAbandonAction() == nil {
		t.Errorf("a rule that is not leasable: %v, want abandon", a)
	}
}

// TestQuotaRefusesBadReports: a report the service cannot take ends the
// stream with invalid_argument naming the field, and other streams go on.
func TestQuotaRefusesBadReports(t *testing.T) {
	c := newClock(t0)
	s := quotaServer(t, quotaRules, c, api.Config{RLQSMaxBuckets: 3})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	many := map[string]string{}
	for i := range 65 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	tooMany := make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, 4)
	for i := range tooMany {
		tooMany[i] = usage(0, 1, 0, "tenant", strings.Repeat("t", i+1))
	}
	for _, tc := range []struct {
		name string
		msgs []*rlqsv3.RateLimitQuotaUsageReports
		want string
	}{
		{"no domain", []*rlqsv3.RateLimitQuotaUsageReports{{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(0, 1, 0, "tenant", "a")}}}, "domain: required"},
		{"domain changed", []*rlqsv3.RateLimitQuotaUsageReports{
			{Domain: "quota", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(0, 1, 0, "tenant", "a")}},
			{Domain: "other", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(0, 1, 0, "tenant", "a")}},
		}, "domain: a stream keeps"},
		{"empty bucket id", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(0, 1, 0)}}}, "bucket_quota_usages[0].bucket_id.bucket: at least one entry"},
		{"too many entries", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: &rlqsv3.BucketId{Bucket: many}}}}}, "more than the maximum of 64 entries"},
		{"negative elapsed", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "a"}}, TimeElapsed: durationpb.New(-time.Second)}}}}, "time_elapsed: must be from 0"},
		{"too many usages", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "quota", BucketQuotaUsages: tooMany}}, "more than the maximum of 3 buckets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := s.quotaStream(t, ctx)
			var err error
			for _, m := range tc.msgs {
				if err = st.Send(m); err != nil {
					break
				}
				if _, err = st.Recv(); err != nil {
					break
				}
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Errorf("err = %v, want invalid_argument containing %q", err, tc.want)
			}
		})
	}
	// A fourth bucket on a stream that holds three is abandoned; the
	// stream goes on.
	st := s.quotaStream(t, ctx)
	for i := range 3 {
		exchange(t, st, "quota", usage(0, 1, 0, "tenant", strings.Repeat("u", i+1)))
	}
	if a := exchange(t, st, "quota", usage(0, 1, 0, "tenant", "fourth")).GetBucketAction()[0]; a.GetAbandonAction() == nil {
		t.Errorf("a bucket past the stream's maximum: %v, want abandon", a)
	}
	if a := exchange(t, st, "quota", usage(time.Second, 1, 0, "tenant", "u")).GetBucketAction()[0]; a.GetQuotaAssignmentAction() == nil {
		t.Errorf("a held bucket after the refusal: %v, want an assignment", a)
	}
}

// metric returns the value of the server's counter or gauge name whose
// labels include the label, value pairs; 0 when it has none.
func (s *testServer) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if l[labels[i]] != labels[i+1] {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestLeaseRPC: ratelimit.v1's Lease over Connect (bidirectional, so
// HTTP/2): a leasable rule's key gets a token bucket grant with a time to
// live, a rule that is not leasable (or unknown) is abandoned, and a
// usage without a key ends the stream with invalid_argument.
func TestLeaseRPC(t *testing.T) {
	c := newClock(t0)
	s := quotaServer(t, "rules:\n  - name: login\n    limit: 50\n    window: 1m\n    leasable: true\n  - name: fixed\n    limit: 50\n    window: 1m\n", c, api.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, p := range protocols {
		if !p.h2c {
			continue // a bidirectional stream needs HTTP/2
		}
		st := s.client(t, true, p.opts...).Lease(ctx)
		if err := st.Send(&ratelimitv1.LeaseRequest{Usages: []*ratelimitv1.LeaseUsage{
			{Rule: "login", Key: "alice", Allowed: 1},
			{Rule: "fixed", Key: "alice", Allowed: 1},
			{Rule: "nosuch", Key: "alice"},
		}}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Receive()
		if err != nil {
			t.Fatal(err)
		}
		g := resp.GetGrants()
		if len(g) != 3 || g[0].GetRule() != "login" || g[0].GetKey() != "alice" || g[0].GetTokenBucket().GetTokensPerFill() == 0 || g[0].GetTtl().AsDuration() <= 0 {
			t.Fatalf("grants %v, want a token bucket for login/alice first", g)
		}
		if !g[1].GetAbandon() || !g[2].GetAbandon() {
			t.Errorf("a rule not leasable and an unknown one: %v, %v, want abandon", g[1], g[2])
		}
		if err := st.Send(&ratelimitv1.LeaseRequest{Usages: []*ratelimitv1.LeaseUsage{{Rule: "login"}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Receive(); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "usages[0]: rule and key are required") {
			t.Errorf("a usage without a key: %v, want invalid_argument naming it", err)
		}
	}
}
