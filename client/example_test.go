package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/rlcluster/rlcluster/client"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// exampleNow is 30 s into a minute (2025-06-15 15:20:30 UTC).
var exampleNow = time.Unix(1_750_000_830, 0)

// startNode serves an in-process rlnode (the in-memory store, a rule
// "api" of 2 per minute, the clock fixed at exampleNow) and returns its URL.
func startNode() (url string, stop func()) {
	rs, err := rules.New([]rules.Rule{{Name: "api", Limit: window.Limit{Limit: 2, Window: time.Minute}}})
	if err != nil {
		log.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{
		Store: region.NewMemory(region.MemoryConfig{}),
		Rules: rs,
		Now:   func() time.Time { return exampleNow },
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	return srv.URL, srv.Close
}

func ExampleClient_Check() {
	nodeURL, stop := startNode()
	defer stop()

	c, err := client.New(nodeURL, client.WithRetries(2, 10*time.Millisecond), client.WithFailureMode(client.FailOpen))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		d, err := c.Check(ctx, "alice", client.Rule("api"))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry after %v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	// An inline limit instead of a rule:
	d, err := c.Check(ctx, "bob", client.Limit{Limit: 10, Window: time.Hour, Algorithm: client.FixedWindow})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed=true remaining=1 retry after 0s
	// allowed=true remaining=0 retry after 0s
	// allowed=false remaining=0 retry after 1m0s
	// allowed=true remaining=9
}

func ExampleMiddleware() {
	nodeURL, stop := startNode()
	defer stop()

	c, err := client.New(nodeURL)
	if err != nil {
		log.Fatal(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	perUser := func(r *http.Request) string { return r.Header.Get("X-User") }
	h := client.Middleware(c, perUser, client.Limit{Limit: 2, Window: time.Minute}, client.WithPolicyName("per-user"))(app)

	for range 3 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-User", "alice")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%d %s | %s | Retry-After: %q\n", rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "per-user";q=2;w=60 | "per-user";r=1;t=60 | Retry-After: ""
	// 200 "per-user";q=2;w=60 | "per-user";r=0;t=60 | Retry-After: ""
	// 429 "per-user";q=2;w=60 | "per-user";r=0;t=60 | Retry-After: "60"
}

// The stats show the numbers behind a decision: here, 30 s into the
// minute with nothing before, the estimate is the count before this
// request, and Recompute gives it back from the stats alone.
func ExampleDecision_stats() {
	nodeURL, stop := startNode()
	defer stop()

	c, err := client.New(nodeURL)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		d, err := c.Check(ctx, "carol", client.Rule("api"))
		if err != nil {
			log.Fatal(err)
		}
		s := d.Stats
		fmt.Printf("allowed=%v bucket=%d elapsed=%dms current=%d previous=%d estimate=%d recomputed=%d\n",
			d.Allowed, s.Bucket, s.ElapsedMs, s.Current, s.Previous, s.Estimate, s.Recompute())
		for _, r := range s.Regions {
			fmt.Printf("  region %s: current=%d previous=%d age known=%v\n", r.Region, r.Current, r.Previous, r.HasAge)
		}
	}
	// Peek consumes nothing: its current is the count already spent.
	d, err := c.Peek(ctx, "carol", client.Rule("api"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("peek: allowed=%v current=%d estimate=%d\n", d.Allowed, d.Stats.Current, d.Stats.Estimate)
	// Output:
	// allowed=true bucket=29166680 elapsed=30000ms current=1 previous=0 estimate=0 recomputed=0
	//   region local: current=1 previous=0 age known=false
	// allowed=true bucket=29166680 elapsed=30000ms current=2 previous=0 estimate=1 recomputed=1
	//   region local: current=2 previous=0 age known=false
	// peek: allowed=false current=2 estimate=2
}
