// Package auth owns bearer-token authentication for the API: the token set
// ([Tokens], kept as SHA-256 digests and compared in constant time) and the
// [RequireBearer] middleware that answers refusals in each protocol's terms.
package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
)

// MinTokenBytes is the shortest bearer token [Tokens] accepts.
const MinTokenBytes = 16

// DefaultOpenPaths are the paths [RequireBearer] serves without a token
// when given none: liveness, readiness, metrics and gRPC health checking,
// which load balancers and Prometheus call without credentials.
var DefaultOpenPaths = []string{"/healthz", "/readyz", "/metrics", "/grpc.health.v1.Health/"}

// Tokens is a set of bearer tokens that may call the API.
//
// Only SHA-256 digests of the tokens are kept; Valid hashes the presented
// token and compares it with every digest in constant time
// (crypto/subtle), so neither the time taken nor an early exit tells a
// caller how much of a token matched, or which one.
//
// The zero value holds no token and accepts none. Safe for concurrent use;
// Set replaces the set atomically.
type Tokens struct {
	set      atomic.Pointer[tokenSet]
	rejected atomic.Uint64
}

// tokenSet is the tokens' digests and, at the same index, their scopes.
type tokenSet struct {
	digests [][sha256.Size]byte
	scopes  []*Scope
}

// NewTokens returns a set holding tokens; see Set.
func NewTokens(tokens []string) (*Tokens, error) {
	t := &Tokens{}
	if err := t.Set(tokens); err != nil {
		return nil, err
	}
	return t, nil
}

// Set replaces the tokens. Each entry is a token, optionally followed by
// its [Scope] (see there). Every token must be at least MinTokenBytes
// bytes of visible ASCII (no spaces); an empty list is refused, since it
// would lock every caller out. On error the previous tokens stay. Errors
// name a token by its position, never by its value.
func (t *Tokens) Set(entries []string) error {
	if len(entries) == 0 {
		return errors.New("auth: no bearer token given")
	}
	ts := &tokenSet{}
	for i, e := range entries {
		tok, sc, err := parseEntry(e)
		if err == nil {
			err = CheckToken(tok)
		}
		if err != nil {
			return fmt.Errorf("auth: token %d: %w", i+1, err)
		}
		d := sha256.Sum256([]byte(tok))
		if sc != nil {
			sc.ID = "sha256:" + hex.EncodeToString(d[:4])
		}
		ts.digests = append(ts.digests, d)
		ts.scopes = append(ts.scopes, sc)
	}
	t.set.Store(ts)
	return nil
}

// CheckEntry explains why entry (a token, optionally followed by its
// [Scope]) is not acceptable, or returns nil. The error names neither the
// token nor where it came from: callers add that ("RLNODE_AUTH_TOKEN: ",
// "tokens.txt:3: ").
func CheckEntry(entry string) error {
	tok, _, err := parseEntry(entry)
	if err != nil {
		return err
	}
	return CheckToken(tok)
}

// CheckToken explains why tok is not acceptable as a bearer token (fewer
// than MinTokenBytes bytes, or not visible ASCII), or returns nil. Like
// CheckEntry, it never repeats the token.
func CheckToken(tok string) error {
	if len(tok) < MinTokenBytes {
		return fmt.Errorf("%d bytes, want at least %d", len(tok), MinTokenBytes)
	}
	for _, c := range []byte(tok) {
		if c <= ' ' || c > '~' {
			return errors.New("must be visible ASCII without spaces")
		}
	}
	return nil
}

// Len returns how many tokens the set holds.
func (t *Tokens) Len() int {
	if ts := t.set.Load(); ts != nil {
		return len(ts.digests)
	}
	return 0
}

// Rejected returns how many requests RequireBearer refused with these
// tokens (missing, malformed or unknown token).
func (t *Tokens) Rejected() uint64 { return t.rejected.Load() }

// Valid reports whether tok is one of the tokens.
func (t *Tokens) Valid(tok string) bool {
	_, ok := t.Lookup(tok)
	return ok
}

