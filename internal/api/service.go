package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// check is one validated request, ready for the store.
type check struct {
	rule   string // metric label: the rule's name or ruleInline
	req    region.Request
	shadow bool // answer allowed whatever the decision (shadow mode)
}

// Check implements ratelimitv1connect.RateLimitServiceHandler.
func (s *Server) Check(ctx context.Context, r *connect.Request[ratelimitv1.CheckRequest]) (*connect.Response[ratelimitv1.CheckResponse], error) {
	start := time.Now()
	defer s.observe("Check", start)
	m := r.Msg
	c, err := s.prepare("", m.GetKey(), m.GetHits(), m.GetRule(), m.GetLimit(), s.cfg.Now(), false)
	if err != nil {
		s.metrics.decisions.WithLabelValues(c.rule, outcomeError).Inc()
		return nil, err
	}
	res := make([]region.Result, 1)
	if err := s.decide(ctx, []check{c}, res); err != nil {
		return nil, err
	}
	return connect.NewResponse(s.response(res[0], s.ages(res))), nil
}

// CheckBatch implements ratelimitv1connect.RateLimitServiceHandler. Valid
// checks are decided in one store call; invalid ones get an error result.
func (s *Server) CheckBatch(ctx context.Context, r *connect.Request[ratelimitv1.CheckBatchRequest]) (*connect.Response[ratelimitv1.CheckBatchResponse], error) {
	start := time.Now()
	defer s.observe("CheckBatch", start)
	in := r.Msg.GetChecks()
	if len(in) > s.cfg.MaxBatch {
		return nil, invalid("checks: %d checks, more than the maximum of %d", len(in), s.cfg.MaxBatch)
	}
	now := s.cfg.Now()
	out := make([]*ratelimitv1.CheckResult, len(in))
	checks := make([]check, 0, len(in))
	index := make([]int, 0, len(in)) // index[j] is the position in `in` of checks[j]
	for i, m := range in {
		c, err := s.prepare(fmt.Sprintf("checks[%d].", i), m.GetKey(), m.GetHits(), m.GetRule(), m.GetLimit(), now, false)
		if err != nil {
			s.metrics.decisions.WithLabelValues(c.rule, outcomeError).Inc()
			out[i] = &ratelimitv1.CheckResult{Result: &ratelimitv1.CheckResult_Error{Error: &ratelimitv1.Error{
				Code:    connect.CodeOf(err).String(),
				Message: errorMessage(err),
			}}}
			continue
		}
		checks = append(checks, c)
		index = append(index, i)
	}
	if len(checks) > 0 {
		res := make([]region.Result, len(checks))
		if err := s.decide(ctx, checks, res); err != nil {
			return nil, err
		}
		ages := s.ages(res)
		for j, i := range index {
			out[i] = &ratelimitv1.CheckResult{Result: &ratelimitv1.CheckResult_Response{Response: s.response(res[j], ages)}}
		}
	}
	return connect.NewResponse(&ratelimitv1.CheckBatchResponse{Results: out}), nil
}

// Peek implements ratelimitv1connect.RateLimitServiceHandler: the answer
// Check would give, with nothing consumed.
func (s *Server) Peek(ctx context.Context, r *connect.Request[ratelimitv1.PeekRequest]) (*connect.Response[ratelimitv1.PeekResponse], error) {
	start := time.Now()
	defer s.observe("Peek", start)
	m := r.Msg
	c, err := s.prepare("", m.GetKey(), m.GetHits(), m.GetRule(), m.GetLimit(), s.cfg.Now(), true)
	if err != nil {
		return nil, err
	}
	res := make([]region.Result, 1)
	if err := s.decide(ctx, []check{c}, res); err != nil {
		return nil, err
	}
	return connect.NewResponse(&ratelimitv1.PeekResponse{Response: s.response(res[0], s.ages(res))}), nil
}

