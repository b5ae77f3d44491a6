// Package forwardauth owns the HTTP check endpoint that proxies call for
// forward authentication (nginx auth_request, Traefik ForwardAuth, Caddy
// forward_auth, Envoy ext_authz over HTTP): it derives a key from the
// request's headers, decides one hit of a named rule through
// [decision.Decider] in the forward-auth namespace, and answers with a
// status code and rate-limit headers.
package forwardauth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"connectrpc.com/connect"

	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/ratelimitheader"
)

// Defaults for zero [Config] fields.
const (
	DefaultPath       = "/check"
	DefaultKeyHeaders = "X-Forwarded-For"
	DefaultDenyStatus = http.StatusTooManyRequests
	// RuleHeader names the rule when the path does not.
	RuleHeader = "X-RateLimit-Rule"
)

// Config configures the HTTP check endpoint that proxies call for
// forward authentication (nginx auth_request, Traefik ForwardAuth, Caddy
// forward_auth, Envoy ext_authz over HTTP). Zero fields mean the default.
//
// A request to Path or Path/<rule>[/anything], with any method, spends one
// hit of a named rule for a key taken from its headers and answers:
//
//	200          allowed
//	429          denied (DenyStatus, or the deny_status=403 query parameter)
//	400          bad input: no key header, a malformed X-Forwarded-For,
//	             no rule or an unknown rule; the text says which
//	503          the store cannot decide
//
// Allowed and denied answers carry the headers of [ratelimitheader.Set]
// (RateLimit-Policy and RateLimit; Retry-After when denied; X-RateLimit-*
// with LegacyHeaders).
//
// The rule is the first path segment after Path; else the X-RateLimit-Rule
// header; else DefaultRule. The path wins because a client cannot change
// the URL a proxy's auth subrequest goes to, while it may send any header.
//
// The key comes from KeyHeaders, a list of alternatives tried in order; the
// first alternative whose headers are all present and non-empty gives the
// key. An alternative is one header name or several joined by "+", which
// combines them. Each header contributes "<lower-case name>=<value>", and a
// combination joins those with "&", so keys from different headers never
// collide: X-Forwarded-For "203.0.113.7, 10.0.0.1" gives
// "x-forwarded-for=203.0.113.7". Values are normalised:
//
//   - X-Forwarded-For and X-Real-IP: the leftmost address, which must parse
//     as an IP address (a port is dropped). The proxy must overwrite
//     X-Forwarded-For with the client's address (nginx:
//     proxy_set_header X-Forwarded-For $remote_addr), or clients choose
//     their own key.
//   - Authorization, Proxy-Authorization, Cookie, and any header whose name
//     contains "key", "token" or "secret": "sha256:" and the first 32 hex
//     digits of the value's SHA-256, so credentials never reach the store,
//     gossip, logs or metrics.
//   - any other header: its first value as sent.
//
// The key is counted under the rule in the forward-auth namespace
// ([decision.ForwardAuthKey]), apart from the same rule's counters for
// Connect callers, so that no API caller can spend a proxy's counters.
type Config struct {
	// Path is the endpoint's path, without a trailing slash; default
	// "/check". It is served at Path and under Path + "/".
	Path string
	// KeyHeaders are the alternatives the key comes from, in order (see
	// above); default one alternative, X-Forwarded-For.
	KeyHeaders []string
	// DefaultRule is the rule used when neither the path nor the
	// X-RateLimit-Rule header names one; empty means a rule is required.
	DefaultRule string
	// DenyStatus is the status of a denial: 429 (default) or 403, which
	// nginx's auth_request passes on (it turns a 429 into a 500).
	DenyStatus int
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset to the draft's headers.
	LegacyHeaders bool
}

// Handler serves the check endpoint at Config.Path and under it. It is
// safe for concurrent use.
type Handler struct {
	dec     *decision.Decider
	now     func() time.Time
	cfg     Config
	keyAlts [][]keyHeader
}

