package rlqsfilter

import (
	"errors"
	"fmt"
	"math/bits"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// StrategyKind says which of a [Strategy]'s fields applies, as the
// strategy oneof of envoy.type.v3.RateLimitStrategy does.
type StrategyKind uint8

const (
	// KindBlanketRule allows or denies every request (blanket_rule).
	KindBlanketRule StrategyKind = iota
	// KindTokenBucket takes one token per request (token_bucket).
	KindTokenBucket
)

// Strategy is a rate limiting strategy: envoy.type.v3.RateLimitStrategy
// without requests_per_time_unit (see [StrategyFromProto]). The zero value
// is a blanket ALLOW_ALL, which is what Envoy applies where a strategy is
// not set. Strategies are comparable with ==; the filter does so to tell
// an assignment that only extends the active one from one that replaces
// it, so build them with [AllowAll], [DenyAll], [TokenBucketStrategy] or
// [StrategyFromProto], which normalise the fields that do not apply.
type Strategy struct {
	Kind StrategyKind
	// BlanketRule applies when Kind is KindBlanketRule.
	BlanketRule typev3.RateLimitStrategy_BlanketRule
	// TokenBucket applies when Kind is KindTokenBucket.
	TokenBucket TokenBucket
}

// TokenBucket mirrors envoy.type.v3.TokenBucket: it holds at most
// MaxTokens tokens and starts full; TokensPerFill tokens are added every
// FillInterval. MaxTokens 0 denies every request, as the proto documents.
// TokensPerFill 0 means 1, the proto's default for an unset
// tokens_per_fill. FillInterval must be > 0.
//
// The fill is continuous, as in Envoy's TokenBucketImpl and
// AtomicTokenBucketImpl (the one the rate_limit_quota filter uses): a
// request may take a token as soon as TokensPerFill/FillInterval of the
// elapsed time has added up to one, not only at FillInterval boundaries.
// Envoy keeps the count in a double and, in the rate_limit_quota filter,
// rounds fill_interval down to whole seconds; this package counts in
// integers at nanosecond precision, so a fill is exact and a sub-second
// interval means what it says.
type TokenBucket struct {
	MaxTokens     uint32
	TokensPerFill uint32
	FillInterval  time.Duration
}

// AllowAll returns the blanket rule ALLOW_ALL.
func AllowAll() Strategy { return Strategy{} }

// DenyAll returns the blanket rule DENY_ALL.
func DenyAll() Strategy {
	return Strategy{Kind: KindBlanketRule, BlanketRule: typev3.RateLimitStrategy_DENY_ALL}
}

// TokenBucketStrategy returns a token bucket strategy.
func TokenBucketStrategy(maxTokens, tokensPerFill uint32, fillInterval time.Duration) Strategy {
	return Strategy{Kind: KindTokenBucket, TokenBucket: TokenBucket{
		MaxTokens: maxTokens, TokensPerFill: tokensPerFill, FillInterval: fillInterval,
	}}.normalize()
}

// normalize zeroes the fields that do not apply to s.Kind and gives
// TokensPerFill its default, so that == compares what the strategy does.
func (s Strategy) normalize() Strategy {
	switch s.Kind {
	case KindTokenBucket:
		s.BlanketRule = 0
		if s.TokenBucket.TokensPerFill == 0 {
			s.TokenBucket.TokensPerFill = 1
		}
	default:
		s.TokenBucket = TokenBucket{}
	}
	return s
}

func (s Strategy) validate() error {
	switch s.Kind {
	case KindBlanketRule:
		if _, ok := typev3.RateLimitStrategy_BlanketRule_name[int32(s.BlanketRule)]; !ok {
			return fmt.Errorf("unknown blanket rule %d", s.BlanketRule)
		}
	case KindTokenBucket:
		if s.TokenBucket.FillInterval <= 0 {
			return fmt.Errorf("token bucket fill interval %v: must be > 0", s.TokenBucket.FillInterval)
		}
	default:
		return fmt.Errorf("unknown strategy kind %d", s.Kind)
	}
	return nil
}

// errNoStrategy is an envoy.type.v3.RateLimitStrategy whose oneof is
// unset: its validation rule requires one, and Envoy ignores such an
// action.
var errNoStrategy = errors.New("rate limit strategy sets none of its oneof")

// StrategyFromProto converts a rate_limit_strategy. A nil p is ALLOW_ALL,
// as QuotaAssignmentAction.rate_limit_strategy documents for an unset
// field. requests_per_time_unit is not supported and becomes ALLOW_ALL
// (its algorithm is left to the implementation; Envoy's filter logs an
// error and ignores such an action instead, keeping the bucket's previous
// state — allowing is the fail-open choice the proto makes for "no
// strategy"). It returns an error for what envoy.type.v3's validation
// rules reject: no strategy in the oneof, an unknown blanket rule, a
// tokens_per_fill of 0, a missing or non-positive fill_interval.
func StrategyFromProto(p *typev3.RateLimitStrategy) (Strategy, error) {
	if p == nil {
		return AllowAll(), nil
	}
	switch st := p.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		s := Strategy{Kind: KindBlanketRule, BlanketRule: st.BlanketRule}
		if err := s.validate(); err != nil {
			return Strategy{}, err
		}
		return s, nil
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		return AllowAll(), nil
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := st.TokenBucket
		if tpf := tb.GetTokensPerFill(); tpf != nil && tpf.GetValue() == 0 {
			return Strategy{}, errors.New("token bucket tokens_per_fill: must be > 0 when set")
		}
		fi := tb.GetFillInterval()
		if fi == nil {
			return Strategy{}, errors.New("token bucket fill_interval: required")
		}
		if err := fi.CheckValid(); err != nil {
			return Strategy{}, fmt.Errorf("token bucket fill_interval: %w", err)
		}
		s := TokenBucketStrategy(tb.GetMaxTokens(), tb.GetTokensPerFill().GetValue(), fi.AsDuration())
		if err := s.validate(); err != nil {
			return Strategy{}, err
		}
		return s, nil
	default:
		return Strategy{}, errNoStrategy
	}
}