func (s *Server) observe(method string, start time.Time) {
	s.metrics.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

// invalid returns an invalid_argument error whose message is the formatted
// text.
func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// errorMessage returns err's message without the code prefix Connect adds.
func errorMessage(err error) string {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// prepare validates one request. field prefixes the names of fields in
// error messages ("checks[3]." inside a batch). The returned check's rule is
// set even on error, for metrics.
func (s *Server) prepare(field, key string, hits uint64, ruleName string, lim *ratelimitv1.Limit, now time.Time, peek bool) (check, error) {
	c := check{rule: ruleInline}
	if ruleName != "" {
		c.rule = ruleUnknown
	}
	switch {
	case key == "":
		return c, invalid("%skey: must not be empty", field)
	case len(key) > s.cfg.MaxKeyBytes:
		return c, invalid("%skey: %d bytes, more than the maximum of %d", field, len(key), s.cfg.MaxKeyBytes)
	case ruleName != "" && lim != nil:
		return c, invalid("%srule: set exactly one of rule and limit, not both", field)
	case ruleName == "" && lim == nil:
		return c, invalid("%slimit: required when no rule is named (set exactly one of rule and limit)", field)
	}
	var l window.Limit
	if ruleName != "" {
		r, ok := s.rules.Load().Lookup(ruleName)
		if !ok {
			return c, invalid("%srule: unknown rule %q", field, truncate(ruleName, 128))
		}
		c.rule = r.Name
		c.shadow = r.Shadow
		l = r.Limit
		key = r.CounterKey(key)
	} else {
		var err error
		if l, err = s.inlineLimit(field, lim); err != nil {
			return c, err
		}
	}
	if hits == 0 {
		hits = 1
	}
	if hits > l.Limit {
		return c, invalid("%shits: %d is more than the limit of %d", field, hits, l.Limit)
	}
	if hits > s.cfg.MaxHits {
		return c, invalid("%shits: %d is more than the maximum of %d", field, hits, s.cfg.MaxHits)
	}
	c.req = region.Request{Key: key, Limit: l, Hits: hits, Now: now, Peek: peek}
	c.shadow = c.shadow || s.cfg.ShadowMode
	return c, nil
}

// inlineLimit converts and validates an inline limit, within the
// configured MaxWindow and MaxLogLimit.
func (s *Server) inlineLimit(field string, lim *ratelimitv1.Limit) (window.Limit, error) {
	var l window.Limit
	if n := lim.GetLimit(); n < 1 || n > window.MaxLimit {
		return l, invalid("%slimit.limit: must be from 1 to 2^53 (%d), got %d", field, uint64(window.MaxLimit), n)
	}
	l.Limit = lim.GetLimit()
	d := lim.GetWindow()
	if d == nil {
		return l, invalid("%slimit.window: required, from %v to %v", field, window.MinWindow, window.MaxWindow)
	}
	if d.CheckValid() != nil {
		return l, invalid("%slimit.window: not a valid duration (seconds %d, nanos %d)", field, d.GetSeconds(), d.GetNanos())
	}
	if err := checkWindow(d.AsDuration()); err != nil {
		return l, invalid("%slimit.window: %v", field, err)
	}
	if d.AsDuration() > s.cfg.MaxWindow {
		return l, invalid("%slimit.window: %v is more than the maximum of %v", field, d.AsDuration(), s.cfg.MaxWindow)
	}
	l.Window = d.AsDuration()
	switch a := lim.GetAlgorithm(); a {
	case ratelimitv1.Algorithm_ALGORITHM_UNSPECIFIED, ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW:
		l.Algorithm = window.SlidingWindow
	case ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW:
		l.Algorithm = window.FixedWindow
	case ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET:
		l.Algorithm = window.TokenBucket
	case ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG:
		l.Algorithm = window.SlidingLog
	default:
		return l, invalid("%slimit.algorithm: unknown algorithm %d", field, int32(a))
	}
	if l.Algorithm == window.SlidingLog && l.Limit > s.cfg.MaxLogLimit {
		return l, invalid("%slimit.limit: %d is more than the maximum of %d for sliding_log (its memory grows with the limit)", field, l.Limit, s.cfg.MaxLogLimit)
	}
	if err := l.Validate(); err != nil {
		return l, invalid("%slimit: %v", field, err)
	}
	return l, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// decide asks the store for every check in one call and records metrics.
// It tells the Replicator about admitted counter decisions. A denied
// shadow check is counted as shadow_denied and answered allowed, keeping
// its retry_after (above zero), which is how callers can tell.
func (s *Server) decide(ctx context.Context, checks []check, res []region.Result) error {
	reqs := make([]region.Request, len(checks))
	for i, c := range checks {
		reqs[i] = c.req
	}
	if err := s.cfg.Store.Check(ctx, reqs, res); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return connect.NewError(connect.CodeOf(ctxErr), ctxErr)
		}
		s.metrics.storeErrors.Inc()
		s.cfg.Logger.Warn("store check failed", "checks", len(reqs), "err", err)
		for _, c := range checks {
			if !c.req.Peek {
				s.metrics.decisions.WithLabelValues(c.rule, outcomeError).Inc()
			}
		}
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("store unavailable: %w", err))
	}
	for i, c := range checks {
		if !res[i].Allowed && c.shadow {
			res[i].Allowed = true
			if !c.req.Peek {
				s.metrics.decisions.WithLabelValues(c.rule, outcomeShadowDenied).Inc()
			}
			continue
		}
		if c.req.Peek {
			continue
		}
		if !res[i].Allowed {
			outcome := outcomeDenied
			if s.cfg.ShadowMode { // Envoy's global shadow mode changes only overall_code
				outcome = outcomeShadowDenied
			}
			s.metrics.decisions.WithLabelValues(c.rule, outcome).Inc()
			continue
		}
		s.metrics.decisions.WithLabelValues(c.rule, outcomeAllowed).Inc()
		if s.cfg.Replicator != nil && c.req.Limit.Algorithm.Counted() {
			reg := s.cfg.Region
			if res[i].LocalRegion != "" {
				reg = res[i].LocalRegion // a failover store's fallback region
			}
			s.cfg.Replicator.Dirty(region.Total{
				Key:    c.req.Key,
				Window: c.req.Limit.Window,
				Bucket: res[i].Bucket,
				Region: reg,
				Count:  res[i].Local,
			})
		}
	}
	return nil
}

