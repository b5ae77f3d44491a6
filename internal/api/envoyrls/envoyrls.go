// Package envoyrls owns Envoy's rate-limit service (RLS v3
// ShouldRateLimit) with envoyproxy/ratelimit's semantics: it matches each
// request descriptor against the domains of a [rules.Set] and decides the
// matched ones through [decision.Decider] in the Envoy namespace.
package envoyrls

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// The service and its one procedure, served on the same handler as the
// Connect API so that Envoy's rate_limit_service points at the node's one
// port over gRPC (h2c).
const (
	ServiceName = "envoy.service.ratelimit.v3.RateLimitService"
	Procedure   = "/" + ServiceName + "/ShouldRateLimit"
)

// Headers names the response headers ShouldRateLimit asks Envoy to add,
// describing the most limiting descriptor of the request (the first one
// over its limit, else the one with the fewest hits remaining): its
// requests per unit, the hits remaining and the seconds until its window
// resets. Empty names add no headers.
type Headers struct {
	Limit, Remaining, Reset string
}

// Header sets for Config.Headers: the IETF draft's names, which
// envoyproxy/ratelimit adds by default when LIMIT_RESPONSE_HEADERS_ENABLED
// is set, and the older X-RateLimit-* names.
var (
	HeadersDraft = Headers{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}
	HeadersX     = Headers{Limit: "X-RateLimit-Limit", Remaining: "X-RateLimit-Remaining", Reset: "X-RateLimit-Reset"}
)

func (h Headers) enabled() bool { return h.Limit != "" || h.Remaining != "" || h.Reset != "" }

// MaxEntries bounds the entries of one request descriptor. Envoy's
// actions make a descriptor of a few entries; a key of more would also
// exceed the key bound long before.
const MaxEntries = 64

// TooManyDescriptors is the refusal of a request of more than max
// descriptors.
func TooManyDescriptors(max int) error {
	return decision.Invalid("descriptors: more than the maximum of %d descriptors", max)
}

// TooManyEntries is the refusal of descriptor i for more than max entries.
func TooManyEntries(i, max int) error {
	return decision.Invalid("descriptors[%d].entries: more than the maximum of %d entries", i, max)
}

// Config configures a [Service]. Every field is required unless it says
// otherwise.
type Config struct {
	// Decider validates, decides and records; its rules hold the domains.
	Decider *decision.Decider
	// MaxBatch bounds the descriptors of one request.
	MaxBatch int
	// Now returns the current time.
	Now func() time.Time
	// Headers, when its names are set, makes ShouldRateLimit add response
	// headers for the most limiting descriptor; the zero value adds none.
	Headers Headers
}

// Service serves ShouldRateLimit. It is safe for concurrent use.
type Service struct{ cfg Config }

// New returns the service of cfg.
func New(cfg Config) *Service { return &Service{cfg: cfg} }

// Handler returns the Connect handler of [Procedure] (gRPC, gRPC-Web and
// the Connect protocol), with opts.
func (s *Service) Handler(opts ...connect.HandlerOption) http.Handler {
	return connect.NewUnaryHandler(Procedure, s.ShouldRateLimit, opts...)
}

// envoyDescriptor is one request descriptor, validated and matched.
type envoyDescriptor struct {
	lim *rules.EnvoyLimit // nil: no limit applies
	req decision.Request  // when lim is set
}

