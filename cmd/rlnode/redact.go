package main

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/rlcluster/rlcluster/internal/region"
)

// minSecretLen is the shortest secret masked inside log text: masking a
// two-letter password would garble every log line holding those letters.
// Shorter secrets are still never logged on purpose (URLs are redacted,
// tokens and keys never printed).
const minSecretLen = 6

// mask replaces a secret in log text.
const mask = "[REDACTED]"

// secrets is the set of secret strings the node knows (Redis passwords,
// bearer tokens, gossip keys); the logger masks any of them that appears
// in a log line, a second line of defence behind never logging them on
// purpose. Safe for concurrent use; the zero value holds none.
type secrets struct {
	mu   sync.RWMutex
	list []string
}

// add marks values as secret; one already known is not added again (a
// SIGHUP reload adds the same tokens and keys each time).
func (s *secrets) add(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range values {
		if len(v) >= minSecretLen && !slices.Contains(s.list, v) {
			s.list = append(s.list, v)
		}
	}
}

// addURL marks the secrets of a Redis URL secret (see region.URLSecrets):
// its user info's password and any password or token in its query, as
// written and decoded.
func (s *secrets) addURL(raw string) {
	s.add(region.URLSecrets(raw)...)
}

// scrub returns text with every secret masked.
func (s *secrets) scrub(text string) string {
	if s == nil {
		return text
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, v := range s.list {
		if strings.Contains(text, v) {
			text = strings.ReplaceAll(text, v, mask)
		}
	}
	return text
}

// replaceAttr is a slog ReplaceAttr that masks secrets in strings, errors
// and other values printed with fmt.
func (s *secrets) replaceAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		v := a.Value.String()
		if w := s.scrub(v); w != v {
			a.Value = slog.StringValue(w)
		}
	case slog.KindAny:
		v := fmt.Sprint(a.Value.Any())
		if w := s.scrub(v); w != v {
			a.Value = slog.StringValue(w)
		}
	}
	return a
}

// scrubErr returns err with its message masked, or err itself when it
// holds no secret.
func (s *secrets) scrubErr(err error) error {
	if err == nil {
		return nil
	}
	if m := s.scrub(err.Error()); m != err.Error() {
		return errors.New(m)
	}
	return err
}
