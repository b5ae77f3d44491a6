package ratelimitheader_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/ratelimitheader"
)

func TestSet(t *testing.T) {
	tests := []struct {
		name   string
		v      ratelimitheader.Values
		legacy bool
		want   map[string]string // a header not in want must be absent
	}{
		{
			name: "allowed",
			v:    ratelimitheader.Values{Policy: "api", Allowed: true, Limit: 100, Window: time.Minute, Remaining: 42, ResetAfter: 16100 * time.Millisecond},
			want: map[string]string{
				"RateLimit-Policy": `"api";q=100;w=60`,
				"RateLimit":        `"api";r=42;t=17`,
			},
		},
		{
			name:   "denied with legacy headers",
			v:      ratelimitheader.Values{Policy: "login", Limit: 5, Window: 15 * time.Minute, ResetAfter: 900 * time.Second, RetryAfter: 2001 * time.Millisecond},
			legacy: true,
			want: map[string]string{
				"RateLimit-Policy":      `"login";q=5;w=900`,
				"RateLimit":             `"login";r=0;t=3`,
				"Retry-After":           "3",
				"X-RateLimit-Limit":     "5",
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     "900",
			},
		},
		{
			name: "denied with a sub-millisecond retry still says 1 second",
			v:    ratelimitheader.Values{Policy: "p", Limit: 1, Window: time.Second, RetryAfter: time.Microsecond},
			want: map[string]string{
				"RateLimit-Policy": `"p";q=1;w=1`,
				"RateLimit":        `"p";r=0;t=1`,
				"Retry-After":      "1",
			},
		},
		{
			name: "unknown window and empty policy name",
			v:    ratelimitheader.Values{Allowed: true, Limit: 3, Remaining: 2},
			want: map[string]string{
				"RateLimit-Policy": `"default";q=3`,
				"RateLimit":        `"default";r=2;t=0`,
			},
		},
		{
			name: "policy name escaped as an sf-string",
			v:    ratelimitheader.Values{Policy: "a\"b\\c\né", Allowed: true, Limit: 1, Window: 1500 * time.Millisecond, Remaining: 1},
			want: map[string]string{
				"RateLimit-Policy": `"a\"b\\c???";q=1;w=2`,
				"RateLimit":        `"a\"b\\c???";r=1;t=0`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("Retry-After", "stale")
			ratelimitheader.Set(h, tt.v, tt.legacy)
			for _, k := range []string{ratelimitheader.Policy, ratelimitheader.RateLimit, ratelimitheader.RetryAfter,
				ratelimitheader.LegacyLimit, ratelimitheader.LegacyRemaining, ratelimitheader.LegacyReset} {
				if got, want := h.Get(k), tt.want[k]; got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{time.Second + time.Millisecond, 2},
		{time.Duration(1<<63 - 1), 9223372037},
	}
	for _, tt := range tests {
		if got := ratelimitheader.Seconds(tt.d); got != tt.want {
			t.Errorf("Seconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}
