package region_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/porttest"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestOpenRedisDownAtStart: a Redis that does not answer at start does not
// stop Open. The stack decides under the failure policy, is not ready under
// local (nor closed) until Redis first answers, is ready under open, and
// moves to Redis in the background once it answers.
func TestOpenRedisDownAtStart(t *testing.T) {
	for _, c := range []struct {
		policy region.Policy
		ready  bool
	}{{region.PolicyLocal, false}, {region.PolicyOpen, true}, {region.PolicyClosed, false}} {
		t.Run(c.policy.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			srv.Stop()
			var logs logtest.Buffer
			s := storetest.Open(t, region.Config{Region: "here", Redis: region.RedisConfig{URL: srv.URL()},
				Failover: region.FailoverConfig{Policy: c.policy, ProbeMin: 10 * time.Millisecond, ProbeMax: 50 * time.Millisecond},
				Logger:   logtest.Logger(&logs, slog.LevelDebug)})
			if st := s.Failover.Status(); st.Mode != region.ModeFallback || st.Transitions != 1 {
				t.Fatalf("Status() with Redis down at start = %+v, want fallback", st)
			}
			if err := s.Failover.Ping(context.Background()); (err == nil) != c.ready {
				t.Errorf("Ping() with Redis down at start = %v, want ready %v", err, c.ready)
			}
			l := window.Limit{Limit: 10, Window: time.Minute}
			r := storetest.Check(t, s, region.Request{Key: "k", Limit: l, Hits: 1, Now: time.Now()})
			if r.Allowed != (c.policy != region.PolicyClosed) {
				t.Errorf("decision with Redis down: allowed %v, want %v", r.Allowed, c.policy != region.PolicyClosed)
			}
			if n := strings.Count(logs.String(), "unreachable at start"); n != 1 {
				t.Errorf("logs say %d times that Redis is unreachable, want once:\n%s", n, logs.String())
			}

			srv.Restart(t)
			polltest.Until(t, 10*time.Second, "the stack to move to Redis", func() bool { return s.Failover.Status().Mode == region.ModePrimary })
			if err := s.Failover.Ping(context.Background()); err != nil {
				t.Errorf("Ping() once Redis answers = %v", err)
			}
			now := time.Now()
			r = storetest.Check(t, s, region.Request{Key: "k2", Limit: l, Hits: 1, Now: now})
			if !r.Allowed || r.LocalRegion != "" {
				t.Errorf("decision on Redis: allowed %v local region %q, want allowed by Redis", r.Allowed, r.LocalRegion)
			}
			v, err := s.Redis.Vectors(context.Background(), []region.BucketRef{{Key: "k2", Window: l.Window, Bucket: r.Bucket}})
			if err != nil || len(v[0]) != 1 || v[0][0].Region != "here" || v[0][0].Count != 1 {
				t.Errorf("Redis holds %v, %v; want here: 1", v, err)
			}
		})
	}
}

// TestOpenFailsOnConfig: a URL that does not parse, or a Redis that
// refuses the password, is an error of Open, not an outage.
func TestOpenFailsOnConfig(t *testing.T) {
	if _, err := region.Open(context.Background(), region.Config{Redis: region.RedisConfig{URL: "http://host"}}); !errors.Is(err, region.ErrConfig) {
		t.Errorf("Open(http://) = %v, want ErrConfig", err)
	}
	srv := startAuthRedis(t)
	_, err := region.Open(context.Background(), region.Config{Redis: region.RedisConfig{URL: srv.URL(), Password: "wrong-password"}})
	if err == nil || errors.Is(err, region.ErrUnavailable) {
		t.Errorf("Open with a wrong password = %v, want an error that is not an outage", err)
	}
	s := storetest.Open(t, region.Config{Redis: region.RedisConfig{URL: srv.URL(), Password: defaultPass}})
	if st := s.Failover.Status(); st.Mode != region.ModePrimary {
		t.Errorf("Open with RedisConfig.Password: %+v, want on Redis", st)
	}
}

