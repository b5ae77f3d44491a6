package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
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
