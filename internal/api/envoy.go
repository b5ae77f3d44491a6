package api

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// Envoy's rate-limit service (RLS v3), served on the same handler as the
// Connect API so that Envoy's rate_limit_service points at the node's one
// port over gRPC (h2c).
const (
	envoyServiceName = "envoy.service.ratelimit.v3.RateLimitService"
	envoyProcedure   = "/" + envoyServiceName + "/ShouldRateLimit"
)

// RLSHeaders names the response headers ShouldRateLimit asks Envoy to add,
// describing the most limiting descriptor of the request (the first one
// over its limit, else the one with the fewest hits remaining): its
// requests per unit, the hits remaining and the seconds until its window
// resets. Empty names add no headers.
type RLSHeaders struct {
	Limit, Remaining, Reset string
}

// Header sets for Config.RLSHeaders: the IETF draft's names, which
// envoyproxy/ratelimit adds by default when LIMIT_RESPONSE_HEADERS_ENABLED
// is set, and the older X-RateLimit-* names.
var (
	RLSHeadersDraft = RLSHeaders{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}
	RLSHeadersX     = RLSHeaders{Limit: "X-RateLimit-Limit", Remaining: "X-RateLimit-Remaining", Reset: "X-RateLimit-Reset"}
)

func (h RLSHeaders) enabled() bool { return h.Limit != "" || h.Remaining != "" || h.Reset != "" }

// mountEnvoy registers ShouldRateLimit on the server's mux.
func (s *Server) mountEnvoy(opts []connect.HandlerOption) {
	s.mux.Handle(envoyProcedure, connect.NewUnaryHandler(envoyProcedure, s.shouldRateLimit, opts...))
}

// envoyKey returns the counter key of a request descriptor in a domain:
// "rls/" + domain + "/" + key=value/key=value..., each part escaped so
// that different descriptors never share a key. Native rules' keys
// ("<rule>:<key>") never start with "rls/", since rule names hold no '/'.
func envoyKey(dom string, entries []entry) string {
	var b strings.Builder
	b.WriteString("rls/")
	b.WriteString(escapeKeyPart(dom))
	for _, e := range entries {
		b.WriteByte('/')
		b.WriteString(escapeKeyPart(e.key))
		b.WriteByte('=')
		b.WriteString(escapeKeyPart(e.value))
	}
	return b.String()
}

var keyPartEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "=", "%3D")

func escapeKeyPart(s string) string { return keyPartEscaper.Replace(s) }

// envoyDescriptor is one request descriptor, matched and ready to decide.
type envoyDescriptor struct {
	entries []entry
	key     string // the counter key, envoyKey(domain, entries)
	hits    uint64
	lim     *envoyLimit // nil: no limit applies
}

