package api_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api"
)

// TestInlineBurst: an inline token bucket of 5 per second with a burst of
// 20 admits 20 hits at once and then waits for the refill, through every
// protocol (the JSON fast path included); burst is refused with another
// algorithm, above 1000 times the limit, and hits above the burst.
func TestInlineBurst(t *testing.T) {
	s := newServer(t, api.Config{})
	lim := func(burst uint64, algo ratelimitv1.Algorithm) *ratelimitv1.Limit {
		return &ratelimitv1.Limit{Limit: 5, Window: durationpb.New(time.Second), Algorithm: algo, Burst: burst, Scope: ratelimitv1.Scope_SCOPE_REGION}
	}
	tb := ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET
	for _, pr := range protocols {
		c := s.client(t, pr.h2c, pr.opts...)
		t.Run(pr.name, func(t *testing.T) {
			key := "burst-" + pr.name
			for i := range 20 {
				r, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: key, Limit: lim(20, tb)}))
				if err != nil {
					t.Fatal(err)
				}
				if !r.Msg.GetAllowed() || r.Msg.GetRemaining() != uint64(19-i) {
					t.Fatalf("hit %d: allowed %v remaining %d, want true %d", i+1, r.Msg.GetAllowed(), r.Msg.GetRemaining(), 19-i)
				}
			}
			r, err := c.Check(context.Background(), connect.NewRequest(&ratelimitv1.CheckRequest{Key: key, Limit: lim(20, tb)}))
			if err != nil {
				t.Fatal(err)
			}
			if r.Msg.GetAllowed() || r.Msg.GetRetryAfter().AsDuration() != 200*time.Millisecond || r.Msg.GetResetAfter().AsDuration() != 4*time.Second {
				t.Errorf("hit 21: allowed %v retry_after %v reset_after %v, want false 200ms 4s",
					r.Msg.GetAllowed(), r.Msg.GetRetryAfter().AsDuration(), r.Msg.GetResetAfter().AsDuration())
			}
			for _, tc := range []struct {
				name string
				req  *ratelimitv1.CheckRequest
				want string
			}{
				{"not a token bucket", &ratelimitv1.CheckRequest{Key: "a", Limit: lim(20, ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW)}, "limit.burst: applies to the token bucket algorithm only, not fixed_window"},
				{"too large", &ratelimitv1.CheckRequest{Key: "a", Limit: lim(5001, tb)}, "limit.burst: must be at most 1000 times the limit (5) and at most 2^53, got 5001"},
				{"hits above the burst", &ratelimitv1.CheckRequest{Key: "a", Hits: 21, Limit: lim(20, tb)}, "hits: 21 is more than the burst of 20"},
			} {
				_, err := c.Check(context.Background(), connect.NewRequest(tc.req))
				checkInvalid(t, tc.name, err, tc.want)
			}
		})
	}
}
