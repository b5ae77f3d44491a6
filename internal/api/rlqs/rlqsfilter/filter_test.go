package rlqsfilter

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

var (
	idA = map[string]string{"name": "a", "env": "prod"}
	idB = map[string]string{"name": "b"}
)

func TestNewValidates(t *testing.T) {
	good := Config{ReportingInterval: time.Second}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"minimal", func(*Config) {}, true},
		{"no interval", func(c *Config) { c.ReportingInterval = 0 }, false},
		{"negative backoff", func(c *Config) { c.ReconnectBackoff = -1 }, false},
		{"token bucket without interval", func(c *Config) { c.NoAssignment = TokenBucketStrategy(1, 1, 0) }, false},
		{"unknown blanket rule", func(c *Config) { c.NoAssignment = Strategy{BlanketRule: 7} }, false},
		{"negative expired timeout", func(c *Config) { c.Expired = &Expired{Timeout: -1} }, false},
		{"bad fallback", func(c *Config) { c.Expired = &Expired{Fallback: TokenBucketStrategy(1, 1, 0)} }, false},
		{"reuse ignores fallback", func(c *Config) { c.Expired = &Expired{ReuseLast: true, Fallback: TokenBucketStrategy(1, 1, 0)} }, true},
		{"zero-token bucket", func(c *Config) { c.NoAssignment = TokenBucketStrategy(0, 1, time.Second) }, true},
	} {
		cfg := good
		tc.edit(&cfg)
		_, err := New(cfg)
		if (err == nil) != tc.ok {
			t.Errorf("%s: New error = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestStrategyFromProto(t *testing.T) {
	sec := durationpb.New(time.Second)
	for _, tc := range []struct {
		name string
		in   *typev3.RateLimitStrategy
		want Strategy
		err  bool
	}{
		{"unset", nil, AllowAll(), false},
		{"allow", AllowAll().Proto(), AllowAll(), false},
		{"deny", DenyAll().Proto(), DenyAll(), false},
		{"token bucket", TokenBucketStrategy(5, 2, time.Second).Proto(), TokenBucketStrategy(5, 2, time.Second), false},
		{"tokens_per_fill unset is 1", &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
			TokenBucket: &typev3.TokenBucket{MaxTokens: 5, FillInterval: sec}}}, TokenBucketStrategy(5, 1, time.Second), false},
		{"tokens_per_fill 0", &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
			TokenBucket: &typev3.TokenBucket{MaxTokens: 5, TokensPerFill: wrapperspb.UInt32(0), FillInterval: sec}}}, Strategy{}, true},
		{"no fill_interval", &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
			TokenBucket: &typev3.TokenBucket{MaxTokens: 5}}}, Strategy{}, true},
		{"zero fill_interval", &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
			TokenBucket: &typev3.TokenBucket{MaxTokens: 5, FillInterval: durationpb.New(0)}}}, Strategy{}, true},
		{"empty oneof", &typev3.RateLimitStrategy{}, Strategy{}, true},
		{"unknown blanket rule", &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: 9}}, Strategy{}, true},
		{"requests_per_time_unit allows", &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
			RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 0}}}, AllowAll(), false},
	} {
		got, err := StrategyFromProto(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: StrategyFromProto = %v, %v; want %v, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestTokenStateFill(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	t.Run("whole fills", func(t *testing.T) {
		tb := TokenBucket{MaxTokens: 3, TokensPerFill: 1, FillInterval: time.Second}
		var s tokenState
		s.reset(tb, t0)
		for i := range 3 {
			if !s.take(tb, t0) {
				t.Fatalf("take %d of a full bucket of 3 denied", i+1)
			}
		}
		for _, step := range []struct {
			at   time.Duration
			want bool
		}{
			{0, false},
			{999 * time.Millisecond, false},
			{time.Second, true},
			{time.Second, false},
			{1500 * time.Millisecond, false},
			{2 * time.Second, true},
		} {
			if got := s.take(tb, at(step.at)); got != step.want {
				t.Fatalf("take at +%v = %v, want %v", step.at, got, step.want)
			}
		}
		// Long idle: refilled to MaxTokens, no more.
		s.refill(tb, at(time.Hour))
		if s.tokens != 3 {
			t.Fatalf("after an hour tokens = %d, want 3 (MaxTokens)", s.tokens)
		}
	})

	t.Run("continuous fractional fill", func(t *testing.T) {
		// 3 tokens per second: one token every 333,333,333.3ns.
		tb := TokenBucket{MaxTokens: 10, TokensPerFill: 3, FillInterval: time.Second}
		s := tokenState{last: t0}
		if s.take(tb, at(333_333_333)) {
			t.Fatal("took a token at 333,333,333ns, before a third of a second")
		}
		if !s.take(tb, at(333_333_334)) {
			t.Fatal("no token at 333,333,334ns, after a third of a second")
		}
		// The fraction left over carries: two more tokens at 1s exactly.
		s.refill(tb, at(time.Second))
		if s.tokens != 2 || s.frac != 0 {
			t.Fatalf("at 1s tokens, frac = %d, %d; want 2, 0", s.tokens, s.frac)
		}
	})

	t.Run("zero max denies", func(t *testing.T) {
		tb := TokenBucket{MaxTokens: 0, TokensPerFill: 1, FillInterval: time.Nanosecond}
		var s tokenState
		s.reset(tb, t0)
		if s.take(tb, at(time.Hour)) {
			t.Fatal("a bucket of max_tokens 0 allowed a request")
		}
	})

	t.Run("no overflow", func(t *testing.T) {
		tb := TokenBucket{MaxTokens: 1<<32 - 1, TokensPerFill: 1<<32 - 1, FillInterval: 1<<62 + 1}
		s := tokenState{last: t0}
		s.refill(tb, at(1<<62+1))
		if s.tokens != 1<<32-1 {
			t.Fatalf("tokens after one huge interval = %d, want %d", s.tokens, uint64(1<<32-1))
		}
		tb = TokenBucket{MaxTokens: 1<<32 - 1, TokensPerFill: 1, FillInterval: time.Hour}
		s = tokenState{last: t0}
		s.refill(tb, at(time.Hour-1))
		if s.tokens != 0 {
			t.Fatalf("tokens before one hour-long interval = %d, want 0", s.tokens)
		}
		s.refill(tb, at(time.Hour))
		if s.tokens != 1 {
			t.Fatalf("tokens after one hour-long interval = %d, want 1", s.tokens)
		}
	})

	t.Run("clock stepping back adds nothing", func(t *testing.T) {
		tb := TokenBucket{MaxTokens: 5, TokensPerFill: 1, FillInterval: time.Second}
		s := tokenState{last: at(10 * time.Second)}
		s.refill(tb, at(0))
		if s.tokens != 0 || !s.last.Equal(at(10*time.Second)) {
			t.Fatalf("after a step back tokens, last = %d, %v", s.tokens, s.last)
		}
	})
}

func TestNoAssignment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{ReportingInterval: time.Second})
		if got := allowN(f, idA, 100); got != 100 {
			t.Errorf("default no-assignment allowed %d of 100, want all (ALLOW_ALL)", got)
		}
		st := state(t, f, idA)
		if st.Phase != PhaseNoAssignment || st.Strategy != AllowAll() || st.Allowed != 100 || st.Denied != 0 {
			t.Errorf("state = %+v, want no-assignment ALLOW_ALL with 100 allowed", st)
		}

		f = mustNew(t, Config{ReportingInterval: time.Second, NoAssignment: DenyAll()})
		if f.Allow(idA) {
			t.Error("DENY_ALL no-assignment allowed a request")
		}

		// A token bucket no-assignment strategy is one bucket per BucketId.
		f = mustNew(t, Config{ReportingInterval: time.Second, NoAssignment: TokenBucketStrategy(2, 1, time.Second)})
		if a, b := allowN(f, idA, 5), allowN(f, idB, 5); a != 2 || b != 2 {
			t.Errorf("no-assignment token bucket of 2 allowed %d and %d of 5, want 2 each", a, b)
		}
		time.Sleep(time.Second)
		if a := allowN(f, idA, 5); a != 1 {
			t.Errorf("after one fill interval allowed %d, want 1", a)
		}
	})
}

