package api

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/window"
)

// The Connect service is a thin adapter over [decision.Decider]: each
// message becomes a decision.Input (inline limits in the Inline namespace,
// named rules in the Rule namespace), is validated and decided there, and
// the outcomes are written back to the wire.

// checkInput adapts one CheckRequest or PeekRequest, bound by the scope of
// the caller's token.
func checkInput(ctx context.Context, field, key string, hits uint64, rule string, lim *ratelimitv1.Limit, now time.Time, peek bool) decision.Input {
	return decision.Input{NS: decision.Inline, Field: field, Key: key, Hits: hits, Rule: rule, Limit: lim, Now: now, Peek: peek, Scope: auth.FromContext(ctx)}
}

// checkOne validates and decides one Check or Peek and returns its answer,
// without stats when omit is set. The answer goes in m.
func (s *Server) checkOne(ctx context.Context, m *responseMsgs, key string, hits uint64, rule string, lim *ratelimitv1.Limit, peek, omit bool) (*ratelimitv1.CheckResponse, error) {
	req, err := s.dec.Validate(checkInput(ctx, "", key, hits, rule, lim, s.cfg.Now(), peek))
	if err != nil {
		return nil, err
	}
	var out [1]decision.Outcome
	if err := s.dec.Decide(ctx, []decision.Request{req}, out[:]); err != nil {
		return nil, err
	}
	if omit {
		return brief(m, out[0]), nil
	}
	return s.response(m, out[0], s.ages(out[0])), nil
}

// Check implements ratelimitv1connect.RateLimitServiceHandler.
func (s *Server) Check(ctx context.Context, r *connect.Request[ratelimitv1.CheckRequest]) (*connect.Response[ratelimitv1.CheckResponse], error) {
	defer s.dec.Observe("Check", time.Now())
	out := new(checkOut)
	if err := s.check(ctx, r.Msg, out); err != nil {
		return nil, err
	}
	return &out.resp, nil
}

// checkOut is a Check's response and the messages it is made of, in one
// allocation: a Response with only Msg set is what connect.NewResponse
// makes.
type checkOut struct {
	resp connect.Response[ratelimitv1.CheckResponse]
	msgs responseMsgs
}

// check decides m and sets out (zero, but for its buffers) to its answer.
func (s *Server) check(ctx context.Context, m *ratelimitv1.CheckRequest, out *checkOut) error {
	resp, err := s.checkOne(ctx, &out.msgs, m.GetKey(), m.GetHits(), m.GetRule(), m.GetLimit(), false, m.GetOmitStats())
	if err != nil {
		return err
	}
	out.resp.Msg = resp
	return nil
}

// reset zeroes o for another check, keeping the capacity of its marks'
// buffers up to maxKeptMarks.
func (o *checkOut) reset() {
	ms, ps := o.msgs.markBuf[:0], o.msgs.markPtrs[:0]
	*o = checkOut{}
	if cap(ms) <= maxKeptMarks {
		o.msgs.markBuf, o.msgs.markPtrs = ms, ps
	}
}

// maxKeptMarks bounds the marks a pooled response keeps room for: those
// of a full coarse trail and more.
const maxKeptMarks = 4 * window.Granules