// Proto returns s as an envoy.type.v3.RateLimitStrategy, for a server or
// a test to send.
func (s Strategy) Proto() *typev3.RateLimitStrategy {
	if s.Kind == KindTokenBucket {
		s = s.normalize()
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     s.TokenBucket.MaxTokens,
			TokensPerFill: wrapperspb.UInt32(s.TokenBucket.TokensPerFill),
			FillInterval:  durationpb.New(s.TokenBucket.FillInterval),
		}}}
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: s.BlanketRule}}
}

// String describes s for logs and test failures.
func (s Strategy) String() string {
	if s.Kind == KindTokenBucket {
		return fmt.Sprintf("token_bucket{max_tokens:%d tokens_per_fill:%d fill_interval:%v}",
			s.TokenBucket.MaxTokens, s.TokenBucket.TokensPerFill, s.TokenBucket.FillInterval)
	}
	return s.BlanketRule.String()
}

// tokenState is a token bucket's state. The count is kept as whole tokens
// plus a fraction in units of 1/FillInterval(ns) of a token, so that the
// continuous fill of TokensPerFill per FillInterval is exact: elapsed
// nanoseconds times TokensPerFill is the fill in those units.
type tokenState struct {
	tokens uint64
	frac   uint64 // < FillInterval in nanoseconds
	last   time.Time
	// debt is the tokens reserved ahead of their fill ([Bucket.Reserve]):
	// fills pay it before the bucket gains any, and no request is
	// admitted while it is owed.
	debt uint64
}

// reset fills the bucket, as a new assignment's bucket starts; what is
// reserved of the old one is owed by the new.
func (s *tokenState) reset(tb TokenBucket, now time.Time) {
	*s = tokenState{tokens: uint64(tb.MaxTokens), last: now, debt: s.debt}
	s.pay()
}

// pay settles debt from the tokens held.
func (s *tokenState) pay() {
	p := min(s.tokens, s.debt)
	s.tokens -= p
	s.debt -= p
}

// refill adds what the time since the last refill has filled, capped at
// MaxTokens. A clock that steps back adds nothing.
func (s *tokenState) refill(tb TokenBucket, now time.Time) {
	defer s.pay()
	limit := uint64(tb.MaxTokens)
	if s.tokens >= limit && s.debt == 0 {
		// A full bucket does not bank the time it spends full.
		s.tokens, s.frac = limit, 0
		if now.After(s.last) {
			s.last = now
		}
		return
	}
	el := now.Sub(s.last)
	if el <= 0 {
		return
	}
	s.last = now
	// fill = el*TokensPerFill + frac, in 128 bits, then divided by the
	// interval: whole tokens and the new fraction.
	hi, lo := bits.Mul64(uint64(el), uint64(tb.TokensPerFill))
	var carry uint64
	lo, carry = bits.Add64(lo, s.frac, 0)
	hi += carry
	q := uint64(tb.FillInterval)
	if hi >= q { // the quotient needs more than 64 bits: far past full
		s.tokens, s.frac = limit, 0
		return
	}
	add, rem := bits.Div64(hi, lo, q)
	// Fills pay the debt before they add to the bucket.
	p := min(add, s.debt)
	s.debt -= p
	add -= p
	if add >= limit-min(s.tokens, limit) {
		s.tokens, s.frac = limit, 0
		return
	}
	s.tokens += add
	s.frac = rem
}

// take refills, then takes one token if there is one and none is owed.
func (s *tokenState) take(tb TokenBucket, now time.Time) bool {
	s.refill(tb, now)
	if s.tokens == 0 || s.debt > 0 {
		return false
	}
	s.tokens--
	return true
}

// reserve refills, then takes one token: one held now (delay 0), or the
// next one not yet owed, which it owes until a fill pays it; delay is the
// time until that fill.
func (s *tokenState) reserve(tb TokenBucket, now time.Time) (delay time.Duration) {
	if s.take(tb, now) {
		return 0
	}
	s.debt++
	// The debt'th token is filled when debt*FillInterval units have come
	// in, frac of them already (in units of 1/FillInterval ns of a token,
	// TokensPerFill a nanosecond).
	need := s.debt*uint64(tb.FillInterval) - min(s.frac, s.debt*uint64(tb.FillInterval))
	per := uint64(tb.TokensPerFill)
	return time.Duration((need + per - 1) / per)
}

// unreserve gives back a token reserve took.
func (s *tokenState) unreserve(tb TokenBucket) {
	if s.debt > 0 {
		s.debt--
		return
	}
	s.tokens = min(s.tokens+1, uint64(tb.MaxTokens))
}
