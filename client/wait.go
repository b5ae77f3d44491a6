package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Errors that Wait returns with the last decision.
var (
	// ErrWaitDeadline: the context's deadline comes before the node's
	// retryAfter, so waiting could not end in an admission. Wait returns
	// it at once, without waiting.
	ErrWaitDeadline = errors.New("client: wait would exceed the context's deadline")
	// ErrNeverAllowed: the request can never be admitted (more hits than
	// the limit), so waiting is pointless.
	ErrNeverAllowed = errors.New("client: wait: the hits can never be admitted")
	// ErrFallbackDenied: the node could not decide and the failure mode is
	// FailClosed.
	ErrFallbackDenied = errors.New("client: wait: the node could not decide and the failure mode denies")
)

// WaitJitter is the most Wait adds to a retryAfter, as a fraction of it:
// each waiter comes back at a random instant in [retryAfter,
// retryAfter*(1+WaitJitter)] (at least 1 ms of spread), so that many
// waiters denied together do not all retry at once.
const WaitJitter = 0.2

// Wait blocks until key may spend one hit of p and spends it; see
// [Client.WaitN].
func (c *Client) Wait(ctx context.Context, key string, p Policy) (Decision, error) {
	return c.WaitN(ctx, key, 1, p)
}

// WaitN blocks until key may spend hits of p, and spends them: it checks,
// and while denied sleeps for the answer's retryAfter plus jitter (see
// [WaitJitter]) and checks again. It returns the admitting decision, or
// the last decision and an error:
//
//   - [ErrWaitDeadline] at once when ctx's deadline is sooner than the
//     retryAfter (no request could be admitted before it);
//   - ctx's error when ctx is done while waiting;
//   - [ErrNeverAllowed] when the hits exceed the limit;
//   - [ErrFallbackDenied] when the node could not decide under
//     [FailClosed] (with [FailOpen] the fallback admits);
//   - the check's error otherwise.
//
// A denial consumes nothing, so waiting costs the node one check per
// retry.
func (c *Client) WaitN(ctx context.Context, key string, hits uint64, p Policy) (Decision, error) {
	for {
		d, err := c.CheckN(ctx, key, hits, p)
		switch {
		case err != nil:
			return d, err
		case d.Allowed:
			return d, nil
		case d.Fallback:
			return d, fmt.Errorf("%w: %w", ErrFallbackDenied, d.Err)
		case d.RetryAfter <= 0 || d.RetryAfter == time.Duration(math.MaxInt64):
			return d, ErrNeverAllowed
		}
		wait := d.RetryAfter
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left < wait {
				return d, ErrWaitDeadline
			}
			wait += jitter(d.RetryAfter, left-d.RetryAfter)
		} else {
			wait += jitter(d.RetryAfter, math.MaxInt64)
		}
		if !sleep(ctx, wait) {
			return d, fmt.Errorf("client: wait: %w", ctx.Err())
		}
	}
}

// jitter returns a random delay in [0, max(retry*WaitJitter, 1ms)], at most
// room.
func jitter(retry, room time.Duration) time.Duration {
	j := max(time.Duration(float64(retry)*WaitJitter), time.Millisecond)
	j = min(j, room)
	if j <= 0 {
		return 0
	}
	return rand.N(j + 1)
}
