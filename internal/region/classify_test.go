package region

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlcluster/rlcluster/internal/porttest"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// busyServers starts a replica whose master never answers, told not to
// serve stale data (it replies MASTERDOWN), and a cluster node that serves
// no slot (it replies CLUSTERDOWN).
func busyServers(t *testing.T) (stale, unslotted *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	stale = redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: stale.Addr})
	defer c.Close()
	if err := c.ConfigSet(ctx, "replica-serve-stale-data", "no").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "replicaof", "127.0.0.1", strconv.Itoa(porttest.Free(t))).Err(); err != nil {
		t.Fatal(err)
	}
	return stale, redistest.Start(t, "--cluster-enabled", "yes")
}

// TestClassify classifies the errors go-redis returns for replies of a real
// redis-server and for failures without a reply.
func TestClassify(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	stale, unslotted := busyServers(t)
	client := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := client(srv.Addr)
	if err := c.Set(ctx, "s", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// error_reply sends its message as the server's own error reply would.
	replyOf := func(msg string) error {
		return c.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, msg).Err()
	}
	closed := client(srv.Addr)
	_ = closed.Close()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	wrongType := c.HGet(ctx, "s", "f").Err()

	for _, tt := range []struct {
		name string
		err  error
		want fault
	}{
		{"nil", nil, faultNone},
		{"WRONGTYPE", wrongType, faultReply},
		{"WRONGTYPE wrapped", fmt.Errorf("check: %w", wrongType), faultReply},
		{"NOSCRIPT", c.EvalSha(ctx, "0000000000000000000000000000000000000000", nil).Err(), faultReply},
		{"script error", c.Eval(ctx, "return redis.call('hget', KEYS[1], 'f')", []string{"s"}).Err(), faultReply},
		{"batch script error", scriptError("WRONGTYPE Operation against a key holding the wrong kind of value"), faultReply},
		{"nil reply", c.Get(ctx, "missing").Err(), faultReply},
		{"MASTERDOWN", client(stale.Addr).Get(ctx, "k").Err(), faultBusy},
		{"CLUSTERDOWN", client(unslotted.Addr).Get(ctx, "k").Err(), faultBusy},
		{"LOADING", replyOf("LOADING Redis is loading the dataset in memory"), faultBusy},
		{"TRYAGAIN", replyOf("TRYAGAIN Multiple keys request during rehashing of slot"), faultBusy},
		{"batch script MASTERDOWN", scriptError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), faultBusy},
		{"LOADINGX", replyOf("LOADINGX not a busy server"), faultReply},
		{"refused", client("127.0.0.1:"+strconv.Itoa(porttest.Free(t))).Get(ctx, "k").Err(), faultNoReply},
		{"closed client", closed.Get(ctx, "k").Err(), faultNoReply},
		{"canceled", c.Get(canceled, "k").Err(), faultNoReply},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.err); got != tt.want {
				t.Errorf("classify(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

// TestCheckBusyIsUnavailable checks that a decision answered by a server
// that cannot serve fails with ErrUnavailable, alone and in a batch.
func TestCheckBusyIsUnavailable(t *testing.T) {
	stale, unslotted := busyServers(t)
	l := window.Limit{Limit: 5, Window: time.Minute}
	now := time.UnixMilli(1_760_000_040_000)
	for _, srv := range []*redistest.Server{stale, unslotted} {
		r, err := newRedis(RedisConfig{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		for _, n := range []int{1, 2} {
			reqs := make([]Request, n)
			for i := range reqs {
				reqs[i] = Request{Key: "k" + strconv.Itoa(i), Limit: l, Hits: 1, Now: now}
			}
			err := r.Check(context.Background(), reqs, make([]Result, n))
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("%s: Check of %d: error %v, want ErrUnavailable", srv.Addr, n, err)
			}
		}
	}
}
