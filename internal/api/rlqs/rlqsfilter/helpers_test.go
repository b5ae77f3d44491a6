package rlqsfilter

import (
	"fmt"
	"slices"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// noTTL is an assignment without assignment_time_to_live.
const noTTL = time.Duration(-1 << 63)

func mustNew(t testing.TB, cfg Config) *Filter {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return f
}

func assign(id map[string]string, s Strategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	qa := &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{RateLimitStrategy: s.Proto()}
	if ttl != noTTL {
		qa.AssignmentTimeToLive = durationpb.New(ttl)
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId:     &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: qa},
	}
}

func abandon(id map[string]string) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

func response(actions ...*rlqsv3.RateLimitQuotaResponse_BucketAction) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: actions}
}

// use is one bucket_quota_usages entry, in a form tests compare with ==.
type use struct {
	id              string
	elapsed         time.Duration
	allowed, denied uint64
}

func (u use) String() string {
	return fmt.Sprintf("{%s el=%v a=%d d=%d}", u.id, u.elapsed, u.allowed, u.denied)
}

func uses(m *rlqsv3.RateLimitQuotaUsageReports) []use {
	var out []use
	for _, u := range m.GetBucketQuotaUsages() {
		out = append(out, use{
			id:      canonicalKey(u.GetBucketId().GetBucket()),
			elapsed: u.GetTimeElapsed().AsDuration(),
			allowed: u.GetNumRequestsAllowed(),
			denied:  u.GetNumRequestsDenied(),
		})
	}
	return out
}

// checkReport fails unless m has the domain and exactly the usages want.
func checkReport(t testing.TB, m *rlqsv3.RateLimitQuotaUsageReports, domain string, want ...use) {
	t.Helper()
	if m.GetDomain() != domain {
		t.Errorf("report domain = %q, want %q", m.GetDomain(), domain)
	}
	if got := uses(m); !slices.Equal(got, want) {
		t.Errorf("report usages = %v, want %v", got, want)
	}
}

func u(id map[string]string, elapsed time.Duration, allowed, denied uint64) use {
	return use{id: canonicalKey(id), elapsed: elapsed, allowed: allowed, denied: denied}
}

func state(t testing.TB, f *Filter, id map[string]string) BucketState {
	t.Helper()
	st, ok := f.State(id)
	if !ok {
		t.Fatalf("State(%v): bucket not tracked", id)
	}
	return st
}

func allowN(f *Filter, id map[string]string, n int) (allowed int) {
	for range n {
		if f.Allow(id) {
			allowed++
		}
	}
	return allowed
}
