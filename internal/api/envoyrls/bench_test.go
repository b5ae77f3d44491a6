package envoyrls_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/envoyrls"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
)

// BenchmarkDecide is ShouldRateLimit without a transport: one descriptor
// of a domain's limit on the in-memory store, over 10k values (allowed)
// or one value (denied after its first 100 hits), as loadtest/bench sends
// them.
func BenchmarkDecide(b *testing.B) {
	rs, err := rules.Parse([]byte(`domain: bench
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
  - key: hot
    rate_limit: {unit: minute, requests_per_unit: 100}
`))
	if err != nil {
		b.Fatal(err)
	}
	dec, err := decision.New(decision.Config{
		Store: region.NewMemory(region.MemoryConfig{}), Region: "local", MaxKeyBytes: 1024, MaxHits: 1 << 53,
		MaxWindow: time.Hour, MaxLogLimit: 10, Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
	}, rs)
	if err != nil {
		b.Fatal(err)
	}
	svc := envoyrls.New(envoyrls.Config{Decider: dec, MaxBatch: 10, Now: time.Now})
	req := func(key, value string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}}}
	}
	for _, tc := range []struct {
		name string
		reqs []*rlsv3.RateLimitRequest
		want rlsv3.RateLimitResponse_Code
	}{
		{"uniform10k", func() []*rlsv3.RateLimitRequest {
			var rs []*rlsv3.RateLimitRequest
			for i := range 10000 {
				rs = append(rs, req("user", "u"+strconv.Itoa(i)))
			}
			return rs
		}(), rlsv3.RateLimitResponse_OK},
		{"hotkey", []*rlsv3.RateLimitRequest{req("hot", "h")}, rlsv3.RateLimitResponse_OVER_LIMIT},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			for i := range 200 { // past the hot key's limit
				if _, err := svc.Decide(ctx, tc.reqs[i%len(tc.reqs)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				resp, err := svc.Decide(ctx, tc.reqs[i%len(tc.reqs)])
				// The hot key's sliding window admits a few as its
				// previous minute's weight falls.
				if err != nil || (tc.name != "hotkey" && resp.GetOverallCode() != tc.want) {
					b.Fatalf("Decide = %v, %v; want %v", resp.GetOverallCode(), err, tc.want)
				}
				i++
			}
		})
	}
}