// ShouldRateLimit implements envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
// with envoyproxy/ratelimit's semantics:
//
//   - each descriptor is matched against the request's domain (see
//     [rules.Domain.Match]); one with no match, or an unknown domain, is OK
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
//   - overall_code is OVER_LIMIT when any status of a limit without
//     quota_mode is, or when the request has limits in quota_mode and
//     every one of their statuses is (see [overall]);
//   - dynamic_metadata merges the metadata of every limit whose status is
//     OK, and says which quota_mode limits are over.
//
// Every descriptor goes through [decision.Decider.Validate] in the Envoy
// namespace, and its outcome through the same outcome step as the Connect
// API's.
func (s *Service) ShouldRateLimit(ctx context.Context, r *connect.Request[rlsv3.RateLimitRequest]) (*connect.Response[rlsv3.RateLimitResponse], error) {
	resp, err := s.Decide(ctx, r.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// Decide answers one ShouldRateLimit request m, for every transport that
// carries it (Connect's handler and grpc-go's server); see
// [Service.ShouldRateLimit]. Errors are Connect errors.
func (s *Service) Decide(ctx context.Context, m *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	defer s.cfg.Decider.Observe("ShouldRateLimit", time.Now())
	if m.GetDomain() == "" {
		return nil, decision.Invalid("domain: required")
	}
	if len(m.GetDescriptors()) == 0 {
		return nil, decision.Invalid("descriptors: at least one is required")
	}
	if len(m.GetDescriptors()) > s.cfg.MaxBatch {
		return nil, TooManyDescriptors(s.cfg.MaxBatch)
	}
	if !auth.FromContext(ctx).AllowDomain(m.GetDomain()) {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("domain: this token may not use domain %.128q", m.GetDomain()))
	}
	dom := s.cfg.Decider.Rules().Domain(m.GetDomain())
	now := s.cfg.Now()

	// Requests of up to smallBatch descriptors (Envoy's usual one or two)
	// keep their working slices on the stack.
	var descBuf [smallBatch]envoyDescriptor
	var descs []envoyDescriptor
	if n := len(m.GetDescriptors()); n > smallBatch {
		descs = make([]envoyDescriptor, n)
	} else {
		descs = descBuf[:n]
	}
	var replaced map[string]bool // made only when a limit replaces others
	for i, d := range m.GetDescriptors() {
		ed, err := s.envoyDescriptor(i, m, dom, d, now)
		if err != nil {
			return nil, err
		}
		descs[i] = ed
		if ed.lim != nil {
			for _, n := range ed.lim.Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[n] = true
			}
		}
	}

	// The response, its statuses and, for one descriptor (the common
	// case), that status's messages come in one allocation.
	var resp *rlsv3.RateLimitResponse
	var statuses []*rlsv3.RateLimitResponse_DescriptorStatus
	var first *statusMsgs
	if len(descs) == 1 {
		one := new(struct {
			resp     rlsv3.RateLimitResponse
			statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
			first    statusMsgs
		})
		resp, statuses, first = &one.resp, one.statuses[:], &one.first
	} else {
		resp = new(rlsv3.RateLimitResponse)
		statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs))
	}
	msgs := func(i int) *statusMsgs {
		if i == 0 && first != nil {
			return first
		}
		return new(statusMsgs)
	}
	var reqBuf [smallBatch]decision.Request
	var indexBuf [smallBatch]int
	reqs, index := reqBuf[:0], indexBuf[:0]
	for i, d := range descs {
		lim := d.lim
		switch {
		case lim != nil && lim.Name != "" && replaced[lim.Name]:
			lim = nil
			fallthrough
		case lim == nil:
			statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		case lim.Unlimited:
			statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		case lim.Limit.Limit == 0 || (!d.req.Store.Peek && d.req.Store.Hits > lim.Limit.Capacity()):
			// Nothing can ever admit these hits: over the limit without
			// asking the store (OK for a shadow_mode limit).
			_, b := lim.Limit.BucketAt(window.Ms(now))
			o := s.cfg.Decider.Refuse(d.req, region.Result{Decision: window.Decision{Bucket: b}})
			statuses[i] = msgs(i).status(lim, o.Allowed, 0, b, now)
		default:
			// The outcome step answers a shadow_mode limit's denial as
			// allowed; global shadow mode keeps the status and changes only
			// overall_code, below, as envoyproxy/ratelimit does.
			reqs = append(reqs, d.req)
			index = append(index, i)
		}
	}
	if len(reqs) > 0 {
		var outBuf [smallBatch]decision.Outcome
		var outs []decision.Outcome
		if len(reqs) > smallBatch {
			outs = make([]decision.Outcome, len(reqs))
		} else {
			outs = outBuf[:len(reqs)]
		}
		if err := s.cfg.Decider.Decide(ctx, reqs, outs); err != nil {
			return nil, err
		}
		for j, i := range index {
			o := outs[j]
			allowed, remaining := o.Allowed, o.Remaining
			if reqs[j].Store.Peek {
				// hits_addend 0 only looks, which is never over the
				// limit; the store answered for one hit.
				if allowed && !o.Shadowed {
					remaining++
				}
				allowed = true
			}
			m := msgs(i)
			st := m.status(descs[i].lim, allowed, remaining, 0, now)
			st.DurationUntilReset = m.duration(o.ResetAfter)
			statuses[i] = st
		}
	}

	resp.Statuses = statuses
	resp.OverallCode, resp.DynamicMetadata = overall(descs, replaced, statuses)
	if s.cfg.Headers.enabled() {
		resp.ResponseHeadersToAdd = s.rlsHeaders(statuses)
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && s.cfg.Decider.ShadowMode() {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	return resp, nil
}

// applied returns the limit that applies to descriptor d: nil when none
// matched or another matched limit replaces it.
func applied(d *envoyDescriptor, replaced map[string]bool) *rules.EnvoyLimit {
	if d.lim == nil || (d.lim.Name != "" && replaced[d.lim.Name]) {
		return nil
	}
	return d.lim
}

// overall returns the request's overall code and dynamic metadata, as
// envoyproxy/ratelimit decides them. The request is over the limit when a
// limit without quota_mode is, or when it has limits in quota_mode and
// all of them are: a quota in quota mode is a soft limit, and the request
// may go on while one quota has room. The metadata, nil when there is
// none, holds:
//
//   - the fields of each applied limit's metadata whose status is OK, in
//     request order (a later descriptor's field replaces an earlier one's);
//   - when any applied limit is in quota mode, "quotaModeEnabled": true and
//     "quotaModeViolations": the indexes of the quota-mode descriptors
//     over their limits.
func overall(descs []envoyDescriptor, replaced map[string]bool, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) (rlsv3.RateLimitResponse_Code, *structpb.Struct) {
	code := rlsv3.RateLimitResponse_OK
	var fields map[string]*structpb.Value
	quotas, violations := 0, []*structpb.Value(nil)
	for i := range descs {
		lim := applied(&descs[i], replaced)
		isOver := statuses[i].GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		switch {
		case lim != nil && lim.QuotaMode:
			quotas++
			if isOver {
				violations = append(violations, structpb.NewNumberValue(float64(i)))
			}
		case isOver:
			code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if lim != nil && lim.Metadata != nil && !isOver {
			if fields == nil {
				fields = map[string]*structpb.Value{}
			}
			for k, v := range lim.Metadata.GetFields() {
				fields[k] = v
			}
		}
	}
	if quotas > 0 {
		if len(violations) == quotas {
			code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if fields == nil {
			fields = map[string]*structpb.Value{}
		}
		fields["quotaModeEnabled"] = structpb.NewBoolValue(true)
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: violations})
	}
	if fields == nil {
		return code, nil
	}
	return code, &structpb.Struct{Fields: fields}
}

// envoyDescriptor checks the Envoy-specific parts of request descriptor
// i, matches it (or takes its override) and validates it.
func (s *Service) envoyDescriptor(i int, m *rlsv3.RateLimitRequest, dom *rules.Domain, d *commonv3.RateLimitDescriptor, now time.Time) (envoyDescriptor, error) {
	var ed envoyDescriptor
	if len(d.GetEntries()) == 0 {
		return ed, decision.Invalid("descriptors[%d].entries: at least one is required", i)
	}
	if len(d.GetEntries()) > MaxEntries {
		return ed, TooManyEntries(i, MaxEntries)
	}
	if d.GetIsNegativeHits() {
		return ed, decision.Invalid("descriptors[%d].is_negative_hits: not supported", i)
	}
	in := decision.Input{NS: decision.Envoy, Field: descField(i), HitsField: "hits_addend", Hits: uint64(m.GetHitsAddend()), Now: now}
	if h := d.GetHitsAddend(); h != nil {
		in.Hits = h.GetValue()
		in.Peek = in.Hits == 0 // an explicit 0 only looks
	}
	entries := make([]rules.Entry, len(d.GetEntries()))
	for j, e := range d.GetEntries() {
		if e.GetKey() == "" {
			return ed, decision.Invalid("descriptors[%d].entries[%d].key: must not be empty", i, j)
		}
		entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	if o := d.GetLimit(); o != nil {
		lim, err := overrideLimit(m.GetDomain(), o) // checked even for an unknown domain
		if err != nil {
			return ed, decision.Invalid("descriptors[%d].limit: %v", i, err)
		}
		if dom != nil {
			ed.lim = lim
		}
	} else if dom != nil {
		ed.lim = dom.Match(entries)
	}
	// The key the store gets, escapes included, is what MaxKeyBytes bounds.
	in.StoreKey, in.Key = decision.EnvoyStoreKey(m.GetDomain(), entries)
	in.Envoy = ed.lim
	req, err := s.cfg.Decider.Validate(in)
	if err != nil {
		return ed, err
	}
	ed.req = req
	return ed, nil
}

// smallBatch is the most descriptors whose working slices Decide keeps on
// the stack.
const smallBatch = 4

// descFields are the field prefixes of the first descriptors, built once:
// every request names its descriptors' fields, though only an error shows
// them.
var descFields = func() (f [16]string) {
	for i := range f {
		f[i] = fmt.Sprintf("descriptors[%d].", i)
	}
	return f
}()

// descField returns the field prefix of descriptor i, "descriptors[i].".
func descField(i int) string {
	if i < len(descFields) {
		return descFields[i]
	}
	return fmt.Sprintf("descriptors[%d].", i)
}

// overrideLimit turns a descriptor's limit override into a limit, as
// envoyproxy/ratelimit applies it: in place of the configured one. Its
// metric label is the domain's, "<domain>.override", whatever the entries.
func overrideLimit(domName string, o *commonv3.RateLimitDescriptor_RateLimitOverride) (*rules.EnvoyLimit, error) {
	unit, w, _ := rules.EnvoyUnit(o.GetUnit().String())
	switch o.GetUnit() {
	case typev3.RateLimitUnit_SECOND, typev3.RateLimitUnit_MINUTE, typev3.RateLimitUnit_HOUR, typev3.RateLimitUnit_DAY:
	case typev3.RateLimitUnit_MONTH, typev3.RateLimitUnit_YEAR:
		// A calendar month or year in UTC, as a domain's unit.
		if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
			return nil, fmt.Errorf("unit_multiplier %d: a %v is a calendar window, not a multiple of one", m.GetValue(), o.GetUnit())
		}
		cal := window.Calendar{Unit: window.CalendarMonth}
		if o.GetUnit() == typev3.RateLimitUnit_YEAR {
			cal.Unit = window.CalendarYear
		}
		return &rules.EnvoyLimit{
			Stat:  domName + ".override",
			Unit:  unit,
			Limit: window.Limit{Limit: uint64(o.GetRequestsPerUnit()), Algorithm: window.FixedWindow, Calendar: cal},
		}, nil
	default:
		return nil, fmt.Errorf("unit %v is not supported (second, minute, hour, day, month or year)", o.GetUnit())
	}
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		// Compare before multiplying: the product can overflow.
		if n := uint64(m.GetValue()); n > uint64(window.MaxWindow/w) {
			return nil, fmt.Errorf("unit_multiplier %d makes a window longer than %v", n, window.MaxWindow)
		}
		w *= time.Duration(m.GetValue())
	}
	return &rules.EnvoyLimit{
		Stat:  domName + ".override",
		Unit:  unit,
		Limit: window.Limit{Limit: uint64(o.GetRequestsPerUnit()), Window: w, Algorithm: window.SlidingWindow},
	}, nil
}

