package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestConfiguredLimits: every configurable bound on input answers
// invalid_argument naming the field (resource_exhausted for an oversized
// message, refused before decoding), and a good request right after is
// answered as if nothing had happened.
func TestConfiguredLimits(t *testing.T) {
	s := newServer(t, api.Config{MaxKeyBytes: 8, MaxBatch: 2, MaxRequestBytes: 300, MaxHits: 5,
		MaxWindow: time.Hour, MaxLogLimit: 100})
	logLimit := func(n uint64) *ratelimitv1.Limit {
		l := inline(n, time.Minute)
		l.Algorithm = ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG
		return l
	}
	cases := []struct {
		name string
		req  *ratelimitv1.CheckRequest
		want string
	}{
		{"key", &ratelimitv1.CheckRequest{Key: "123456789", Limit: inline(10, time.Minute)}, "key: 9 bytes, more than the maximum of 8"},
		{"hits", &ratelimitv1.CheckRequest{Key: "a", Hits: 6, Limit: inline(10, time.Minute)}, "hits: 6 is more than the maximum of 5"},
		{"window", &ratelimitv1.CheckRequest{Key: "a", Limit: inline(10, 2*time.Hour)}, "limit.window: 2h0m0s is more than the maximum of 1h0m0s"},
		{"calendar", &ratelimitv1.CheckRequest{Key: "a", Limit: &ratelimitv1.Limit{Limit: 10, Calendar: ratelimitv1.Calendar_CALENDAR_DAY}}, "limit.calendar: a day is longer than the maximum window of 1h0m0s"},
		{"sliding log limit", &ratelimitv1.CheckRequest{Key: "a", Limit: logLimit(101)}, "limit.limit: 101 is more than the maximum of 100 for sliding_log (its memory grows with the limit)"},
	}
	for i, pr := range protocols {
		c := s.client(t, pr.h2c, pr.opts...)
		for _, tc := range cases {
			t.Run(pr.name+"/"+tc.name, func(t *testing.T) {
				_, err := c.Check(context.Background(), connect.NewRequest(tc.req))
				checkInvalid(t, "Check", err, tc.want)
			})
		}
		t.Run(pr.name+"/batch", func(t *testing.T) {
			three := []*ratelimitv1.CheckRequest{{Key: "a", Limit: inline(10, time.Minute)}, {Key: "b", Limit: inline(10, time.Minute)}, {Key: "c", Limit: inline(10, time.Minute)}}
			_, err := c.CheckBatch(context.Background(), connect.NewRequest(&ratelimitv1.CheckBatchRequest{Checks: three}))
			checkInvalid(t, "CheckBatch", err, "checks: more than the maximum of 2 checks")
		})
		t.Run(pr.name+"/body", func(t *testing.T) {
			_, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: strings.Repeat("k", 400), Limit: inline(10, time.Minute)}))
			checkTooLarge(t, err, 300)
		})
		t.Run(pr.name+"/undisturbed", func(t *testing.T) {
			resp, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: fmt.Sprint("u", i), Limit: inline(10, time.Minute)}))
			if err != nil || !resp.Msg.Allowed || resp.Msg.Remaining != 9 {
				t.Errorf("good Check after bad ones = %v, %v; want allowed, remaining 9", resp, err)
			}
		})
	}
	// The defaults keep the old bounds.
	d := newServer(t, api.Config{})
	c := d.client(t, false, connect.WithProtoJSON())
	resp, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: "a", Limit: inline(1<<53, 7*24*time.Hour)}))
	if err != nil || !resp.Msg.Allowed || resp.Msg.Remaining != 1<<53-1 {
		t.Errorf("Check(limit 2^53, window 168h) with default bounds = %v, %v; want allowed, remaining 2^53-1", resp, err)
	}
	_, err = c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: "a", Limit: logLimit(api.DefaultMaxLogLimit + 1)}))
	checkInvalid(t, "Check", err, fmt.Sprintf("limit.limit: %d is more than the maximum of %d for sliding_log (its memory grows with the limit)", api.DefaultMaxLogLimit+1, api.DefaultMaxLogLimit))
	_, err = api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), MaxWindow: 8 * 24 * time.Hour})
	if got, want := fmt.Sprint(err), "api: invalid config: MaxWindow: 192h0m0s, want 1s to 168h0m0s"; got != want {
		t.Errorf("NewHandler(MaxWindow 192h) error = %q, want %q", got, want)
	}
}

