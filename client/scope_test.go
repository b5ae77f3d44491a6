package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rlcluster/rlcluster/client"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/region"
)

// TestScope: in a cluster of three regions a global token bucket is an
// error naming limit.scope, even failing open; a region-scoped one is
// decided and the Decision says which scope applied.
func TestScope(t *testing.T) {
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Now: func() time.Time { return t0 }, Regions: func() int { return 3 }})
	if err != nil {
		t.Fatal(err)
	}
	url := apitest.Serve(t, h).URL
	c := newClient(t, url, client.WithFailureMode(client.FailOpen))
	ctx := context.Background()
	d, err := c.Check(ctx, "alice", client.Limit{Limit: 5, Window: time.Minute, Algorithm: client.TokenBucket})
	if err == nil || connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "limit.scope") || d.Allowed {
		t.Errorf("Check(global token bucket) = %+v, %v; want an invalid_argument error naming limit.scope", d, err)
	}
	for _, tc := range []struct {
		limit client.Limit
		want  client.Scope
	}{
		{client.Limit{Limit: 5, Window: time.Minute, Algorithm: client.TokenBucket, Scope: client.ScopeRegion}, client.ScopeRegion},
		{client.Limit{Limit: 5, Window: time.Minute, Scope: client.ScopeRegion}, client.ScopeRegion},
		{client.Limit{Limit: 5, Window: time.Minute}, client.ScopeGlobal},
	} {
		d, err := c.Check(ctx, "alice", tc.limit)
		if err != nil || !d.Allowed || d.Scope != tc.want {
			t.Errorf("Check(%+v) = %+v, %v; want allowed with scope %v", tc.limit, d, err, tc.want)
		}
	}
}