// statusMsgs holds the messages of one descriptor's status, allocated
// together.
type statusMsgs struct {
	st  rlsv3.RateLimitResponse_DescriptorStatus
	lim rlsv3.RateLimitResponse_RateLimit
	dur durationpb.Duration
}

// status builds a descriptor's status in m. When resetBucket is not zero,
// duration_until_reset is the time to the end of that bucket.
func (m *statusMsgs) status(lim *rules.EnvoyLimit, allowed bool, remaining uint64, resetBucket int64, now time.Time) *rlsv3.RateLimitResponse_DescriptorStatus {
	m.lim.Name, m.lim.RequestsPerUnit, m.lim.Unit = lim.Name, clamp32(lim.Limit.Limit), lim.Unit
	st := &m.st
	st.Code, st.CurrentLimit, st.LimitRemaining = rlsv3.RateLimitResponse_OVER_LIMIT, &m.lim, clamp32(remaining)
	if allowed {
		st.Code = rlsv3.RateLimitResponse_OK
	}
	if resetBucket != 0 {
		_, end := window.BucketSpan(lim.Limit.BucketWindow(resetBucket), resetBucket)
		st.DurationUntilReset = m.duration(time.UnixMilli(end).Sub(now))
	}
	return st
}

// duration sets m's duration to d, as durationpb.New does, and returns it.
func (m *statusMsgs) duration(d time.Duration) *durationpb.Duration {
	m.dur.Seconds, m.dur.Nanos = int64(d/time.Second), int32(d%time.Second)
	return &m.dur
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
func (s *Service) rlsHeaders(statuses []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
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
	h := s.cfg.Headers
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