// keyHeader is one header a key alternative reads.
type keyHeader struct {
	name   string // canonical header name
	label  string // lower-case name used in the key
	ip     bool   // value is an address list: take the leftmost address
	secret bool   // value is hashed
}

// reservedPaths are served by the handler itself.
var reservedPaths = []string{"/metrics", "/healthz", "/readyz"}

// withDefaults returns cfg with its zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if len(cfg.KeyHeaders) == 0 {
		cfg.KeyHeaders = []string{DefaultKeyHeaders}
	}
	if cfg.DenyStatus == 0 {
		cfg.DenyStatus = DefaultDenyStatus
	}
	return cfg
}

// Validate reports whether New accepts cfg, its zero fields taking their
// defaults: nil, or an [errors.Join] of one error per problem, each naming
// its field ("DenyStatus: 500, want 429 or 403").
func (cfg Config) Validate() error {
	cfg = cfg.withDefaults()
	var errs []error
	switch p := cfg.Path; {
	case !strings.HasPrefix(p, "/") || p == "/" || strings.HasSuffix(p, "/"):
		errs = append(errs, fmt.Errorf("Path: %q must start with '/', have a name and not end with '/'", p))
	case strings.ContainsAny(p, "{}? \t#%"):
		errs = append(errs, fmt.Errorf("Path: %q must not contain '{', '}', '?', '#', '%%' or spaces", p))
	case strings.HasPrefix(p, "/ratelimit.") || strings.HasPrefix(p, "/grpc.") || strings.HasPrefix(p, "/envoy."):
		errs = append(errs, fmt.Errorf("Path: %q is in the RPC namespace", p))
	case slices.Contains(reservedPaths, p):
		errs = append(errs, fmt.Errorf("Path: %q is already served", p))
	}
	if cfg.DenyStatus != http.StatusTooManyRequests && cfg.DenyStatus != http.StatusForbidden {
		errs = append(errs, fmt.Errorf("DenyStatus: %d, want 429 or 403", cfg.DenyStatus))
	}
	if cfg.DefaultRule != "" {
		if err := rules.CheckName(cfg.DefaultRule); err != nil {
			errs = append(errs, fmt.Errorf("DefaultRule: %w", err))
		}
	}
	for i, alt := range cfg.KeyHeaders {
		for name := range strings.SplitSeq(alt, "+") {
			if name = strings.TrimSpace(name); !httpguts.ValidHeaderFieldName(name) {
				errs = append(errs, fmt.Errorf("KeyHeaders[%d]: %q is not a header name (join several with '+')", i, name))
			}
		}
	}
	return errors.Join(errs...)
}

// New validates cfg, fills its defaults and returns the endpoint, deciding
// through dec at the instants now gives.
func New(cfg Config, dec *decision.Decider, now func() time.Time) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	h := &Handler{dec: dec, now: now, cfg: cfg}
	for _, alt := range cfg.KeyHeaders {
		var hs []keyHeader
		for name := range strings.SplitSeq(alt, "+") {
			hs = append(hs, newKeyHeader(strings.TrimSpace(name)))
		}
		h.keyAlts = append(h.keyAlts, hs)
	}
	return h, nil
}

func newKeyHeader(name string) keyHeader {
	k := keyHeader{name: http.CanonicalHeaderKey(name), label: strings.ToLower(name)}
	switch k.name {
	case "X-Forwarded-For", "X-Real-Ip":
		k.ip = true
	case "Authorization", "Proxy-Authorization", "Cookie":
		k.secret = true
	default:
		k.secret = strings.Contains(k.label, "key") || strings.Contains(k.label, "token") || strings.Contains(k.label, "secret")
	}
	return k
}