func TestBucketIdentity(t *testing.T) {
	f := mustNew(t, Config{ReportingInterval: time.Second, NoAssignment: DenyAll()})
	f.Allow(map[string]string{"a": "1", "b": "2"})
	f.Allow(map[string]string{"b": "2", "a": "1"})
	f.Allow(map[string]string{"a": "2", "b": "1"})
	f.Allow(map[string]string{"a": "1"})
	if st := state(t, f, map[string]string{"a": "1", "b": "2"}); st.Denied != 2 {
		t.Errorf("bucket {a:1 b:2} counted %d requests, want 2", st.Denied)
	}
	if got := f.Stats().Buckets; got != 3 {
		t.Errorf("Buckets = %d, want 3 distinct ids", got)
	}
}

// TestHashChain exercises buckets that share a hash, which real ids
// practically never do.
func TestHashChain(t *testing.T) {
	f := mustNew(t, Config{ReportingInterval: time.Second})
	now := time.Unix(0, 0)
	ids := []map[string]string{{"n": "1"}, {"n": "2"}, {"n": "3"}}
	var bs []*bucket
	for _, id := range ids {
		bs = append(bs, f.create(42, id, now))
	}
	for i, id := range ids {
		if got := f.lookup(42, id, now); got != bs[i] {
			t.Fatalf("lookup %v in a chain = %p, want %p", id, got, bs[i])
		}
	}
	f.erase(bs[1])
	if f.lookup(42, ids[1], now) != nil || f.lookup(42, ids[0], now) != bs[0] || f.lookup(42, ids[2], now) != bs[2] {
		t.Fatal("erasing the middle of a chain lost or kept the wrong bucket")
	}
	f.erase(bs[2]) // the head
	if f.lookup(42, ids[0], now) != bs[0] || f.Stats().Buckets != 1 {
		t.Fatal("erasing the head of a chain lost the rest")
	}
	f.erase(bs[0])
	if len(f.buckets) != 0 {
		t.Fatalf("buckets map has %d chains after erasing all", len(f.buckets))
	}
}

func TestAssignedTokenBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{ReportingInterval: time.Hour})
		f.Allow(idA)
		f.apply(response(assign(idA, TokenBucketStrategy(2, 1, time.Second), noTTL)))
		st := state(t, f, idA)
		if st.Phase != PhaseActive || st.Tokens != 2 || !st.ExpiresAt.IsZero() {
			t.Fatalf("after assignment state = %+v, want active, full (2), no expiry", st)
		}
		if got := allowN(f, idA, 3); got != 2 {
			t.Fatalf("allowed %d of 3 from a bucket of 2, want 2", got)
		}
		time.Sleep(500 * time.Millisecond)
		if f.Allow(idA) {
			t.Fatal("allowed half a fill interval after emptying")
		}
		time.Sleep(500 * time.Millisecond)
		if !f.Allow(idA) || f.Allow(idA) {
			t.Fatal("want exactly one token after one fill interval")
		}
		time.Sleep(10 * time.Second)
		if got := allowN(f, idA, 5); got != 2 {
			t.Fatalf("after a long idle allowed %d, want MaxTokens 2", got)
		}
		if st := state(t, f, idA); st.Allowed != 1+2+1+2 || st.Denied != 1+1+1+3 {
			t.Errorf("totals allowed=%d denied=%d, want 6 and 6", st.Allowed, st.Denied)
		}
	})
}

