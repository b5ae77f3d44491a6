package api_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// TestCalendarLimits: a rule of 3 per UTC month and an inline limit of 2
// per month in New York, decided through the API over every protocol at
// the end of a leap February: reset_after and retry_after are the time
// until the month ends (in UTC for the rule, in New York for the inline
// limit), stats.bucket is the month's start, and March starts afresh in
// each zone at its own midnight. The forward-auth endpoint's draft-11
// headers give the same reset instant.
func TestCalendarLimits(t *testing.T) {
	rs, err := rules.Parse([]byte("rules:\n  - name: monthly\n    limit: 3\n    calendar: month\n"))
	if err != nil {
		t.Fatal(err)
	}
	feb29 := time.Date(2024, 2, 29, 22, 0, 0, 0, time.UTC)
	marchUTC := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	marchNY := time.Date(2024, 3, 1, 5, 0, 0, 0, time.UTC) // midnight EST
	nyLimit := &ratelimitv1.Limit{Limit: 2, Calendar: ratelimitv1.Calendar_CALENDAR_MONTH, TimeZone: "America/New_York"}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var now atomic.Int64
			now.Store(feb29.UnixMilli())
			s := newServer(t, api.Config{Rules: rs, Now: func() time.Time { return time.UnixMilli(now.Load()) }})
			c := s.client(t, p.h2c, p.opts...)
			check := func(req *ratelimitv1.CheckRequest) *ratelimitv1.CheckResponse {
				t.Helper()
				resp, err := c.Check(context.Background(), connect.NewRequest(req))
				if err != nil {
					t.Fatalf("Check(%v): %v", req, err)
				}
				return resp.Msg
			}
			for i := range 4 {
				r := check(&ratelimitv1.CheckRequest{Key: "alice", Rule: "monthly"})
				if got, want := r.GetAllowed(), i < 3; got != want {
					t.Fatalf("rule hit %d: allowed %v, want %v", i+1, got, want)
				}
				if got, want := r.GetResetAfter().AsDuration(), marchUTC.Sub(feb29); got != want {
					t.Errorf("rule hit %d: reset_after %v, want %v (to March 1 UTC)", i+1, got, want)
				}
				if got, want := r.GetStats().GetBucket(), time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC).UnixMilli(); got != want {
					t.Errorf("rule hit %d: stats.bucket %d, want February's start %d", i+1, got, want)
				}
				if st := r.GetStats(); st.GetWhole() != st.GetEstimate() || st.GetEstimate() != uint64(min(i, 3)) || len(st.GetTerms()) != 0 {
					t.Errorf("rule hit %d: stats whole %d estimate %d terms %v, want the count before it, %d, whole", i+1, st.GetWhole(), st.GetEstimate(), st.GetTerms(), min(i, 3))
				}
				if i == 3 && r.GetRetryAfter().AsDuration() != 2*time.Hour {
					t.Errorf("denied rule hit: retry_after %v, want 2h", r.GetRetryAfter().AsDuration())
				}
			}
			for i := range 3 {
				r := check(&ratelimitv1.CheckRequest{Key: "bob", Limit: nyLimit})
				if got, want := r.GetAllowed(), i < 2; got != want {
					t.Fatalf("inline hit %d: allowed %v, want %v", i+1, got, want)
				}
				if got, want := r.GetResetAfter().AsDuration(), marchNY.Sub(feb29); got != want {
					t.Errorf("inline hit %d: reset_after %v, want %v (to March 1 in New York)", i+1, got, want)
				}
			}
			// March 1 in UTC is still February in New York.
			now.Store(marchUTC.UnixMilli())
			if r := check(&ratelimitv1.CheckRequest{Key: "alice", Rule: "monthly"}); !r.GetAllowed() || r.GetRemaining() != 2 {
				t.Errorf("rule in March: allowed %v remaining %d, want true 2", r.GetAllowed(), r.GetRemaining())
			}
			if r := check(&ratelimitv1.CheckRequest{Key: "bob", Limit: nyLimit}); r.GetAllowed() || r.GetRetryAfter().AsDuration() != 5*time.Hour {
				t.Errorf("inline at 00:00 UTC: allowed %v retry_after %v, want false 5h", r.GetAllowed(), r.GetRetryAfter().AsDuration())
			}
			now.Store(marchNY.UnixMilli())
			if r := check(&ratelimitv1.CheckRequest{Key: "bob", Limit: nyLimit}); !r.GetAllowed() {
				t.Errorf("inline at midnight in New York: denied, want a new month")
			}
		})
	}
}