// CheckBatch implements ratelimitv1connect.RateLimitServiceHandler. Valid
// checks are decided in one store call; invalid ones get an error result.
func (s *Server) CheckBatch(ctx context.Context, r *connect.Request[ratelimitv1.CheckBatchRequest]) (*connect.Response[ratelimitv1.CheckBatchResponse], error) {
	defer s.dec.Observe("CheckBatch", time.Now())
	in := r.Msg.GetChecks()
	if len(in) > s.cfg.MaxBatch {
		return nil, tooManyChecks(s.cfg.MaxBatch)
	}
	now := s.cfg.Now()
	out := make([]*ratelimitv1.CheckResult, len(in))
	reqs := make([]decision.Request, 0, len(in))
	index := make([]int, 0, len(in)) // index[j] is the position in `in` of reqs[j]
	for i, m := range in {
		req, err := s.dec.Validate(checkInput(ctx, fmt.Sprintf("checks[%d].", i), m.GetKey(), m.GetHits(), m.GetRule(), m.GetLimit(), now, false))
		if err != nil {
			out[i] = &ratelimitv1.CheckResult{Result: &ratelimitv1.CheckResult_Error{Error: &ratelimitv1.Error{
				Code:    connect.CodeOf(err).String(),
				Message: decision.Message(err),
			}}}
			continue
		}
		reqs = append(reqs, req)
		index = append(index, i)
	}
	if len(reqs) > 0 {
		outs := make([]decision.Outcome, len(reqs))
		if err := s.dec.Decide(ctx, reqs, outs); err != nil {
			return nil, err
		}
		ages := s.ages(outs...)
		for j, i := range index {
			resp := brief(new(responseMsgs), outs[j])
			if !in[i].GetOmitStats() {
				resp = s.response(new(responseMsgs), outs[j], ages)
			}
			out[i] = &ratelimitv1.CheckResult{Result: &ratelimitv1.CheckResult_Response{Response: resp}}
		}
	}
	return connect.NewResponse(&ratelimitv1.CheckBatchResponse{Results: out}), nil
}

// Peek implements ratelimitv1connect.RateLimitServiceHandler: the answer
// Check would give, with nothing consumed.
func (s *Server) Peek(ctx context.Context, r *connect.Request[ratelimitv1.PeekRequest]) (*connect.Response[ratelimitv1.PeekResponse], error) {
	defer s.dec.Observe("Peek", time.Now())
	m := r.Msg
	resp, err := s.checkOne(ctx, new(responseMsgs), m.GetKey(), m.GetHits(), m.GetRule(), m.GetLimit(), true, m.GetOmitStats())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ratelimitv1.PeekResponse{Response: resp}), nil
}

// ages asks the Pool for the remote regions' ages when any outcome shows
// a remote region.
func (s *Server) ages(outs ...decision.Outcome) map[string]time.Duration {
	if s.cfg.Pool == nil {
		return nil
	}
	for _, o := range outs {
		for _, rc := range o.Regions {
			if rc.Region != s.cfg.Region {
				return s.cfg.Pool.RemoteAges()
			}
		}
	}
	return nil
}

// estimateTerms returns the weighted terms of a counter decision's
// estimate, as WindowStats documents them.
func estimateTerms(m *responseMsgs, o decision.Outcome) []*ratelimitv1.EstimateTerm {
	switch a := o.Spec.Algorithm; {
	case !a.Counted() || a == window.FixedWindow:
		return nil
	case a.Trails():
		var out []*ratelimitv1.EstimateTerm
		for _, rc := range o.Regions {
			if n := rc.PreviousTrail.After(o.ElapsedMs); n > 0 {
				out = m.appendTerm(out, n, 1, 1)
			}
		}
		return out
	case o.SubOldest > 0 && o.SubWeightNum > 0:
		return m.appendTerm(nil, o.SubOldest, o.SubWeightNum, o.SubWeightDen)
	}
	return nil
}

// appendTerm appends the term count*num/den to out, the first of a
// response (out nil) in m itself.
func (m *responseMsgs) appendTerm(out []*ratelimitv1.EstimateTerm, count, num, den uint64) []*ratelimitv1.EstimateTerm {
	p := &m.term
	if out == nil {
		out = m.terms[:0]
	} else {
		p = new(ratelimitv1.EstimateTerm)
	}
	p.Count, p.Numerator, p.Denominator = count, num, den
	return append(out, p)
}