// ages asks the Replicator for the remote regions' ages when any result
// shows a remote region.
func (s *Server) ages(res []region.Result) map[string]time.Duration {
	if s.cfg.Replicator == nil {
		return nil
	}
	for _, r := range res {
		for _, rc := range r.Regions {
			if rc.Region != s.cfg.Region {
				return s.cfg.Replicator.Ages()
			}
		}
	}
	return nil
}

// response converts a store result to the wire.
func (s *Server) response(r region.Result, ages map[string]time.Duration) *ratelimitv1.CheckResponse {
	st := &ratelimitv1.WindowStats{
		Bucket:         r.Bucket,
		PreviousWeight: r.PrevWeight,
		Estimate:       r.Estimate,
	}
	if len(r.Regions) > 0 {
		st.Regions = make([]*ratelimitv1.RegionCount, len(r.Regions))
	}
	for i, rc := range r.Regions {
		st.Current += rc.Current
		st.Previous += rc.Previous
		w := &ratelimitv1.RegionCount{Region: rc.Region, Current: rc.Current, Previous: rc.Previous}
		if age, ok := ages[rc.Region]; ok && rc.Region != s.cfg.Region {
			w.Age = durationpb.New(age)
		}
		st.Regions[i] = w
	}
	return &ratelimitv1.CheckResponse{
		Allowed:    r.Allowed,
		Limit:      r.Limit,
		Remaining:  r.Remaining,
		ResetAfter: durationpb.New(r.ResetAfter),
		RetryAfter: durationpb.New(r.RetryAfter),
		Stats:      st,
		// An allowed answer has no retry_after unless shadow mode turned a
		// denial around (see decide).
		Shadow: r.Allowed && r.RetryAfter > 0,
	}
}