// TestCalendarLimitsInvalid: what cannot be a calendar limit is
// invalid_argument, naming the field.
func TestCalendarLimitsInvalid(t *testing.T) {
	s := newServer(t, api.Config{})
	c := s.client(t, false, connect.WithProtoJSON())
	month := ratelimitv1.Calendar_CALENDAR_MONTH
	for _, tc := range []struct {
		name string
		lim  *ratelimitv1.Limit
		want string
	}{
		{"window too", &ratelimitv1.Limit{Limit: 1, Calendar: month, Window: durationpb.New(time.Hour)}, "limit.window: must be unset with a calendar"},
		{"sliding", &ratelimitv1.Limit{Limit: 1, Calendar: month, Algorithm: ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW}, "limit.algorithm: a calendar limit is counted as ALGORITHM_FIXED_WINDOW"},
		{"unknown zone", &ratelimitv1.Limit{Limit: 1, Calendar: month, TimeZone: "Mars/Base"}, `limit.time_zone: "Mars/Base" is not an IANA time zone such as UTC or Europe/Berlin`},
		{"host zone", &ratelimitv1.Limit{Limit: 1, Calendar: month, TimeZone: "Local"}, `limit.time_zone: "Local" is not an IANA time zone such as UTC or Europe/Berlin`},
		{"zone alone", &ratelimitv1.Limit{Limit: 1, Window: durationpb.New(time.Hour), TimeZone: "UTC"}, "limit.time_zone: applies to a calendar limit only (set calendar)"},
		{"unknown unit", &ratelimitv1.Limit{Limit: 1, Calendar: 9}, "limit.calendar: unknown calendar 9"},
	} {
		_, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: "k", Limit: tc.lim}))
		checkInvalid(t, tc.name, err, tc.want)
	}
}

// TestCalendarHeaders: the forward-auth endpoint's draft-11 headers for a
// monthly rule at the end of a leap February: w is the month's length,
// t and Retry-After the time until March 1.
func TestCalendarHeaders(t *testing.T) {
	rs, err := rules.Parse([]byte("rules:\n  - name: monthly\n    limit: 1\n    calendar: month\n"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2024, 2, 29, 22, 0, 0, 0, time.UTC)
	s := newServer(t, api.Config{Rules: rs, Now: func() time.Time { return at }})
	xff := map[string]string{"X-Forwarded-For": "203.0.113.7"}
	status, h, _ := fwdAuth(t, s.URL+"/check/monthly", xff)
	if status != 200 {
		t.Fatalf("first: status %d, want 200", status)
	}
	wantHeaders(t, "first", h, map[string]string{"RateLimit-Policy": `"monthly";q=1;w=2505600`, "RateLimit": `"monthly";r=0;t=7200`, "Retry-After": ""})
	status, h, _ = fwdAuth(t, s.URL+"/check/monthly", xff)
	if status != 429 {
		t.Fatalf("second: status %d, want 429", status)
	}
	wantHeaders(t, "second", h, map[string]string{"RateLimit": `"monthly";r=0;t=7200`, "Retry-After": "7200"})
}

// TestCalendarEnvoy: an envoyproxy/ratelimit domain with units month and
// year loads unchanged and decides through Envoy's RLS over gRPC: calendar
// months and years in UTC, duration_until_reset the time until the
// bucket ends, also for a request no bucket can admit.
func TestCalendarEnvoy(t *testing.T) {
	rs, err := rules.Parse([]byte(`domain: saas
descriptors:
  - key: plan
    value: free
    rate_limit:
      unit: month
      requests_per_unit: 2
  - key: plan
    value: pro
    rate_limit:
      unit: year
      requests_per_unit: 1000
`))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2024, 2, 29, 22, 0, 0, 0, time.UTC)
	s := newServer(t, api.Config{Rules: rs, Now: func() time.Time { return at }})
	c := s.rlsClient(t)
	const month, year = rlsv3.RateLimitResponse_RateLimit_MONTH, rlsv3.RateLimitResponse_RateLimit_YEAR
	untilMarch, until2025 := 2*time.Hour, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Sub(at)
	reset := func(r *rlsv3.RateLimitResponse) time.Duration {
		return r.GetStatuses()[0].GetDurationUntilReset().AsDuration()
	}
	free := rlsReq("saas", desc("plan", "free"))
	for i := range 2 {
		if r := call(t, c, free, ok, st{ok, 2, month, uint32(1 - i)}); reset(r) != untilMarch {
			t.Errorf("free hit %d: duration_until_reset %v, want %v", i+1, reset(r), untilMarch)
		}
	}
	if r := call(t, c, free, over, st{over, 2, month, 0}); reset(r) != untilMarch {
		t.Errorf("free over the limit: duration_until_reset %v, want %v", reset(r), untilMarch)
	}
	pro := rlsReq("saas", desc("plan", "pro"))
	if r := call(t, c, pro, ok, st{ok, 1000, year, 999}); reset(r) != until2025 {
		t.Errorf("pro: duration_until_reset %v, want %v", reset(r), until2025)
	}
	// A request's override of unit MONTH is a calendar month too, counted
	// with the free plan's 2 hits of February.
	override := desc("plan", "free")
	override.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MONTH}
	if r := call(t, c, rlsReq("saas", override), ok, st{ok, 5, month, 2}); reset(r) != untilMarch {
		t.Errorf("month override: duration_until_reset %v, want %v", reset(r), untilMarch)
	}
	pro.HitsAddend = 1001 // more than a year's limit: refused without the store
	if r := call(t, c, pro, over, st{over, 1000, year, 0}); reset(r) != until2025 {
		t.Errorf("pro, 1001 hits: duration_until_reset %v, want %v", reset(r), until2025)
	}
}