// TestStackCollectors reads a stack's metrics with one Stats per scrape.
func TestStackCollectors(t *testing.T) {
	// A Redis that is down at start gives every layer without a server.
	srv := redistest.Start(t)
	srv.Stop()
	s := storetest.Open(t, region.Config{Region: "here", Redis: region.RedisConfig{URL: srv.URL()},
		Failover: region.FailoverConfig{ProbeMin: time.Hour}, DenyCache: &region.DenyCacheConfig{}})
	l := window.Limit{Limit: 1, Window: time.Minute}
	now := time.Now()
	for range 3 {
		storetest.Check(t, s, region.Request{Key: "k", Limit: l, Hits: 1, Now: now})
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collectors()...)
	want := `
# HELP rlcluster_deny_cache_hits_total Decisions answered from the deny cache, without a store round trip.
# TYPE rlcluster_deny_cache_hits_total counter
rlcluster_deny_cache_hits_total 1
# HELP rlcluster_deny_cache_misses_total Decisions the deny cache sent to the store.
# TYPE rlcluster_deny_cache_misses_total counter
rlcluster_deny_cache_misses_total 2
# HELP rlcluster_keys_held Keys held by the in-memory store.
# TYPE rlcluster_keys_held gauge
rlcluster_keys_held 1
# HELP rlcluster_store_fallback_decisions_total Requests decided under the failure policy.
# TYPE rlcluster_store_fallback_decisions_total counter
rlcluster_store_fallback_decisions_total 2
# HELP rlcluster_store_mode 1 for the mode the store decides in: primary, or the failure policy (local, open, closed) while the primary is unavailable.
# TYPE rlcluster_store_mode gauge
rlcluster_store_mode{mode="closed"} 0
rlcluster_store_mode{mode="local"} 1
rlcluster_store_mode{mode="open"} 0
rlcluster_store_mode{mode="primary"} 0
# HELP rlcluster_store_transitions_total Changes of store mode, to the failure policy and back.
# TYPE rlcluster_store_transitions_total counter
rlcluster_store_transitions_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "rlcluster_deny_cache_hits_total", "rlcluster_deny_cache_misses_total",
		"rlcluster_keys_held", "rlcluster_store_fallback_decisions_total", "rlcluster_store_mode", "rlcluster_store_transitions_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 17 {
		t.Errorf("metrics = %d, %v; want 17 series", n, err)
	}
	// The memory stack exports the in-memory store's only.
	m := storetest.Open(t, region.Config{})
	if got := testutil.CollectAndCount(m.Collectors()[0]); got != 3 {
		t.Errorf("memory stack metrics = %d, want 3", got)
	}
}

// TestOpenRedisSilentAtStart: a Redis that accepts connections but never
// answers before Open's deadline is an outage too: Open returns a stack
// that decides under the policy.
func TestOpenRedisSilentAtStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold it open, say nothing
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	s, err := region.Open(ctx, region.Config{Redis: region.RedisConfig{URL: "redis://" + ln.Addr().String(), ReadTimeout: 2 * time.Second},
		Failover: region.FailoverConfig{ProbeMin: time.Hour}})
	if err != nil {
		t.Fatalf("Open with a silent Redis = %v, want a stack deciding under the policy", err)
	}
	defer s.Close()
	if st := s.Failover.Status(); st.Mode != region.ModeFallback {
		t.Errorf("Status() = %+v, want fallback", st)
	}
}

// TestConfigValidate: Open refuses, before it dials anything, a
// configuration that Validate refuses, with each problem naming its field.
func TestConfigValidate(t *testing.T) {
	for _, ok := range []region.Config{{}, {Region: strings.Repeat("r", region.MaxRegionName)}, {DenyCache: &region.DenyCacheConfig{}}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", ok, err)
		}
	}
	const bad = "region: bad store configuration: "
	refused := map[string]region.Config{
		bad + "Region: 65 bytes, want at most 64":                                                {Region: strings.Repeat("r", region.MaxRegionName+1)},
		bad + `Region: "\xff" is not UTF-8`:                                                      {Region: "\xff"},
		bad + "Failover: Policy: unknown policy 9":                                               {Failover: region.FailoverConfig{Policy: 9}},
		bad + "Failover: durations and counts must not be negative":                              {Failover: region.FailoverConfig{Timeout: -time.Second}},
		bad + "DenyCache.MaxKeys: -1, want 0 (the default) or more":                              {DenyCache: &region.DenyCacheConfig{MaxKeys: -1}},
		bad + "Region: 70 bytes, want at most 64\n" + bad + "Memory: sizes must not be negative": {Region: strings.Repeat("r", 70), Memory: region.MemoryConfig{MaxKeys: -1}},
	}
	closed := "redis://" + porttest.ClosedAddr(t) // Open must refuse before it dials
	for want, cfg := range refused {
		err := cfg.Validate()
		if !errors.Is(err, region.ErrConfig) || err.Error() != want {
			t.Errorf("Validate() = %v, want %q wrapping ErrConfig", err, want)
		}
		cfg.Redis.URL = closed
		if _, err := region.Open(context.Background(), cfg); fmt.Sprint(err) != want {
			t.Errorf("Open() = %v, want %q", err, want)
		}
	}
}
