package client_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/client"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// BenchmarkLimiterAllow is what a request decided on a lease costs in
// the process: Allow on a key whose grant holds (a limit no run spends),
// no round trip.
func BenchmarkLimiterAllow(b *testing.B) {
	rs, err := rules.New([]rules.Rule{{Name: "api", Limit: window.Limit{Limit: 1 << 40, Window: time.Minute}, Leasable: true}})
	if err != nil {
		b.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Rules: rs})
	if err != nil {
		b.Fatal(err)
	}
	url := apitest.Serve(b, http.Handler(h)).URL
	c, err := client.New(url, client.WithLeaseInterval(100*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	l, err := c.Limiter("api", "k")
	if err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !l.Reserve().OK(); {
		if time.Now().After(deadline) {
			b.Fatal("no grant within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportAllocs()
	b.ResetTimer()
	allowed := 0
	for range b.N {
		if l.Allow() {
			allowed++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
}