// Lookup reports whether tok is one of the tokens and returns its scope
// (nil when it is bound to nothing). Every digest is compared, in
// constant time, whichever matches.
func (t *Tokens) Lookup(tok string) (*Scope, bool) {
	ts := t.set.Load()
	if ts == nil {
		return nil, false
	}
	d := sha256.Sum256([]byte(tok))
	found, idx := 0, 0
	for i := range ts.digests {
		eq := subtle.ConstantTimeCompare(d[:], ts.digests[i][:])
		found |= eq
		idx = subtle.ConstantTimeSelect(eq, i, idx)
	}
	if found != 1 {
		return nil, false
	}
	return ts.scopes[idx], true
}

// ParseTokens reads the entries of a token file: one token per line,
// optionally followed by its scope (see [Scope]); blank lines and lines
// starting with # are skipped; surrounding spaces are trimmed.
func ParseTokens(b []byte) []string {
	var out []string
	for _, l := range ParseTokenLines(b) {
		out = append(out, l.Entry)
	}
	return out
}

// TokenLine is one entry of a token file and the line (from 1) it is on.
type TokenLine struct {
	Line  int
	Entry string
}

// ParseTokenLines is [ParseTokens], keeping each entry's line so that a
// problem can be told by where it is in the file.
func ParseTokenLines(b []byte) []TokenLine {
	var out []TokenLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, TokenLine{Line: n, Entry: line})
	}
	return out
}

// RequireBearer wraps next so that every request must carry
// "Authorization: Bearer <token>" with one of tokens, except requests for
// a path in open (an entry ending in "/" covers every path under it).
// It covers every endpoint on next's mux, including ones mounted with
// the API server's Handle. A token bound to a [Scope] puts it in the
// request's context ([FromContext]) for the API to enforce.
//
// A refused request is answered in the protocol it speaks: Connect and
// gRPC-Web get unauthenticated (HTTP 401 for Connect), gRPC gets
// grpc-status 16, anything else a plain 401; all with
// "WWW-Authenticate: Bearer". The token is never logged or echoed.
func RequireBearer(tokens *Tokens, open []string, next http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	isOpen := OpenPaths(open)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isOpen(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if sc, ok := tokens.Authorize(r.Header.Get("Authorization")); ok {
			if sc != nil {
				r = r.WithContext(NewContext(r.Context(), sc))
			}
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="rlcluster"`)
		err := connect.NewError(connect.CodeUnauthenticated, errors.New("missing or invalid bearer token"))
		if ew.IsSupported(r) {
			_ = ew.Write(w, r, err)
			return
		}
		http.Error(w, "unauthenticated: missing or invalid bearer token", http.StatusUnauthorized)
	})
}

// OpenPaths returns the test of whether a path is in open (an entry
// ending in "/" covers every path under it), for [RequireBearer] and other
// transports that authenticate the same way (a gRPC method's full name is
// its path).
func OpenPaths(open []string) func(path string) bool {
	exact := map[string]bool{}
	var prefixes []string
	for _, p := range open {
		if strings.HasSuffix(p, "/") {
			prefixes = append(prefixes, p)
		} else {
			exact[p] = true
		}
	}
	return func(p string) bool {
		if exact[p] {
			return true
		}
		for _, pre := range prefixes {
			if strings.HasPrefix(p, pre) {
				return true
			}
		}
		return false
	}
}

// Authorize checks an Authorization header's value, "Bearer <token>",
// against the tokens: it returns the token's scope (nil when bound to
// nothing) and true, or counts a rejection ([Tokens.Rejected]) and
// returns false.
func (t *Tokens) Authorize(authorization string) (*Scope, bool) {
	scheme, tok, found := strings.Cut(authorization, " ")
	if found && strings.EqualFold(scheme, "Bearer") {
		if sc, ok := t.Lookup(strings.TrimSpace(tok)); ok {
			return sc, true
		}
	}
	t.rejected.Add(1)
	return nil, false
}
