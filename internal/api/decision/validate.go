package decision

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// Input is an entry point's request, before validation.
type Input struct {
	// NS is the namespace the key lives in.
	NS Namespace
	// Field prefixes the names of fields in error messages ("checks[3].").
	Field string
	// HitsField names the hits in error messages; default "hits".
	HitsField string
	// Key is the caller's key; for Envoy, the encoded descriptor
	// ([EnvoyDescriptor]).
	Key string
	// StoreKey, when set, is the namespaced store key of Key, already
	// built by the adapter ([EnvoyStoreKey]), so that it is not built
	// twice.
	StoreKey string
	// Hits are the hits to spend; 0 means 1.
	Hits uint64
	// Peek decides without consuming anything.
	Peek bool
	// Rule names the rule (Rule and ForwardAuth; in Inline it must be
	// empty, and naming one makes the namespace Rule).
	Rule string
	// Limit is an inline limit from the wire (Inline).
	Limit *ratelimitv1.Limit
	// Envoy is the matched or override limit (Envoy; nil when none
	// applies, which checks the key and hits only). Its hits may exceed
	// its limit and its limit may be 0: the adapter answers those
	// over the limit with [Decider.Refuse], as Envoy expects, instead of an
	// error.
	Envoy *rules.EnvoyLimit
	// Now is the instant of the decision.
	Now time.Time
	// Scope, when set, binds the caller's token to rules and key
	// prefixes ([auth.Scope]); a request outside it is permission_denied.
	Scope *auth.Scope
}

// Request is a validated request, ready for [Decider.Decide].

