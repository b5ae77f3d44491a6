package client_test

import (
	"fmt"
	"log"
	"time"

	"github.com/rlcluster/rlcluster/client"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// startLeasingNode serves an in-process rlnode over HTTP/1.1 and h2c (a
// lease stream needs HTTP/2) with a rule "api" of 100 a minute that
// quota leases may hold, and returns its URL.
func startLeasingNode() (url string, stop func()) {
	rs, err := rules.New([]rules.Rule{{Name: "api", Limit: window.Limit{Limit: 100, Window: time.Minute}, Leasable: true}})
	if err != nil {
		log.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Rules: rs})
	if err != nil {
		log.Fatal(err)
	}
	srv := apitest.NewUnstarted(h)
	srv.Start()
	return srv.URL, srv.Close
}

// A Limiter admits requests of a leasable rule's key in the process,
// against grants the node sizes to what the key is asked for: the first
// requests go to Check, and once the grant arrives (a round trip later)
// Allow, Wait and Reserve cost no round trip.
func ExampleClient_Limiter() {
	url, stop := startLeasingNode()
	defer stop()
	c, err := client.New(url, client.WithLeaseInterval(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	l, err := c.Limiter("api", "alice")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first request allowed:", l.Allow()) // by Check

	r := l.Reserve() // a token of the grant, once it has come
	for deadline := time.Now().Add(5 * time.Second); !r.OK() && time.Now().Before(deadline); r = l.Reserve() {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("reserved from the grant:", r.OK())
	// Output:
	// first request allowed: true
	// reserved from the grant: true
}
