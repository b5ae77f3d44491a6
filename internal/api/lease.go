package api

import (
	"context"

	"connectrpc.com/connect"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/decision"
)

// Lease implements ratelimit.v1.RateLimitService/Lease over Connect: the
// rate limit quota service's leases for native rules' keys (see
// [Server.LeaseStream]).
func (s *Server) Lease(ctx context.Context, st *connect.BidiStream[ratelimitv1.LeaseRequest, ratelimitv1.LeaseResponse]) error {
	return s.LeaseStream(ctx, st.Receive, st.Send)
}

// LeaseStream serves one Lease call, for every transport: each report's
// usages become the rate limit quota service's buckets of the entries
// "rule" and "key" ([rlqs.Service.StreamRules]), and its actions the
// grants. A usage without a rule or a key is invalid_argument, naming it.
func (s *Server) LeaseStream(ctx context.Context, recv func() (*ratelimitv1.LeaseRequest, error), send func(*ratelimitv1.LeaseResponse) error) error {
	return s.rlqs.StreamRules(ctx, func() (*rlqsv3.RateLimitQuotaUsageReports, error) {
		m, err := recv()
		if err != nil {
			return nil, err
		}
		out := &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, len(m.GetUsages()))}
		for i, u := range m.GetUsages() {
			if u.GetRule() == "" || u.GetKey() == "" {
				return nil, decision.Invalid("usages[%d]: rule and key are required", i)
			}
			out.BucketQuotaUsages[i] = &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"rule": u.GetRule(), "key": u.GetKey()}},
				TimeElapsed:        u.GetElapsed(),
				NumRequestsAllowed: u.GetAllowed(),
				NumRequestsDenied:  u.GetDenied(),
			}
		}
		return out, nil
	}, func(r *rlqsv3.RateLimitQuotaResponse) error {
		out := &ratelimitv1.LeaseResponse{Grants: make([]*ratelimitv1.LeaseGrant, len(r.GetBucketAction()))}
		for i, a := range r.GetBucketAction() {
			id := a.GetBucketId().GetBucket()
			g := &ratelimitv1.LeaseGrant{Rule: id["rule"], Key: id["key"]}
			qa := a.GetQuotaAssignmentAction()
			switch strat := qa.GetRateLimitStrategy(); {
			case a.GetAbandonAction() != nil, qa == nil:
				g.Action = &ratelimitv1.LeaseGrant_Abandon{Abandon: true}
			case strat.GetTokenBucket() != nil:
				tb := strat.GetTokenBucket()
				g.Action = &ratelimitv1.LeaseGrant_TokenBucket{TokenBucket: &ratelimitv1.LeaseTokenBucket{
					MaxTokens: tb.GetMaxTokens(), TokensPerFill: tb.GetTokensPerFill().GetValue(), FillInterval: tb.GetFillInterval(),
				}}
			case strat.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
				g.Action = &ratelimitv1.LeaseGrant_DenyAll{DenyAll: true}
			default:
				// Allow-all is for an Envoy domain's unlimited limit, which
				// native rules do not have: decide it with Check.
				g.Action = &ratelimitv1.LeaseGrant_Abandon{Abandon: true}
			}
			if ttl := qa.GetAssignmentTimeToLive(); ttl != nil {
				g.Ttl = durationpb.New(ttl.AsDuration())
			}
			out.Grants[i] = g
		}
		return send(out)
	})
}
