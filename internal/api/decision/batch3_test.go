package decision_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/decision"
)

// TestDecideBatchSizes: batches of every size up to eight are decided,
// each request once; a batch as long as a lone request and its reset
// reads (three) was given room for one request.
func TestDecideBatchSizes(t *testing.T) {
	d := newDecider(t, nil, &apitest.Pool{})
	lim := inline(ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW, ratelimitv1.Scope_SCOPE_UNSPECIFIED)
	now := time.Unix(1_700_000_000, 0)
	for n := 1; n <= 8; n++ {
		reqs := make([]decision.Request, n)
		for i := range reqs {
			r, err := d.Validate(decision.Input{NS: decision.Inline, Key: fmt.Sprintf("b%d-%d", n, i), Limit: lim, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			reqs[i] = r
		}
		out := make([]decision.Outcome, n)
		if err := d.Decide(context.Background(), reqs, out); err != nil {
			t.Fatalf("batch of %d: %v", n, err)
		}
		for i, o := range out {
			if !o.Allowed || o.Remaining != 99 {
				t.Errorf("batch of %d, request %d: allowed %v, remaining %d; want true, 99", n, i, o.Allowed, o.Remaining)
			}
		}
	}
}
