// Package ratelimitheader writes a rate-limit decision as HTTP response
// headers, the same way for rlnode's /check endpoint and for the Go
// client's middleware.
//
// The headers follow draft-ietf-httpapi-ratelimit-headers-11, whose two
// fields are Structured Field Lists (RFC 9651) of one item each:
//
//	RateLimit-Policy: "api";q=100;w=60
//	RateLimit: "api";r=42;t=17
//
// The item is the policy's name as an sf-string. In RateLimit-Policy, q is
// the quota (the limit) and w the window in seconds, rounded up (omitted
// when unknown). In RateLimit, r is the available quota (remaining hits)
// and t the effective window in seconds, rounded up: the time until the
// full limit is available again when the request was allowed, and the time
// until the same request would be allowed (as Retry-After) when it was
// denied, so that Retry-After never points before the end of the effective
// window, as the draft asks. A denial also gets Retry-After, in whole
// seconds rounded up, at least 1.
//
// The legacy headers, when asked for, are X-RateLimit-Limit (the limit),
// X-RateLimit-Remaining (remaining hits) and X-RateLimit-Reset (seconds
// until the full limit is available again, rounded up; a delta, not a Unix
// time, as envoyproxy/ratelimit sends it).
//
// The package imports only the standard library, so that the public client
// can share it without pulling in the server.
package ratelimitheader

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names.
const (
	Policy     = "RateLimit-Policy"
	RateLimit  = "RateLimit"
	RetryAfter = "Retry-After"

	LegacyLimit     = "X-RateLimit-Limit"
	LegacyRemaining = "X-RateLimit-Remaining"
	LegacyReset     = "X-RateLimit-Reset"
)

// Values describe one decision. The zero value is a denied decision of a
// zero limit under the policy "default".
type Values struct {
	// Policy names the quota policy, for example the rule's name; empty
	// means "default". Bytes outside printable ASCII are replaced by '?'.
	Policy string
	// Allowed reports whether the request was admitted.
	Allowed bool
	// Limit is the limit that applied (the policy's quota, q).
	Limit uint64
	// Window is the limit's window; zero omits w from RateLimit-Policy.
	Window time.Duration
	// Remaining is how many more hits would be admitted now (r).
	Remaining uint64
	// ResetAfter is how long until the full limit is available again.
	ResetAfter time.Duration
	// RetryAfter is how long until the same request would be admitted;
	// used when !Allowed.
	RetryAfter time.Duration
}

// Set writes v's headers into h, replacing any there. legacy adds the
// X-RateLimit-* headers.
func Set(h http.Header, v Values, legacy bool) {
	name := sfString(v.Policy)
	var b strings.Builder
	b.WriteString(name)
	b.WriteString(";q=")
	b.WriteString(strconv.FormatUint(v.Limit, 10))
	if v.Window > 0 {
		b.WriteString(";w=")
		b.WriteString(strconv.FormatInt(max(Seconds(v.Window), 1), 10))
	}
	h.Set(Policy, b.String())

	t := Seconds(v.ResetAfter)
	if !v.Allowed {
		t = max(Seconds(v.RetryAfter), 1)
		h.Set(RetryAfter, strconv.FormatInt(t, 10))
	} else {
		h.Del(RetryAfter)
	}
	h.Set(RateLimit, name+";r="+strconv.FormatUint(v.Remaining, 10)+";t="+strconv.FormatInt(t, 10))

	if legacy {
		h.Set(LegacyLimit, strconv.FormatUint(v.Limit, 10))
		h.Set(LegacyRemaining, strconv.FormatUint(v.Remaining, 10))
		h.Set(LegacyReset, strconv.FormatInt(Seconds(v.ResetAfter), 10))
	}
}

// maxSeconds bounds Seconds: sf-integers have at most 15 digits.
const maxSeconds = 999_999_999_999_999

// Seconds returns d in whole seconds, rounded up; 0 for d <= 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return min(s, maxSeconds)
}

// sfString returns s as an RFC 9651 sf-string: quoted, with '"' and '\'
// escaped and bytes outside 0x20-0x7E replaced by '?'.
func sfString(s string) string {
	if s == "" {
		s = "default"
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