func TestSameStrategyExtends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{ReportingInterval: time.Hour})
		tb := TokenBucketStrategy(3, 1, 10*time.Second)
		f.Allow(idA)
		f.apply(response(assign(idA, tb, 5*time.Second)))
		allowN(f, idA, 3) // empty it
		time.Sleep(2 * time.Second)

		f.apply(response(assign(idA, tb, 5*time.Second)))
		st := state(t, f, idA)
		if st.Phase != PhaseActive || st.Tokens != 0 {
			t.Errorf("same strategy: tokens = %d (%v), want 0: the bucket keeps its state", st.Tokens, st.Phase)
		}
		if want := time.Now().Add(5 * time.Second); !st.ExpiresAt.Equal(want) {
			t.Errorf("same strategy: expires at %v, want now+TTL %v", st.ExpiresAt, want)
		}
		if f.Allow(idA) {
			t.Error("same strategy: allowed from the kept, empty bucket")
		}

		// Unset TTL on the same strategy: no expiry any more.
		f.apply(response(assign(idA, tb, noTTL)))
		if st := state(t, f, idA); !st.ExpiresAt.IsZero() || st.Tokens != 0 {
			t.Errorf("same strategy without TTL: state %+v, want no expiry and the kept bucket", st)
		}

		// A different strategy starts a new bucket, full.
		f.apply(response(assign(idA, TokenBucketStrategy(3, 2, 10*time.Second), time.Minute)))
		if st := state(t, f, idA); st.Tokens != 3 {
			t.Errorf("different strategy: tokens = %d, want 3 (new, full)", st.Tokens)
		}
		if got := allowN(f, idA, 4); got != 3 {
			t.Errorf("different strategy: allowed %d of 4, want 3", got)
		}
	})
}