// key derives the request's key from the first alternative whose headers
// are all present. Error messages name headers, never their values.
func (h *Handler) key(hdr http.Header) (string, error) {
alts:
	for _, alt := range h.keyAlts {
		var b strings.Builder
		for i, kh := range alt {
			v := strings.TrimSpace(hdr.Get(kh.name))
			if v == "" {
				continue alts
			}
			switch {
			case kh.ip:
				first, _, _ := strings.Cut(v, ",")
				first = strings.TrimSpace(first)
				addr, err := netip.ParseAddr(first)
				if err != nil {
					ap, perr := netip.ParseAddrPort(first)
					if perr != nil {
						return "", fmt.Errorf("%s: the leftmost entry is not an IP address", kh.name)
					}
					addr = ap.Addr()
				}
				v = addr.Unmap().WithZone("").String()
			case kh.secret:
				sum := sha256.Sum256([]byte(v))
				v = "sha256:" + hex.EncodeToString(sum[:16])
			}
			if i > 0 {
				b.WriteByte('&')
			}
			b.WriteString(kh.label)
			b.WriteByte('=')
			b.WriteString(v)
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("no key: none of the key headers is present (%s)", strings.Join(h.cfg.KeyHeaders, ", "))
}

// rule returns the rule the request names, or "".
func (h *Handler) rule(r *http.Request) string {
	rest := strings.TrimPrefix(r.URL.Path, h.cfg.Path)
	rest = strings.TrimPrefix(rest, "/")
	if name, _, _ := strings.Cut(rest, "/"); name != "" {
		return name
	}
	if name := r.Header.Get(RuleHeader); name != "" {
		return name
	}
	return h.cfg.DefaultRule
}

// Path returns the endpoint's path (Config.Path, defaulted).
func (h *Handler) Path() string { return h.cfg.Path }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer h.dec.Observe("HTTPCheck", time.Now())
	w.Header().Set("Cache-Control", "no-store")

	denyStatus := h.cfg.DenyStatus
	if v := r.URL.Query().Get("deny_status"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || (n != http.StatusTooManyRequests && n != http.StatusForbidden) {
			h.dec.RecordError(decision.LabelUnknown)
			http.Error(w, fmt.Sprintf("deny_status: %q, want 429 or 403", truncate(v, 16)), http.StatusBadRequest)
			return
		}
		denyStatus = n
	}
	ruleName := h.rule(r)
	if ruleName == "" {
		h.dec.RecordError(decision.LabelUnknown)
		http.Error(w, fmt.Sprintf("rule: none named: put it in the path (%s/<rule>) or the %s header, or configure a default rule", h.cfg.Path, RuleHeader), http.StatusBadRequest)
		return
	}
	key, err := h.key(r.Header)
	if err != nil {
		h.dec.RecordError(h.dec.Label(ruleName))
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, err := h.dec.Validate(decision.Input{NS: decision.ForwardAuth, Key: key, Rule: ruleName, Now: h.now(), Scope: auth.FromContext(r.Context())})
	if err != nil {
		status := http.StatusBadRequest
		if connect.CodeOf(err) == connect.CodePermissionDenied {
			status = http.StatusForbidden
		}
		http.Error(w, decision.Message(err), status)
		return
	}
	var out [1]decision.Outcome
	if err := h.dec.Decide(r.Context(), []decision.Request{req}, out[:]); err != nil {
		// Decide fails only when the store cannot decide.
		http.Error(w, decision.Message(err), http.StatusServiceUnavailable)
		return
	}
	d := out[0]
	win := req.Store.Limit.BucketWindow(d.Bucket) // a calendar bucket's: minus its length
	ratelimitheader.Set(w.Header(), ratelimitheader.Values{
		Policy:     req.Label,
		Allowed:    d.Allowed,
		Limit:      d.Limit,
		Window:     max(win, -win),
		Remaining:  d.Remaining,
		ResetAfter: d.ResetAfter,
		RetryAfter: d.RetryAfter,
	}, h.cfg.LegacyHeaders)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !d.Allowed {
		w.WriteHeader(denyStatus)
		fmt.Fprintf(w, "rate limited: retry after %ds\n", max(ratelimitheader.Seconds(d.RetryAfter), 1))
		return
	}
	fmt.Fprintln(w, "allowed")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