// shouldRateLimit implements envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
// with envoyproxy/ratelimit's semantics:
//
//   - each descriptor is matched against the request's domain (see
//     [domain.match]); one with no match, or an unknown domain, is OK
//     with no current_limit;
//   - a limit named in another matched limit's replaces is dropped (OK, not
//     counted);
//   - unlimited is OK with limit_remaining MaxUint32, not counted;
//   - requests_per_unit 0, or more hits than the limit, is OVER_LIMIT;
//   - every other descriptor is decided, all in one store call, spending
//     hits_addend (the descriptor's own, else the request's, else 1; a
//     descriptor's explicit 0 only looks);
//   - a descriptor in shadow_mode is OK even when over its limit; global
//     shadow mode leaves the statuses as decided and makes overall_code OK;
//   - overall_code is OVER_LIMIT when any status is.
func (s *Server) shouldRateLimit(ctx context.Context, r *connect.Request[rlsv3.RateLimitRequest]) (*connect.Response[rlsv3.RateLimitResponse], error) {
	start := time.Now()
	defer s.observe("ShouldRateLimit", start)
	m := r.Msg
	if m.GetDomain() == "" {
		return nil, invalid("domain: required")
	}
	if len(m.GetDescriptors()) == 0 {
		return nil, invalid("descriptors: at least one is required")
	}
	if len(m.GetDescriptors()) > s.cfg.MaxBatch {
		return nil, invalid("descriptors: %d, more than the maximum of %d", len(m.GetDescriptors()), s.cfg.MaxBatch)
	}
	dom := s.rules.Load().domain(m.GetDomain())
	now := s.cfg.Now()
	reqHits := uint64(m.GetHitsAddend())
	if reqHits == 0 {
		reqHits = 1
	}

	descs := make([]envoyDescriptor, len(m.GetDescriptors()))
	var replaced map[string]bool // made only when a limit replaces others
	for i, d := range m.GetDescriptors() {
		ed, err := s.envoyDescriptor(i, m.GetDomain(), dom, d, reqHits)
		if err != nil {
			return nil, err
		}
		descs[i] = ed
		if ed.lim != nil {
			for _, n := range ed.lim.replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[n] = true
			}
		}
	}

	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs))
	var checks []check
	var index []int
	for i, d := range descs {
		lim := d.lim
		switch {
		case lim != nil && lim.name != "" && replaced[lim.name]:
			lim = nil
			fallthrough
		case lim == nil:
			statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		case lim.unlimited:
			statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		case lim.limit.Limit == 0 || d.hits > lim.limit.Limit:
			// Nothing can ever admit these hits: over the limit without
			// asking the store.
			st := envoyStatus(lim, false, 0, window.Bucket(window.Ms(now), lim.limit.Window), now)
			outcome := outcomeDenied
			if lim.shadow || s.cfg.ShadowMode {
				outcome = outcomeShadowDenied
			}
			if lim.shadow {
				st.Code = rlsv3.RateLimitResponse_OK
			}
			if d.hits > 0 {
				s.metrics.decisions.WithLabelValues(lim.stat, outcome).Inc()
			}
			statuses[i] = st
		default:
			// decide answers a shadow_mode limit's denial as allowed;
			// global shadow mode keeps the status and changes only
			// overall_code, below, as envoyproxy/ratelimit does.
			checks = append(checks, check{
				rule:   lim.stat,
				shadow: lim.shadow,
				req: region.Request{
					Key:   d.key,
					Limit: lim.limit,
					Hits:  max(d.hits, 1),
					Now:   now,
					Peek:  d.hits == 0,
				},
			})
			index = append(index, i)
		}
	}
	if len(checks) > 0 {
		res := make([]region.Result, len(checks))
		if err := s.decide(ctx, checks, res); err != nil {
			return nil, err
		}
		for j, i := range index {
			allowed, remaining := res[j].Allowed, res[j].Remaining
			if checks[j].req.Peek {
				// hits_addend 0 only looks, which is never over the
				// limit; the store answered for one hit.
				if allowed && res[j].RetryAfter == 0 {
					remaining++
				}
				allowed = true
			}
			st := envoyStatus(descs[i].lim, allowed, remaining, 0, now)
			st.DurationUntilReset = durationpb.New(res[j].ResetAfter)
			statuses[i] = st
		}
	}

	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}
	for _, st := range statuses {
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if s.cfg.RLSHeaders.enabled() {
		resp.ResponseHeadersToAdd = s.rlsHeaders(statuses)
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && s.cfg.ShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	return connect.NewResponse(resp), nil
}

// envoyDescriptor validates and matches request descriptor i.
func (s *Server) envoyDescriptor(i int, domName string, dom *domain, d *commonv3.RateLimitDescriptor, reqHits uint64) (envoyDescriptor, error) {
	ed := envoyDescriptor{hits: reqHits}
	if len(d.GetEntries()) == 0 {
		return ed, invalid("descriptors[%d].entries: at least one is required", i)
	}
	if d.GetIsNegativeHits() {
		return ed, invalid("descriptors[%d].is_negative_hits: not supported", i)
	}
	if h := d.GetHitsAddend(); h != nil {
		ed.hits = h.GetValue()
	}
	if ed.hits > s.cfg.MaxHits {
		return ed, invalid("descriptors[%d].hits_addend: %d is more than the maximum of %d", i, ed.hits, s.cfg.MaxHits)
	}
	ed.entries = make([]entry, len(d.GetEntries()))
	for j, e := range d.GetEntries() {
		if e.GetKey() == "" {
			return ed, invalid("descriptors[%d].entries[%d].key: must not be empty", i, j)
		}
		ed.entries[j] = entry{key: e.GetKey(), value: e.GetValue()}
	}
	// The key the store gets, escapes included, is what MaxKeyBytes bounds.
	ed.key = envoyKey(domName, ed.entries)
	if len(ed.key) > s.cfg.MaxKeyBytes {
		return ed, invalid("descriptors[%d]: domain and entries make a %d-byte key, more than the maximum of %d", i, len(ed.key), s.cfg.MaxKeyBytes)
	}
	if o := d.GetLimit(); o != nil {
		lim, err := overrideLimit(domName, ed.entries, o) // checked even for an unknown domain
		if err != nil {
			return ed, invalid("descriptors[%d].limit: %v", i, err)
		}
		if dom != nil {
			ed.lim = lim
		}
		return ed, nil
	}
	if dom != nil {
		ed.lim = dom.match(ed.entries)
	}
	return ed, nil
}

// overrideLimit turns a descriptor's limit override into a limit, as
// envoyproxy/ratelimit applies it: in place of the configured one.
func overrideLimit(domName string, entries []entry, o *commonv3.RateLimitDescriptor_RateLimitOverride) (*envoyLimit, error) {
	var u string
	switch o.GetUnit() {
	case typev3.RateLimitUnit_SECOND:
		u = "SECOND"
	case typev3.RateLimitUnit_MINUTE:
		u = "MINUTE"
	case typev3.RateLimitUnit_HOUR:
		u = "HOUR"
	case typev3.RateLimitUnit_DAY:
		u = "DAY"
	default:
		return nil, fmt.Errorf("unit %v is not supported (second, minute, hour or day)", o.GetUnit())
	}
	eu := envoyUnits[u]
	w := eu.window
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		w *= time.Duration(m.GetValue())
		if w > window.MaxWindow {
			return nil, fmt.Errorf("unit_multiplier %d makes a window of %v, more than %v", m.GetValue(), w, window.MaxWindow)
		}
	}
	stat := domName
	for _, e := range entries {
		stat += "." + e.key
	}
	return &envoyLimit{
		stat:  stat + ".override",
		unit:  eu.unit,
		limit: window.Limit{Limit: uint64(o.GetRequestsPerUnit()), Window: w, Algorithm: window.SlidingWindow},
	}, nil
}