// tooLargeRE is connect's refusal of a message over the read limit.
var tooLargeRE = regexp.MustCompile(`^message size (\d+) is larger than configured max (\d+)$`)

// checkTooLarge fails t unless err is resource_exhausted for a message
// larger than limit bytes.
func checkTooLarge(t *testing.T, err error, limit int) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		t.Fatalf("oversized Check: %v, want resource_exhausted", err)
	}
	m := tooLargeRE.FindStringSubmatch(ce.Message())
	if m == nil {
		t.Fatalf("oversized Check: message %q, want it to match %q", ce.Message(), tooLargeRE)
	}
	if size, _ := strconv.Atoi(m[1]); size <= limit || m[2] != strconv.Itoa(limit) {
		t.Errorf("oversized Check: message %q, want a size over %d and a max of %d", ce.Message(), limit, limit)
	}
}

// FuzzRequest sends arbitrary bytes as the body of each RPC, in Connect's
// JSON and binary encodings, to the real handler. Nothing may panic or
// answer a server error; a good check of a canary key before and after
// every input sees only its own hits (nothing else is disturbed); and an
// accepted Check's answer is consistent.
func FuzzRequest(f *testing.F) {
	seeds := []proto.Message{
		&ratelimitv1.CheckRequest{Key: "alice", Limit: inline(100, time.Minute)},
		&ratelimitv1.CheckRequest{Key: "alice", Hits: 3, Rule: "per-user"},
		&ratelimitv1.CheckRequest{Key: "b", Limit: &ratelimitv1.Limit{Limit: 5, Window: inline(1, time.Hour).Window, Algorithm: ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG}},
		&ratelimitv1.CheckBatchRequest{Checks: []*ratelimitv1.CheckRequest{{Key: "a", Limit: inline(2, time.Second)}, {Key: ""}}},
	}
	for _, m := range seeds {
		b, _ := proto.Marshal(m)
		f.Add(b, false, uint8(0))
		j, _ := json.Marshal(m) // not protojson, but a plausible JSON start
		f.Add(j, true, uint8(1))
	}
	f.Add([]byte(`{"key":"alice","limit":{"limit":100,"window":"60s"}}`), true, uint8(0))
	f.Add([]byte(`{"checks":[{"key":"a","limit":{"limit":"9007199254740993","window":"-1s"}}]}`), true, uint8(1))
	f.Add([]byte(`{"key":"x","hits":"18446744073709551615","limit":{"limit":1,"window":"604800.000000001s","algorithm":"ALGORITHM_TOKEN_BUCKET"}}`), true, uint8(2))

	rs, err := rules.New([]rules.Rule{{Name: "per-user", Limit: window.Limit{Limit: 10, Window: time.Minute}}})
	if err != nil {
		f.Fatal(err)
	}
	store := region.NewMemory(region.MemoryConfig{MaxKeys: 10000})
	h, err := api.NewHandler(api.Config{Store: store, Rules: rs, MaxRequestBytes: 64 << 10, Now: func() time.Time { return t0 }})
	if err != nil {
		f.Fatal(err)
	}
	methods := []string{"Check", "CheckBatch", "Peek"}
	canary := fmt.Sprintf("canary-%d", time.Now().UnixNano())
	spent := uint64(0)
	checkCanary := func(t *testing.T) {
		t.Helper()
		body := fmt.Sprintf(`{"key":%q,"limit":{"limit":1000000000,"window":"60s"}}`, canary)
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/ratelimit.v1.RateLimitService/Check", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, r)
		spent++
		var resp struct {
			Allowed   bool
			Remaining string
		}
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &resp) != nil || !resp.Allowed ||
			resp.Remaining != fmt.Sprint(1_000_000_000-spent) {
			t.Fatalf("canary Check = %d %s, want allowed with remaining %d", rec.Code, rec.Body, 1_000_000_000-spent)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool, method uint8) {
		checkCanary(t)
		m := methods[int(method)%len(methods)]
		r := httptest.NewRequest(http.MethodPost, "/ratelimit.v1.RateLimitService/"+m, bytes.NewReader(body))
		if asJSON {
			r.Header.Set("Content-Type", "application/json")
		} else {
			r.Header.Set("Content-Type", "application/proto")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			// Anything but an answer is a refusal of the input, in
			// Connect's error body: invalid_argument.
			var e struct{ Code string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusBadRequest || e.Code != "invalid_argument" {
				t.Fatalf("%s(%q) answered %d %s, want 200 or 400 invalid_argument", m, body, rec.Code, rec.Body)
			}
		}
		if rec.Code == http.StatusOK && m == "Check" && !asJSON {
			var resp ratelimitv1.CheckResponse
			if err := proto.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				t.Fatalf("Check answer does not decode: %v", err)
			}
			if resp.Allowed && resp.GetRetryAfter().AsDuration() != 0 || resp.Remaining > resp.Limit {
				t.Fatalf("inconsistent Check answer %v", &resp)
			}
		}
		checkCanary(t)
	})
}