func TestExpiry(t *testing.T) {
	t.Run("nil goes back to no-assignment", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := mustNew(t, Config{ReportingInterval: time.Hour})
			f.Allow(idA)
			f.apply(response(assign(idA, DenyAll(), time.Second)))
			time.Sleep(time.Second - time.Nanosecond)
			if f.Allow(idA) {
				t.Fatal("DENY_ALL allowed before its TTL")
			}
			time.Sleep(time.Nanosecond)
			if !f.Allow(idA) {
				t.Fatal("denied after the TTL, want the no-assignment ALLOW_ALL")
			}
			if st := state(t, f, idA); st.Phase != PhaseNoAssignment || st.Strategy != AllowAll() {
				t.Fatalf("after expiry state = %+v, want no-assignment", st)
			}
		})
	})

	t.Run("fallback then abandoned", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fb := TokenBucketStrategy(1, 1, time.Hour)
			f := mustNew(t, Config{ReportingInterval: time.Hour, Expired: &Expired{Fallback: fb, Timeout: 10 * time.Second}})
			f.Allow(idA)
			f.apply(response(assign(idA, AllowAll(), time.Second)))
			time.Sleep(time.Second)
			st := state(t, f, idA)
			if st.Phase != PhaseExpired || st.Strategy != fb || st.Tokens != 1 || !st.ExpiresAt.Equal(time.Now().Add(10*time.Second)) {
				t.Fatalf("after expiry state = %+v, want expired with the fallback, full, ending in 10s", st)
			}
			if got := allowN(f, idA, 2); got != 1 {
				t.Fatalf("fallback bucket of 1 allowed %d of 2", got)
			}
			time.Sleep(10*time.Second - time.Nanosecond)
			if _, ok := f.State(idA); !ok {
				t.Fatal("abandoned before the expired behaviour's timeout")
			}
			time.Sleep(time.Nanosecond)
			if n := f.Stats().Buckets; n != 0 {
				t.Fatalf("Buckets = %d after the expired behaviour's timeout, want 0", n)
			}
			if _, ok := f.State(idA); ok {
				t.Fatal("still tracked after the expired behaviour's timeout, want abandoned")
			}
			// The next request starts it anew.
			if !f.Allow(idA) {
				t.Fatal("a restarted bucket denied its first request under ALLOW_ALL no-assignment")
			}
			if st := state(t, f, idA); st.Phase != PhaseNoAssignment || st.Allowed != 1 || st.Denied != 0 {
				t.Fatalf("restarted state = %+v, want a new no-assignment bucket", st)
			}
		})
	})

	t.Run("reuse last keeps the token bucket", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tb := TokenBucketStrategy(2, 1, time.Hour)
			f := mustNew(t, Config{ReportingInterval: time.Hour, Expired: &Expired{ReuseLast: true, Timeout: 5 * time.Second}})
			f.Allow(idA)
			f.apply(response(assign(idA, tb, time.Second)))
			f.Allow(idA)
			time.Sleep(time.Second)
			st := state(t, f, idA)
			if st.Phase != PhaseExpired || st.Strategy != tb || st.Tokens != 1 {
				t.Fatalf("reuse: state = %+v, want expired, same strategy, 1 token left", st)
			}
			if !f.Allow(idA) || f.Allow(idA) {
				t.Fatal("reuse: want the one token left and no more")
			}
			// An expired assignment is replaced even by the same strategy:
			// a new, full bucket.
			f.apply(response(assign(idA, tb, time.Second)))
			if st := state(t, f, idA); st.Phase != PhaseActive || st.Tokens != 2 {
				t.Fatalf("same strategy after expiry: state = %+v, want active and full", st)
			}
			time.Sleep(6 * time.Second)
			if _, ok := f.State(idA); ok {
				t.Fatal("reuse: tracked after TTL+timeout")
			}
		})
	})

	t.Run("fallback equal to the last carries on", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tb := TokenBucketStrategy(2, 1, time.Hour)
			f := mustNew(t, Config{ReportingInterval: time.Hour, Expired: &Expired{Fallback: tb, Timeout: time.Hour}})
			f.Allow(idA)
			f.apply(response(assign(idA, tb, time.Second)))
			allowN(f, idA, 2)
			time.Sleep(time.Second)
			if st := state(t, f, idA); st.Phase != PhaseExpired || st.Tokens != 0 {
				t.Fatalf("state = %+v, want expired with the emptied bucket", st)
			}
		})
	})

	t.Run("zero timeout abandons at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := mustNew(t, Config{ReportingInterval: time.Hour, Expired: &Expired{}})
			f.Allow(idA)
			f.apply(response(assign(idA, DenyAll(), time.Second)))
			time.Sleep(time.Second)
			if _, ok := f.State(idA); ok {
				t.Fatal("tracked after expiry with a zero expired timeout")
			}
		})
	})

	t.Run("zero TTL expires at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := mustNew(t, Config{ReportingInterval: time.Hour})
			f.Allow(idA)
			f.apply(response(assign(idA, DenyAll(), 0)))
			if !f.Allow(idA) {
				t.Fatal("a TTL-0 DENY_ALL applied, want it expired at once")
			}
		})
	})

	t.Run("unset TTL never expires", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := mustNew(t, Config{ReportingInterval: time.Hour})
			f.Allow(idA)
			f.apply(response(assign(idA, DenyAll(), noTTL)))
			time.Sleep(1000 * time.Hour)
			if f.Allow(idA) {
				t.Fatal("an assignment without TTL expired")
			}
		})
	})
}

func TestAbandon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{ReportingInterval: time.Hour})
		f.Allow(idA)
		f.Allow(idB)
		f.apply(response(assign(idA, DenyAll(), noTTL)))
		f.Allow(idA)
		f.apply(response(abandon(idA)))
		if _, ok := f.State(idA); ok {
			t.Fatal("tracked after abandon_action")
		}
		if s := f.Stats(); s.Buckets != 1 {
			t.Fatalf("Buckets = %d after abandoning one of two", s.Buckets)
		}
		if !f.Allow(idA) {
			t.Fatal("after abandon the DENY_ALL assignment still applies")
		}
		if st := state(t, f, idA); st.Phase != PhaseNoAssignment || st.Allowed != 1 || st.Denied != 0 {
			t.Fatalf("after abandon state = %+v, want a new bucket", st)
		}
	})
}

