package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestSecretsMaskURLs(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		leaks     []string // forms of the password that must not survive
	}{
		{"plain", "redis://user:hunter22@host:6379", []string{"hunter22"}},
		{"escaped", "rediss://user:p%2Fss%2Bw0rd@host:6379", []string{"p/ss+w0rd", "p%2Fss%2Bw0rd"}},
		{"no user", "redis://:hunter22@host:6379", []string{"hunter22"}},
		{"unparsable", "redis://user:hunter22@host:notaport:x", []string{"hunter22"}},
		{"sentinel", "redis+sentinel://user:hunter22@s1:26379,s2:26379/mymaster", []string{"hunter22"}},
		{"no scheme", "user:hunter22@host", []string{"hunter22"}},
		{"at in password", "redis://user:hun@ter22@host", []string{"hun@ter22"}},
		{"sentinel query", "redis+sentinel://s1:26379,s2:26379/mymaster?password=hunter22&sentinel_password=hunter33",
			[]string{"hunter22", "hunter33"}},
		{"go-redis sentinel query", "redis://s1:26379?master_name=m&sentinel_password=hunter%2B33", []string{"hunter%2B33", "hunter+33"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s secrets
			s.addURL(tc.url)
			for _, leak := range tc.leaks {
				if got := s.scrub("dial " + leak + " failed"); strings.Contains(got, leak) {
					t.Errorf("scrub kept %q: %q", leak, got)
				}
			}
		})
	}
	// A URL without a password masks nothing (a user name is no secret).
	var s secrets
	s.addURL("redis://default@host:6379")
	if got := s.scrub("user default"); got != "user default" {
		t.Errorf("scrub = %q, want it unchanged", got)
	}
}

func TestSecretsInLogger(t *testing.T) {
	var s secrets
	s.add("tok-secret-1", "abc") // "abc" is too short to mask
	var buf bytes.Buffer
	log := newLogger(config{LogFormat: "json"}, &buf, &s)
	log.Info("saw tok-secret-1", "err", errors.New("bad tok-secret-1"), "any", []string{"tok-secret-1"},
		slog.Group("g", "v", "x tok-secret-1"), "short", "abc")
	out := buf.String()
	if strings.Contains(out, "tok-secret-1") {
		t.Errorf("log line shows the secret: %s", out)
	}
	if got := strings.Count(out, mask); got != 4 {
		t.Errorf("log line has %d masks, want 4: %s", got, out)
	}
	if !strings.Contains(out, `"short":"abc"`) {
		t.Errorf("short value masked: %s", out)
	}
	err := s.scrubErr(fmt.Errorf("open: %w", errors.New("tok-secret-1 refused")))
	if got, want := err.Error(), "open: "+mask+" refused"; got != want {
		t.Errorf("scrubErr = %q, want %q", got, want)
	}
	plain := errors.New("nothing here")
	if s.scrubErr(plain) != plain {
		t.Error("scrubErr replaced an error that holds no secret")
	}
}

// TestSecretsAddOnce: a reload that adds the same secrets again does not
// grow the list each scrub walks.
func TestSecretsAddOnce(t *testing.T) {
	var s secrets
	for range 3 {
		s.add("token-one-123", "token-two-456", "short")
	}
	if got, want := len(s.list), 2; got != want {
		t.Errorf("secrets held after three identical adds = %d, want %d", got, want)
	}
	if got, want := s.scrub("a token-two-456 b"), "a "+mask+" b"; got != want {
		t.Errorf("scrub = %q, want %q", got, want)
	}
}