// TestMaxKeyBytesFitsReplication: the bound on a caller's key leaves room
// for the longest namespace prefix within what replication carries, and a
// caller's key that long is decided.
func TestMaxKeyBytesFitsReplication(t *testing.T) {
	_, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), MaxKeyBytes: decision.MaxKeyBytes + 1})
	if want := fmt.Sprintf("api: invalid config: MaxKeyBytes: %d, want at most %d (counter keys, namespace prefix included, must fit the %d bytes replication carries)",
		decision.MaxKeyBytes+1, decision.MaxKeyBytes, region.MaxKeyBytes); fmt.Sprint(err) != want || !errors.Is(err, api.ErrConfig) {
		t.Errorf("NewHandler(MaxKeyBytes %d) = %v, want %q wrapping ErrConfig", decision.MaxKeyBytes+1, err, want)
	}
	rs, err := rules.New([]rules.Rule{{Name: strings.Repeat("r", rules.MaxNameBytes), Limit: window.Limit{Limit: 10, Window: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, api.Config{MaxKeyBytes: decision.MaxKeyBytes, Rules: rs})
	resp, err := s.client(t, false).Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{
		Key: strings.Repeat("k", decision.MaxKeyBytes), Rule: strings.Repeat("r", rules.MaxNameBytes)}))
	if err != nil || !resp.Msg.Allowed {
		t.Errorf("Check with the longest key and rule name = %v, %v; want allowed", resp, err)
	}
}

// TestConfigValidate: NewHandler refuses the bounds Validate refuses, each
// problem naming its field; zero fields take their defaults.
func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  api.Config
		want string // "" when valid
	}{
		{"zero", api.Config{}, ""},
		{"longest key", api.Config{MaxKeyBytes: decision.MaxKeyBytes}, ""},
		{"smallest request", api.Config{MaxRequestBytes: api.MinRequestBytes}, ""},
		{"key too long", api.Config{MaxKeyBytes: decision.MaxKeyBytes + 1}, fmt.Sprintf("api: invalid config: MaxKeyBytes: %d, want at most %d (counter keys, namespace prefix included, must fit the %d bytes replication carries)", decision.MaxKeyBytes+1, decision.MaxKeyBytes, region.MaxKeyBytes)},
		{"request too small", api.Config{MaxRequestBytes: 63}, "api: invalid config: MaxRequestBytes: 63, want at least 64"},
		{"negative batch", api.Config{MaxBatch: -1}, "api: invalid config: MaxBatch: -1, want at least 1"},
		{"window too short", api.Config{MaxWindow: time.Millisecond}, "api: invalid config: MaxWindow: 1ms, want 1s to 168h0m0s"},
		{"largest inline limit", api.Config{MaxInlineLimit: window.MaxLimit}, ""},
		{"inline limit too large", api.Config{MaxInlineLimit: window.MaxLimit + 1}, fmt.Sprintf("api: invalid config: MaxInlineLimit: %d, want at most %d (the most any limit may be)", uint64(window.MaxLimit)+1, uint64(window.MaxLimit))},
		{"two problems", api.Config{MaxBatch: -1, ReadyTimeout: -time.Second},
			"api: invalid config: MaxBatch: -1, want at least 1\napi: invalid config: ReadyTimeout: -1s, want 0 (the default) or more"},
	} {
		err := c.cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", c.name, err)
			}
			continue
		}
		if err == nil || err.Error() != c.want || !errors.Is(err, api.ErrConfig) {
			t.Errorf("%s: Validate() = %v, want %q wrapping ErrConfig", c.name, err, c.want)
		}
		c.cfg.Store = region.NewMemory(region.MemoryConfig{})
		if _, err := api.NewHandler(c.cfg); err == nil || err.Error() != c.want {
			t.Errorf("%s: NewHandler() = %v, want %q", c.name, err, c.want)
		}
	}
}