func TestIgnoredActions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{ReportingInterval: time.Hour})
		f.Allow(idA)
		f.apply(response(
			assign(idB, DenyAll(), noTTL), // never reported
			assign(idA, Strategy{Kind: KindTokenBucket, TokenBucket: TokenBucket{MaxTokens: 1}}, noTTL), // fill_interval 0
		))
		f.apply(response(assign(idA, DenyAll(), noTTL)))
		bad := assign(idA, AllowAll(), noTTL)
		bad.GetQuotaAssignmentAction().RateLimitStrategy = &typev3.RateLimitStrategy{}
		noAction := assign(idA, AllowAll(), noTTL)
		noAction.BucketAction = nil
		f.apply(response(bad, noAction, assign(nil, DenyAll(), noTTL)))
		if _, ok := f.State(idB); ok {
			t.Error("an assignment for an unknown bucket created it")
		}
		if st := state(t, f, idA); st.Strategy != DenyAll() {
			t.Errorf("strategy = %v after invalid actions, want the last valid one, DENY_ALL", st.Strategy)
		}
		if s := f.Stats(); s.IgnoredActions != 5 || s.Responses != 3 {
			t.Errorf("IgnoredActions, Responses = %d, %d; want 5, 3", s.IgnoredActions, s.Responses)
		}
	})
}

func TestRequestsPerTimeUnitAllows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{ReportingInterval: time.Hour, NoAssignment: DenyAll()})
		f.Allow(idA)
		a := assign(idA, AllowAll(), noTTL)
		a.GetQuotaAssignmentAction().RateLimitStrategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
			RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 1, TimeUnit: typev3.RateLimitUnit_SECOND}}}
		f.apply(response(a))
		if got := allowN(f, idA, 10); got != 10 {
			t.Errorf("requests_per_time_unit allowed %d of 10, want all", got)
		}
	})
}

func TestHandle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{ReportingInterval: time.Hour})
		h := f.Bucket(idA)
		if _, ok := f.State(idA); ok {
			t.Fatal("Bucket created the bucket before a request")
		}
		h.Allow()
		f.Allow(idA)
		f.apply(response(assign(idA, TokenBucketStrategy(1, 1, time.Hour), noTTL)))
		if !h.Allow() || f.Allow(idA) {
			t.Fatal("handle and map Allow do not share the bucket's tokens")
		}
		f.apply(response(abandon(idA)))
		if !h.Allow() {
			t.Fatal("handle after abandon: denied, want a new no-assignment bucket")
		}
		if st := state(t, f, idA); st.Phase != PhaseNoAssignment || st.Allowed != 1 {
			t.Fatalf("handle after abandon: state %+v, want a new bucket with 1 request", st)
		}
	})
}

func TestAllowDoesNotAllocate(t *testing.T) {
	f := mustNew(t, Config{ReportingInterval: time.Hour})
	id := map[string]string{"name": "a", "env": "prod", "tenant": "t1"}
	f.Allow(id)
	f.apply(response(assign(id, TokenBucketStrategy(1000, 1000, time.Millisecond), noTTL)))
	if n := testing.AllocsPerRun(1000, func() { f.Allow(id) }); n != 0 {
		t.Errorf("Allow of a known bucket: %v allocations, want 0", n)
	}
	h := f.Bucket(id)
	if n := testing.AllocsPerRun(1000, func() { h.Allow() }); n != 0 {
		t.Errorf("Bucket.Allow: %v allocations, want 0", n)
	}
}

