package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Scope binds a token to the rules, inline limits, Envoy domains and key
// prefixes it may spend, so that a token given to one tenant cannot spend
// another tenant's counters. A scope is closed: a token bound to one
// allows only what it names, and every dimension it does not name is
// refused (a nil *Scope, a token bound to nothing, allows everything):
//
//   - Rules: the named rules a Connect call or a /check request may use;
//     none when empty.
//   - Inline: whether inline limits (whose keys all tenants share) may be
//     used by Connect calls.
//   - Domains: the Envoy domains ShouldRateLimit may use; none when empty.
//   - Prefixes: the prefixes a Connect call's key must start with, under
//     a named rule or an inline limit; empty: any key of what Rules and
//     Inline allow. Keys that /check derives from headers, and Envoy's
//     descriptors, are bound by Rules and Domains instead.
//
// Watching a counter key on the status page needs what deciding on it
// needs (see status.Authorize).
//
// In a token file a bound token is its line's first word followed by
// rules=a,b inline=yes domains=d prefixes=p1,p2 admin in any order;
// prefixes= alone names nothing to spend and is refused.
type Scope struct {
	Rules    []string
	Inline   bool
	Domains  []string
	Prefixes []string
	// Admin allows the administrative calls (Reset) on any key; the word
	// admin in a token file's entry sets it. It binds nothing else: a
	// token with admin alone spends nothing.
	Admin bool
	// ID names the token in logs without telling it: "sha256:" and the
	// first 8 hex digits of its digest. Set by [Tokens.Set].
	ID string
}

// AllowAdmin reports whether the scope allows administrative calls such
// as Reset. A token bound to nothing (nil) does not: admin is granted only
// by name.
func (s *Scope) AllowAdmin() bool { return s != nil && s.Admin }

// parseEntry splits a token file entry into its token and scope (nil for
// a token bound to nothing). Errors never show the token.
func parseEntry(entry string) (string, *Scope, error) {
	words := strings.Fields(entry)
	if len(words) == 0 {
		return "", nil, fmt.Errorf("empty entry")
	}
	if len(words) == 1 {
		return words[0], nil, nil
	}
	sc := &Scope{}
	inline := false
	for i, w := range words[1:] {
		if w == "admin" {
			if sc.Admin {
				return "", nil, errors.New("admin given twice")
			}
			sc.Admin = true
			continue
		}
		name, list, ok := strings.Cut(w, "=")
		var dst *[]string
		switch name {
		case "rules":
			dst = &sc.Rules
		case "domains":
			dst = &sc.Domains
		case "prefixes":
			dst = &sc.Prefixes
		case "inline":
			if inline {
				return "", nil, errors.New("inline= given twice")
			}
			inline = true
			switch list {
			case "yes":
				sc.Inline = true
			case "no":
			default:
				return "", nil, errors.New("inline=: want yes or no")
			}
			continue
		default:
			ok = false
		}
		if !ok {
			// The word is not quoted: a token with a space in it must not
			// reach the logs.
			return "", nil, fmt.Errorf("word %d is not admin, or rules=, inline=, domains= or prefixes= followed by a comma-separated list (tokens hold no spaces)", i+2)
		}
		if *dst != nil {
			return "", nil, fmt.Errorf("%s= given twice", name)
		}
		*dst = []string{}
		for _, v := range strings.Split(list, ",") {
			if v == "" {
				return "", nil, fmt.Errorf("%s=: an empty entry", name)
			}
			*dst = append(*dst, v)
		}
	}
	if sc.Prefixes != nil && sc.Rules == nil && !sc.Inline {
		return "", nil, errors.New("prefixes= binds the keys of rules= or inline=yes, and neither is given: a bound token may spend only what it names")
	}
	return words[0], sc, nil
}

// Token returns the token of a token file entry (its first word), for
// callers that must mask it in logs.
func Token(entry string) string {
	if f := strings.Fields(entry); len(f) > 0 {
		return f[0]
	}
	return ""
}

// AllowRule reports whether the scope names the rule; a nil Scope allows
// everything.
func (s *Scope) AllowRule(name string) bool {
	return s == nil || slices.Contains(s.Rules, name)
}

// AllowInline reports whether the scope allows inline limits.
func (s *Scope) AllowInline() bool { return s == nil || s.Inline }

// AllowDomain reports whether the scope names the Envoy domain.
func (s *Scope) AllowDomain(name string) bool {
	return s == nil || slices.Contains(s.Domains, name)
}

// AllowKey reports whether a Connect call's key has an allowed prefix
// (any key when the scope names no prefix).
func (s *Scope) AllowKey(key string) bool {
	if s == nil || s.Prefixes == nil {
		return true
	}
	for _, p := range s.Prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

type scopeKey struct{}

// NewContext returns ctx carrying the scope of the request's token.
func NewContext(ctx context.Context, s *Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// FromContext returns the scope RequireBearer attached to ctx: nil when
// the token is bound to nothing or authentication is off.
func FromContext(ctx context.Context) *Scope {
	s, _ := ctx.Value(scopeKey{}).(*Scope)
	return s
}