// marks converts a trail to the wire, in m's mark buffers while they have
// room (a pooled response's; see checkOut), else in new ones: one
// allocation for every mark and one for the pointers.
func (m *responseMsgs) marks(t window.Trail, e int64) []*ratelimitv1.Mark {
	// The marks at or before e left the trailing window: they count
	// nothing, and a bucket's worth of them made every answer of a busy
	// key kilobytes long.
	from := t.FirstAfter(e)
	n := len(t) - from
	if n == 0 {
		return nil
	}
	if cap(m.markBuf)-len(m.markBuf) < n {
		m.markBuf = make([]ratelimitv1.Mark, 0, max(n, cap(m.markBuf)))
		m.markPtrs = make([]*ratelimitv1.Mark, 0, cap(m.markBuf))
	}
	k := len(m.markBuf)
	m.markBuf, m.markPtrs = m.markBuf[:k+n], m.markPtrs[:k+n]
	ms, out := m.markBuf[k:k+n:k+n], m.markPtrs[k:k+n:k+n]
	for i := range n {
		ms[i].AtMs, ms[i].Count = t[from+i].At, t.N(from+i)
		out[i] = &ms[i]
	}
	return out
}

// responseMsgs holds the messages of one response with up to one region
// and one estimate term, so that they take one allocation rather than one
// each, and buffers for its marks.
type responseMsgs struct {
	markBuf  []ratelimitv1.Mark
	markPtrs []*ratelimitv1.Mark

	resp         ratelimitv1.CheckResponse
	stats        ratelimitv1.WindowStats
	regions      [1]*ratelimitv1.RegionCount
	region       ratelimitv1.RegionCount
	terms        [1]*ratelimitv1.EstimateTerm
	term         ratelimitv1.EstimateTerm
	reset, retry durationpb.Duration
}

// setDuration sets dst to d, as durationpb.New does.
func setDuration(dst *durationpb.Duration, d time.Duration) {
	nanos := d.Nanoseconds()
	secs := nanos / 1e9
	dst.Seconds, dst.Nanos = secs, int32(nanos-secs*1e9)
}

// response converts an outcome to the wire, in m (zero).
func (s *Server) response(m *responseMsgs, o decision.Outcome, ages map[string]time.Duration) *ratelimitv1.CheckResponse {
	st := &m.stats
	st.Bucket, st.PreviousWeight, st.Estimate, st.ElapsedMs, st.Whole = o.Bucket, o.PrevWeight, o.Estimate, o.ElapsedMs, o.SubWhole
	st.Terms = estimateTerms(m, o)
	switch n := len(o.Regions); {
	case n == 1:
		st.Regions = m.regions[:]
	case n > 1:
		st.Regions = make([]*ratelimitv1.RegionCount, n)
	}
	trails := o.Spec.Algorithm.Counted() && o.Spec.Algorithm.Trails()
	for i, rc := range o.Regions {
		st.Current += rc.Current
		st.Previous += rc.Previous
		w := &m.region
		if i > 0 {
			w = &ratelimitv1.RegionCount{}
		}
		w.Region, w.Current, w.Previous = rc.Region, rc.Current, rc.Previous
		if trails {
			w.PreviousMarks = m.marks(rc.PreviousTrail, o.ElapsedMs)
		}
		if age, ok := ages[rc.Region]; ok && rc.Region != s.cfg.Region {
			w.Age = durationpb.New(age)
		}
		st.Regions[i] = w
	}
	r := brief(m, o)
	r.Stats = st
	return r
}

// brief converts an outcome to the wire without stats, in m (zero).
func brief(m *responseMsgs, o decision.Outcome) *ratelimitv1.CheckResponse {
	setDuration(&m.reset, o.ResetAfter)
	setDuration(&m.retry, o.RetryAfter)
	r := &m.resp
	r.Allowed, r.Limit, r.Remaining = o.Allowed, o.Limit, o.Remaining
	r.ResetAfter, r.RetryAfter = &m.reset, &m.retry
	r.Shadow, r.Scope = o.Shadowed, wireScope(o.Scope)
	return r
}

// wireScope returns the wire name of the scope that applied.
func wireScope(s rules.Scope) ratelimitv1.Scope {
	if s == rules.ScopeRegion {
		return ratelimitv1.Scope_SCOPE_REGION
	}
	return ratelimitv1.Scope_SCOPE_GLOBAL
}
