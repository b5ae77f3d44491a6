package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http/httptest"
	"time"

	"github.com/rlcluster/rlcluster/client"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/region"
)

func ExampleClient_Wait() {
	// An in-process node on the real clock.
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{})})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	c, err := client.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	// 4 per second: a token every 250 ms. Spend them all, then wait.
	perSecond := client.Limit{Limit: 4, Window: time.Second, Algorithm: client.TokenBucket}
	if _, err := c.CheckN(context.Background(), "alice", 4, perSecond); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	d, err := c.Wait(ctx, "alice", perSecond)
	fmt.Printf("allowed=%v err=%v waited at least 200ms: %v\n", d.Allowed, err, time.Since(start) >= 200*time.Millisecond)

	// A deadline sooner than the next token: Wait returns at once. (One
	// per minute: the next token is a minute away, the deadline a second.)
	perMinute := client.Limit{Limit: 1, Window: time.Minute, Algorithm: client.TokenBucket}
	if _, err := c.Check(context.Background(), "bob", perMinute); err != nil {
		log.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	d, err = c.Wait(short, "bob", perMinute)
	fmt.Printf("allowed=%v deadline too soon: %v\n", d.Allowed, errors.Is(err, client.ErrWaitDeadline))
	// Output:
	// allowed=true err=<nil> waited at least 200ms: true
	// allowed=false deadline too soon: true
}