// TestConcurrent runs requests, responses and reports together, for the
// race detector, and checks that no request goes uncounted.
func TestConcurrent(t *testing.T) {
	f := mustNew(t, Config{ReportingInterval: time.Hour})
	ids := []map[string]string{idA, idB, {"name": "c"}}
	const workers, per = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			h := f.Bucket(ids[w%len(ids)])
			for i := range per {
				if i%2 == 0 {
					f.Allow(ids[i%len(ids)])
				} else {
					h.Allow()
				}
			}
		})
	}
	var reported uint64
	wg.Go(func() {
		for i := range 200 {
			id := ids[i%len(ids)]
			f.apply(response(assign(id, TokenBucketStrategy(uint32(i%5), 1, time.Millisecond), time.Millisecond)))
			f.mu.Lock()
			m := f.takeReport(true, time.Now())
			f.mu.Unlock()
			for _, u := range m.GetBucketQuotaUsages() {
				reported += u.GetNumRequestsAllowed() + u.GetNumRequestsDenied()
			}
		}
	})
	wg.Wait()
	s := f.Stats()
	if s.Allowed+s.Denied != workers*per {
		t.Errorf("decided %d requests, want %d", s.Allowed+s.Denied, workers*per)
	}
	f.mu.Lock()
	m := f.takeReport(true, time.Now())
	f.mu.Unlock()
	for _, u := range m.GetBucketQuotaUsages() {
		reported += u.GetNumRequestsAllowed() + u.GetNumRequestsDenied()
	}
	if reported != workers*per {
		t.Errorf("reports counted %d requests, want %d", reported, workers*per)
	}
}

func BenchmarkAllow(b *testing.B) {
	f := mustNew(b, Config{ReportingInterval: time.Hour})
	id := map[string]string{"name": "a", "env": "prod"}
	f.Allow(id)
	f.apply(response(assign(id, TokenBucketStrategy(1<<20, 1<<20, time.Millisecond), noTTL)))
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f.Allow(id)
		}
	})
	b.Run("handle", func(b *testing.B) {
		h := f.Bucket(id)
		b.ReportAllocs()
		for b.Loop() {
			h.Allow()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				f.Allow(id)
			}
		})
	})
}

// TestReserve: a reservation takes a held token at once, or the next one
// not yet owed with the delay until its fill; while a token is owed no
// request is admitted; a reservation cancelled before its time gives its
// token back; none is made past the assignment's expiry, or without a
// token bucket.
func TestReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{ReportingInterval: time.Hour, NoAssignment: DenyAll()})
		h := f.Bucket(idA)
		if _, ok, _ := h.Reserve(); ok {
			t.Fatal("reserved without an assignment")
		}
		h.Allow()
		f.apply(response(assign(idA, TokenBucketStrategy(2, 1, 100*time.Millisecond), time.Second)))
		var delays []time.Duration
		var cancels []func()
		for range 4 {
			d, ok, cancel := h.Reserve()
			if !ok {
				t.Fatalf("reservation %d refused", len(delays)+1)
			}
			delays = append(delays, d)
			cancels = append(cancels, cancel)
		}
		if want := []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond}; !slices.Equal(delays, want) {
			t.Fatalf("delays %v, want %v", delays, want)
		}
		if h.Allow() {
			t.Fatal("admitted while two tokens are owed")
		}
		cancels[3]() // before its time: the token comes back
		time.Sleep(100 * time.Millisecond)
		if h.Allow() {
			t.Fatal("admitted the fill that pays the third reservation")
		}
		time.Sleep(100 * time.Millisecond)
		if !h.Allow() || h.Allow() {
			t.Fatal("want the one token the cancelled reservation gave back")
		}
		// Tokens that would fill after the expiry (a second from the
		// assignment, 200 ms from now... less) are not reserved.
		for range 20 {
			if _, ok, _ := h.Reserve(); !ok {
				break
			}
		}
		if d, ok, _ := h.Reserve(); ok {
			t.Fatalf("reserved a token %v away, past the assignment's expiry", d)
		}
		f.apply(response(assign(idA, DenyAll(), time.Minute)))
		if _, ok, _ := h.Reserve(); ok {
			t.Fatal("reserved under deny all")
		}
	})
}
