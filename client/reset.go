package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

// Reset clears key's counts under p in every region (for a [Limit], every
// inline counter of the key in its scope, whatever the window) and returns
// the reset instant: hits counted before it no longer count, once the
// reset has reached each region. When the node requires bearer tokens,
// only a token with the admin scope may reset (permission_denied). Reset
// is not retried and never falls back.
func (c *Client) Reset(ctx context.Context, key string, p Policy) (time.Time, error) {
	if p == nil {
		return time.Time{}, errors.New("client: reset: nil Policy")
	}
	if c.opts.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.timeout)
		defer cancel()
	}
	rule, lim := p.policy()
	resp, err := c.rpc.Reset(ctx, connect.NewRequest(&ratelimitv1.ResetRequest{Key: key, Rule: rule, Limit: lim}))
	if err != nil {
		return time.Time{}, fmt.Errorf("client: reset: %w", err)
	}
	return resp.Msg.GetResetAt().AsTime(), nil
}
