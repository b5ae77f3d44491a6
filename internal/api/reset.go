package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/decision"
)

// newResetMetrics registers rlcluster_resets_total.
func newResetMetrics(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlcluster_resets_total",
		Help: "Reset calls, by rule (a rule name, \"inline\" or \"unknown\") and result (ok, denied: no admin scope, invalid, error).",
	}, []string{"rule", "result"})
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return c, nil
}

// Reset implements ratelimitv1connect.RateLimitServiceHandler: it records
// a reset of the key's counters under the rule or in the inline namespace
// (see [decision.Decider.Reset]), logs who asked and for which key, and
// counts the call. With Config.RequireAdmin only a token with the admin
// scope may call it.
func (s *Server) Reset(ctx context.Context, r *connect.Request[ratelimitv1.ResetRequest]) (*connect.Response[ratelimitv1.ResetResponse], error) {
	defer s.dec.Observe("Reset", time.Now())
	m := r.Msg
	label := decision.LabelInline
	if m.GetRule() != "" {
		label = s.dec.Label(m.GetRule())
	}
	sc := auth.FromContext(ctx)
	who := "anonymous"
	if sc != nil && sc.ID != "" {
		who = sc.ID
	}
	if peer := r.Peer().Addr; peer != "" {
		who += " from " + peer
	}
	if s.cfg.RequireAdmin && !sc.AllowAdmin() {
		s.resets.WithLabelValues(label, "denied").Inc()
		s.cfg.Logger.Warn("reset refused: the token has no admin scope", "by", who, "rule", label)
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("reset: this token has no admin scope"))
	}
	in := checkInput(ctx, "", m.GetKey(), 1, m.GetRule(), m.GetLimit(), s.cfg.Now(), true)
	if sc.AllowAdmin() {
		in.Scope = nil // admin resets any key, whatever else its token may spend
	}
	key, at, err := s.dec.Reset(ctx, in)
	switch {
	case errors.Is(err, decision.ErrNoReset):
		s.resets.WithLabelValues(label, "error").Inc()
		return nil, connect.NewError(connect.CodeUnimplemented, err)
	case err != nil && connect.CodeOf(err) == connect.CodeInvalidArgument, err != nil && connect.CodeOf(err) == connect.CodePermissionDenied:
		s.resets.WithLabelValues(label, "invalid").Inc()
		return nil, err
	case err != nil:
		s.resets.WithLabelValues(label, "error").Inc()
		s.cfg.Logger.Warn("reset failed", "by", who, "key", key, "err", err)
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	s.resets.WithLabelValues(label, "ok").Inc()
	s.cfg.Logger.Info("reset", "by", who, "key", key, "reset_at", at.UTC().Format(time.RFC3339Nano))
	return connect.NewResponse(&ratelimitv1.ResetResponse{ResetAt: timestamppb.New(at)}), nil
}