// envoyStatus builds a descriptor's status. When resetBucket is not zero,
// duration_until_reset is the time to the end of that bucket.
func envoyStatus(lim *envoyLimit, allowed bool, remaining uint64, resetBucket int64, now time.Time) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:           rlsv3.RateLimitResponse_OVER_LIMIT,
		CurrentLimit:   &rlsv3.RateLimitResponse_RateLimit{Name: lim.name, RequestsPerUnit: clamp32(lim.limit.Limit), Unit: lim.unit},
		LimitRemaining: clamp32(remaining),
	}
	if allowed {
		st.Code = rlsv3.RateLimitResponse_OK
	}
	if resetBucket != 0 {
		end := time.UnixMilli((resetBucket + 1) * lim.limit.WindowMs())
		st.DurationUntilReset = durationpb.New(end.Sub(now))
	}
	return st
}

func clamp32(n uint64) uint32 {
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}

// rlsHeaders describes the most limiting status: the first over its
// limit, else the one with the fewest hits remaining. Statuses without a
// limit do not count; with none left there are no headers.
func (s *Server) rlsHeaders(statuses []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	var most *rlsv3.RateLimitResponse_DescriptorStatus
	for _, st := range statuses {
		if st.GetCurrentLimit() == nil {
			continue
		}
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			most = st
			break
		}
		if most == nil || st.GetLimitRemaining() < most.GetLimitRemaining() {
			most = st
		}
	}
	if most == nil {
		return nil
	}
	h := s.cfg.RLSHeaders
	var out []*corev3.HeaderValue
	add := func(k, v string) {
		if k != "" {
			out = append(out, &corev3.HeaderValue{Key: k, Value: v})
		}
	}
	add(h.Limit, strconv.FormatUint(uint64(most.GetCurrentLimit().GetRequestsPerUnit()), 10))
	add(h.Remaining, strconv.FormatUint(uint64(most.GetLimitRemaining()), 10))
	reset := most.GetDurationUntilReset().AsDuration()
	add(h.Reset, strconv.FormatInt(int64((reset+time.Second-1)/time.Second), 10))
	return out
}
