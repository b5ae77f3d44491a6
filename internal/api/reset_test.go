package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/region"
)

// TestReset: a Reset clears the key's counts on every store and through
// every protocol: a spent limit admits again at once, other keys and the
// same key's counters under other rules are untouched, and the call is
// counted and logged with who asked.
func TestReset(t *testing.T) {
	for _, sf := range stores {
		t.Run(sf.name, func(t *testing.T) {
			logs := &logtest.Buffer{}
			s := newServer(t, api.Config{Store: sf.new(t), Logger: logtest.Logger(logs, slog.LevelInfo)})
			for _, pr := range protocols {
				c := s.client(t, pr.h2c, pr.opts...)
				key := "reset-" + pr.name
				spend := func(k string) bool {
					r, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: k, Limit: inline(2, time.Minute)}))
					if err != nil {
						t.Fatal(err)
					}
					return r.Msg.GetAllowed()
				}
				for _, k := range []string{key, key + "-other"} {
					if got := spendN(spend, k, 3); got != "true true false" {
						t.Fatalf("%s: %s: three checks %s, want 2 of 3 allowed", pr.name, k, got)
					}
				}
				r, err := c.Reset(context.Background(), connect.NewRequest(&ratelimitv1.ResetRequest{Key: key, Limit: inline(2, time.Minute)}))
				if err != nil {
					t.Fatalf("%s: Reset: %v", pr.name, err)
				}
				if got := r.Msg.GetResetAt().AsTime(); !got.Equal(t0.Truncate(time.Millisecond)) {
					t.Errorf("%s: reset_at = %v, want %v", pr.name, got, t0)
				}
				if got := spendN(spend, key, 3); got != "true true false" {
					t.Errorf("%s: after the reset, three checks %s, want 2 of 3 allowed again", pr.name, got)
				}
				if spend(key + "-other") {
					t.Errorf("%s: another key was reset too", pr.name)
				}
				// Resetting again is harmless: the instant is the same.
				if _, err := c.Reset(context.Background(), connect.NewRequest(&ratelimitv1.ResetRequest{Key: key, Limit: inline(2, time.Minute)})); err != nil {
					t.Fatal(err)
				}
				if spend(key) {
					t.Errorf("%s: a second reset at the same instant undid the counts after the first", pr.name)
				}
				_, err = c.Reset(context.Background(), connect.NewRequest(&ratelimitv1.ResetRequest{Key: key, Rule: "nope"}))
				checkInvalid(t, "Reset", err, `rule: unknown rule "nope"`)
			}
			if got := testutil.ToFloat64(s.resetsCounter(t, "inline", "ok")); got != float64(2*len(protocols)) {
				t.Errorf("rlcluster_resets_total{rule=inline,result=ok} = %v, want %d", got, 2*len(protocols))
			}
			if !strings.Contains(logs.String(), `msg=reset by="anonymous from 127.0.0.1:`) || !strings.Contains(logs.String(), `key=i:reset-grpc `) {
				t.Errorf("the log does not say who reset which key:\n%s", logs.String())
			}
		})
	}
}

// spendN calls spend n times and tells what each answered.
func spendN(spend func(string) bool, key string, n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(spend(key))
	}
	return strings.Join(out, " ")
}

// resetsCounter returns the server's rlcluster_resets_total child.
func (s *testServer) resetsCounter(t *testing.T, rule, result string) prometheus.Collector {
	t.Helper()
	mfs, err := s.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "rlcluster_resets_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["rule"] == rule && l["result"] == result {
				g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
				g.Set(m.GetCounter().GetValue())
				return g
			}
		}
	}
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
}