// Invalid returns an invalid_argument error whose message is the formatted
// text.
func Invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// Message returns err's message without the code prefix Connect adds.
func Message(err error) string {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// Label returns the metric label of a request naming rule: its name when
// it is a configured rule, else [LabelUnknown].
func (d *Decider) Label(rule string) string {
	if _, ok := d.rules.Load().Lookup(rule); ok {
		return rule
	}
	return LabelUnknown
}

// RecordError counts an invalid request under label.
func (d *Decider) RecordError(label string) {
	d.count(label, outcomeError).Inc()
}

// Validate checks in and returns the store request it asks for, or an
// invalid_argument error whose message names the field. It is the only
// place requests are checked: key bounds, the rule or inline limit, hits
// (0 means 1; at most the limit, except Envoy's; at most MaxHits), the
// token's scope (permission_denied), and the counter key in in.NS's
// namespace. An invalid request that would have consumed is counted as an
// error under the returned Label.
func (d *Decider) Validate(in Input) (Request, error) {
	r, err := d.validate(in)
	if err != nil && !in.Peek {
		d.RecordError(r.Label)
	}
	return r, err
}

func (d *Decider) validate(in Input) (Request, error) {
	f := in.Field
	hitsField := in.HitsField
	if hitsField == "" {
		hitsField = "hits"
	}
	r := Request{Label: LabelInline}
	ns := in.NS
	switch {
	case ns == Envoy && in.Envoy != nil:
		r.Label = in.Envoy.Stat
	case ns == Envoy || ns == ForwardAuth || in.Rule != "":
		r.Label = LabelUnknown
	}
	if in.Hits > d.cfg.MaxHits {
		return r, Invalid("%s%s: %d is more than the maximum of %d", f, hitsField, in.Hits, d.cfg.MaxHits)
	}
	switch {
	case in.Key == "":
		return r, Invalid("%skey: must not be empty", f)
	case len(in.Key) > d.cfg.MaxKeyBytes && ns == Envoy:
		return r, Invalid("%s: domain and entries make a %d-byte key, more than the maximum of %d", strings.TrimSuffix(f, "."), len(in.Key), d.cfg.MaxKeyBytes)
	case len(in.Key) > d.cfg.MaxKeyBytes:
		return r, Invalid("%skey: %d bytes, more than the maximum of %d", f, len(in.Key), d.cfg.MaxKeyBytes)
	}
	if err := checkScope(in); err != nil {
		if in.Rule != "" {
			r.Label = d.Label(in.Rule)
		}
		return r, err
	}
	var l window.Limit
	switch {
	case ns == Envoy && in.Envoy == nil:
		return r, nil // no limit applies: valid, with nothing to decide
	case ns == Envoy:
		l = in.Envoy.Limit
		r.Shadow, r.Scope = in.Envoy.Shadow, in.Envoy.Scope
		if n := d.refusing(l.Algorithm, r.Scope); n > 1 && !in.Envoy.Unlimited {
			return r, refuseRegionLocal(n, l.Algorithm, f+"rate_limit.scope: limit "+in.Envoy.Stat, "its", ": region on its rate_limit", false)
		}
	case in.Rule != "" && in.Limit != nil:
		return r, Invalid("%srule: set exactly one of rule and limit, not both", f)
	case in.Rule == "" && in.Limit == nil:
		return r, Invalid("%slimit: required when no rule is named (set exactly one of rule and limit)", f)
	case in.Rule != "":
		rule, ok := d.rules.Load().Lookup(in.Rule)
		if !ok {
			return r, Invalid("%srule: unknown rule %q", f, truncate(in.Rule, 128))
		}
		if ns == Inline {
			ns = Rule
		}
		r.Label, r.Shadow, r.Scope, l = rule.Name, rule.Shadow, rule.Scope, rule.Limit
		if n := d.refusing(l.Algorithm, r.Scope); n > 1 {
			return r, refuseRegionLocal(n, l.Algorithm, fmt.Sprintf("%srule: rule %q: scope", f, rule.Name), "the rule's", ": region in its rules file", false)
		}
	default:
		var err error
		if l, r.Scope, err = d.inlineLimit(f, in.Limit); err != nil {
			return r, err
		}
		if err := checkCeilings(f, in.Scope, l); err != nil {
			return r, err
		}
	}
	hits := max(in.Hits, 1)
	if ns != Envoy && hits > l.Capacity() {
		if l.Burst > 0 {
			return r, Invalid("%s%s: %d is more than the burst of %d", f, hitsField, hits, l.Burst)
		}
		return r, Invalid("%s%s: %d is more than the limit of %d", f, hitsField, hits, l.Limit)
	}
	key := in.StoreKey
	switch {
	case key == "":
		key = counterKey(ns, in.Rule, in.Key, r.Scope)
	case r.Scope == rules.ScopeRegion:
		key = tagRegion + key // StoreKey is the global-scope key
	}
	r.Store = region.Request{Key: key, Limit: l, Hits: hits, Now: in.Now, Peek: in.Peek}
	r.Shadow = r.Shadow || (d.cfg.ShadowMode && ns != Envoy)
	return r, nil
}

// checkScope refuses a request that its token's scope does not allow.
func checkScope(in Input) error {
	sc := in.Scope
	if sc == nil {
		return nil
	}
	f := in.Field
	switch {
	case in.NS == Envoy:
		return nil // bound by domain, in the Envoy adapter
	case in.Rule == "" && in.NS == Inline && !sc.AllowInline():
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%slimit: this token may not use inline limits (its scope does not name inline=yes)", f))
	case in.Rule != "" && !sc.AllowRule(in.Rule):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%srule: this token may not use rule %q", f, truncate(in.Rule, 128)))
	case in.NS != ForwardAuth && !sc.AllowKey(in.Key):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%skey: this token may only use keys with its prefixes", f))
	}
	return nil
}

// checkCeilings refuses an inline limit over its token's ceilings.
func checkCeilings(f string, sc *auth.Scope, l window.Limit) error {
	switch {
	case sc == nil:
		return nil
	case sc.MaxWindow > 0 && max(l.Window, l.Calendar.Unit.Longest()) > sc.MaxWindow:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%slimit.window: this token may not ask for a window longer than %v", f, sc.MaxWindow))
	case sc.MaxLimit > 0 && l.Limit > sc.MaxLimit:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%slimit.limit: this token may not ask for a limit over %d", f, sc.MaxLimit))
	}
	return nil
}

// refusing returns how many regions the Pool sees when a limit of
// algorithm a with scope sc is refused in a cluster of more than one
// ([rules.RegionLocal]), else 1.
func (d *Decider) refusing(a window.Algorithm, sc rules.Scope) int {
	if d.cfg.Pool == nil || !rules.RegionLocal(a, sc) {
		return 1
	}
	return max(d.cfg.Pool.Regions(), 1)
}

// refuseRegionLocal is the invalid_argument error that refuses a
// region-local algorithm a with global scope in a cluster of n regions.
// where names the field and the limit, whose the scope's owner, and
// setRegion how to ask for region scope; proto names the algorithms as
// the API's enum does rather than as configuration does.
func refuseRegionLocal(n int, a window.Algorithm, where, whose, setRegion string, proto bool) error {
	name := window.Algorithm.String
	if proto {
		name = func(a window.Algorithm) string { return "ALGORITHM_" + strings.ToUpper(a.String()) }
	}
	return Invalid("%s: %s is region-local and %s scope is global, and this cluster has %d regions: "+
		"set scope%s for one limit per region, or use %s or %s for one global limit",
		where, name(a), whose, n, setRegion, name(window.SlidingWindow), name(window.FixedWindow))
}

// inlineLimit converts and checks an inline limit, within MaxWindow and
// MaxLogLimit, and its scope.
func (d *Decider) inlineLimit(field string, lim *ratelimitv1.Limit) (window.Limit, rules.Scope, error) {
	l, err := d.inlineWindow(field, lim)
	if err != nil {
		return l, 0, err
	}
	var sc rules.Scope
	switch s := lim.GetScope(); s {
	case ratelimitv1.Scope_SCOPE_UNSPECIFIED, ratelimitv1.Scope_SCOPE_GLOBAL:
		sc = rules.ScopeGlobal
	case ratelimitv1.Scope_SCOPE_REGION:
		sc = rules.ScopeRegion
	default:
		return l, 0, Invalid("%slimit.scope: unknown scope %d (want SCOPE_GLOBAL or SCOPE_REGION)", field, int32(s))
	}
	if n := d.refusing(l.Algorithm, sc); n > 1 {
		return l, 0, refuseRegionLocal(n, l.Algorithm, field+"limit.scope", "the", " to SCOPE_REGION", true)
	}
	return l, sc, nil
}

// inlineWindow converts and checks an inline limit's limit, window and
// algorithm.
func (d *Decider) inlineWindow(field string, lim *ratelimitv1.Limit) (window.Limit, error) {
	var l window.Limit
	if n := lim.GetLimit(); n < 1 || n > window.MaxLimit {
		return l, Invalid("%slimit.limit: must be from 1 to 2^53 (%d), got %d", field, uint64(window.MaxLimit), n)
	}
	if m := d.cfg.MaxInlineLimit; m > 0 && lim.GetLimit() > m {
		return l, Invalid("%slimit.limit: %d is more than the maximum of %d", field, lim.GetLimit(), m)
	}
	l.Limit = lim.GetLimit()
	if lim.GetCalendar() != ratelimitv1.Calendar_CALENDAR_UNSPECIFIED || lim.GetTimeZone() != "" {
		return d.inlineCalendar(field, lim, l)
	}
	w := lim.GetWindow()
	if w == nil {
		return l, Invalid("%slimit.window: required, from %v to %v", field, window.MinWindow, window.MaxWindow)
	}
	if w.CheckValid() != nil {
		return l, Invalid("%slimit.window: not a valid duration (seconds %d, nanos %d)", field, w.GetSeconds(), w.GetNanos())
	}
	if err := rules.CheckWindow(w.AsDuration()); err != nil {
		return l, Invalid("%slimit.window: %v", field, err)
	}
	if w.AsDuration() > d.cfg.MaxWindow {
		return l, Invalid("%slimit.window: %v is more than the maximum of %v", field, w.AsDuration(), d.cfg.MaxWindow)
	}
	l.Window = w.AsDuration()
	switch a := lim.GetAlgorithm(); a {
	case ratelimitv1.Algorithm_ALGORITHM_UNSPECIFIED, ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW:
		l.Algorithm = window.SlidingWindow
	case ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW:
		l.Algorithm = window.FixedWindow
	case ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET:
		l.Algorithm = window.TokenBucket
	case ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG:
		l.Algorithm = window.SlidingLog
	case ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW_TWO_BUCKET:
		l.Algorithm = window.SlidingWindowTwoBucket
	default:
		return l, Invalid("%slimit.algorithm: unknown algorithm %d", field, int32(a))
	}
	if lim.GetStrict() {
		if !l.Algorithm.Trails() {
			return l, Invalid("%slimit.strict: applies to the sliding window algorithm only, not %s", field, l.Algorithm)
		}
		l.Strict = true
	}
	if b := lim.GetBurst(); b > 0 {
		if l.Algorithm != window.TokenBucket {
			return l, Invalid("%slimit.burst: applies to the token bucket algorithm only, not %s", field, l.Algorithm)
		}
		if b/window.MaxBurstFactor > l.Limit || (b/window.MaxBurstFactor == l.Limit && b%window.MaxBurstFactor != 0) || b > window.MaxLimit {
			return l, Invalid("%slimit.burst: must be at most %d times the limit (%d) and at most 2^53, got %d", field, window.MaxBurstFactor, l.Limit, b)
		}
		l.Burst = b
	}
	if l.Algorithm == window.SlidingLog && l.Limit > d.cfg.MaxLogLimit {
		return l, Invalid("%slimit.limit: %d is more than the maximum of %d for sliding_log (its memory grows with the limit)", field, l.Limit, d.cfg.MaxLogLimit)
	}
	if err := l.Validate(); err != nil {
		return l, Invalid("%slimit: %v", field, err)
	}
	return l, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