// TestResetNeedsAdmin: with tokens required, Reset needs a token with the
// admin scope; a plain or a rules-bound token is refused, and counted.
func TestResetNeedsAdmin(t *testing.T) {
	const plain, admin = "plain-token-0123456789", "admin-token-0123456789"
	tokens, err := auth.NewTokens([]string{plain, admin + " admin"})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	h, err := api.NewHandler(api.Config{Logger: logtest.Logger(logs, slog.LevelInfo), RequireAdmin: true, Registerer: prometheus.NewRegistry(),
		Store: region.NewMemory(region.MemoryConfig{}), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	srv := apitest.Serve(t, auth.RequireBearer(tokens, nil, h))
	call := func(tok string) error {
		c := ratelimitv1connect.NewRateLimitServiceClient(http.DefaultClient, srv.URL)
		req := connect.NewRequest(&ratelimitv1.ResetRequest{Key: "k", Limit: inline(1, time.Minute)})
		req.Header().Set("Authorization", "Bearer "+tok)
		_, err := c.Reset(context.Background(), req)
		return err
	}
	if err := call(plain); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("Reset with a plain token: %v, want permission_denied", err)
	}
	if err := call(admin); err != nil {
		t.Errorf("Reset with an admin token: %v", err)
	}
	if !strings.Contains(logs.String(), `msg=reset by="sha256:`) {
		t.Errorf("the log does not name the admin token by its digest:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), admin) || strings.Contains(logs.String(), plain) {
		t.Errorf("a token reached the log:\n%s", logs.String())
	}
}

// TestResetCalendar: a reset outlives the calendar buckets it clears.
// A month limit of 3 spends 2, is reset, and spends 3 more; 15 days later,
// in the same month, the key is still spent (the hits since the reset
// count) and its estimate is those 3 (the 2 before it do not count
// again). A year limit in Los Angeles reset late on December 31 in UTC is
// still reset on January 1 in UTC, which is still December there.
func TestResetCalendar(t *testing.T) {
	month := &ratelimitv1.Limit{Limit: 3, Calendar: ratelimitv1.Calendar_CALENDAR_MONTH}
	yearLA := &ratelimitv1.Limit{Limit: 2, Calendar: ratelimitv1.Calendar_CALENDAR_YEAR, TimeZone: "America/Los_Angeles"}
	for _, sf := range stores {
		t.Run(sf.name, func(t *testing.T) {
			var now atomic.Int64
			set := func(tm time.Time) { now.Store(tm.UnixMilli()) }
			set(time.Date(2025, 1, 2, 12, 0, 0, 0, time.UTC))
			store := sf.new(t)
			var c ratelimitv1connect.RateLimitServiceClient
			// node starts a node on the store, as a restart or another
			// node of the region would: it knows of resets only from the
			// store.
			node := func() {
				s := newServer(t, api.Config{Store: store, Now: func() time.Time { return time.UnixMilli(now.Load()) }})
				c = s.client(t, protocols[0].h2c, protocols[0].opts...)
			}
			node()
			check := func(key string, l *ratelimitv1.Limit, peek bool) *ratelimitv1.CheckResponse {
				t.Helper()
				if peek {
					r, err := c.Peek(context.Background(), connect.NewRequest(&ratelimitv1.PeekRequest{Key: key, Limit: l}))
					if err != nil {
						t.Fatal(err)
					}
					return r.Msg.GetResponse()
				}
				r, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: key, Limit: l}))
				if err != nil {
					t.Fatal(err)
				}
				return r.Msg
			}
			reset := func(key string, l *ratelimitv1.Limit) {
				t.Helper()
				if _, err := c.Reset(context.Background(), connect.NewRequest(&ratelimitv1.ResetRequest{Key: key, Limit: l})); err != nil {
					t.Fatal(err)
				}
			}
			spend := func(key string, l *ratelimitv1.Limit, n int) string {
				out := make([]string, n)
				for i := range out {
					out[i] = fmt.Sprint(check(key, l, false).GetAllowed())
				}
				return strings.Join(out, " ")
			}

			if got := spend("m", month, 2); got != "true true" {
				t.Fatalf("before the reset: %s, want 2 allowed", got)
			}
			set(time.Date(2025, 1, 3, 12, 0, 0, 0, time.UTC))
			reset("m", month)
			if got := spend("m", month, 4); got != "true true true false" {
				t.Fatalf("after the reset: %s, want 3 of 4 allowed", got)
			}
			set(time.Date(2025, 1, 18, 12, 0, 0, 0, time.UTC)) // 15 days on, same month
			node()
			if r := check("m", month, true); r.GetStats().GetEstimate() != 3 {
				t.Errorf("15 days after the reset: estimate %d, want 3 (the hits since the reset, not the 2 before)", r.GetStats().GetEstimate())
			}
			if r := check("m", month, false); r.GetAllowed() {
				t.Errorf("15 days after the reset: a 4th hit of the month allowed, want denied")
			}
			set(time.Date(2025, 1, 31, 23, 0, 0, 0, time.UTC)) // 28 days on
			node()
			if r := check("m", month, false); r.GetAllowed() {
				t.Errorf("28 days after the reset: a 4th hit of the month allowed, want denied")
			}

			set(time.Date(2025, 12, 31, 22, 0, 0, 0, time.UTC)) // 14:00 in Los Angeles
			if got := spend("y", yearLA, 3); got != "true true false" {
				t.Fatalf("year before the reset: %s, want 2 of 3 allowed", got)
			}
			set(time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC))
			reset("y", yearLA)
			if got := spend("y", yearLA, 1); got != "true" {
				t.Fatalf("year after the reset: %s, want allowed", got)
			}
			set(time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC)) // 22:00 on December 31 in Los Angeles
			node()
			if r := check("y", yearLA, true); r.GetStats().GetEstimate() != 1 {
				t.Errorf("January 1 in UTC: estimate %d, want the 1 hit since the reset", r.GetStats().GetEstimate())
			}
			if got := spend("y", yearLA, 2); got != "true false" {
				t.Errorf("January 1 in UTC: %s, want 1 more of the year allowed", got)
			}
		})
	}
}
