package rlqs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/rlqs"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// newService is a node's quota service on the in-memory store (its
// clock time.Now: a synctest bubble's, inside one), with one leasable
// rule "api" of lim.
func newService(tb testing.TB, lim window.Limit) *rlqs.Service {
	tb.Helper()
	rs, err := rules.New([]rules.Rule{{Name: "api", Limit: lim, Leasable: true}})
	if err != nil {
		tb.Fatal(err)
	}
	dec, err := decision.New(decision.Config{
		Store: region.NewMemory(region.MemoryConfig{}), Region: "local",
		MaxKeyBytes: 1024, MaxHits: window.MaxLimit,
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
	}, rs)
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := rlqs.New(rlqs.Config{Decider: dec, Now: time.Now, Registerer: prometheus.NewRegistry(), MaxBuckets: 1000})
	if err != nil {
		tb.Fatal(err)
	}
	return svc
}

// benchService is newService with a limit no report here spends.
func benchService(b *testing.B) *rlqs.Service {
	return newService(b, window.Limit{Limit: 1 << 40, Window: time.Minute})
}

// report is a periodic report of n buckets of stream s, each at about
// ten requests a second.
func report(s, n int) *rlqsv3.RateLimitQuotaUsageReports {
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "app"}
	for i := range n {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"rule": "api", "key": fmt.Sprintf("s%d-b%d", s, i)}},
			TimeElapsed:        durationpb.New(time.Second),
			NumRequestsAllowed: 10,
		})
	}
	return m
}

// BenchmarkReport answers the periodic reports of one stream of 100
// buckets: the reports a second one core answers, and their buckets.
func BenchmarkReport(b *testing.B) {
	svc := benchService(b)
	m := report(0, 100)
	in := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	out := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- svc.Stream(context.Background(), func() (*rlqsv3.RateLimitQuotaUsageReports, error) {
			r, ok := <-in
			if !ok {
				return nil, io.EOF
			}
			return r, nil
		}, func(*rlqsv3.RateLimitQuotaResponse) error { out <- struct{}{}; return nil })
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		in <- m
		<-out
	}
	b.StopTimer()
	close(in)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reports/s")
	b.ReportMetric(100*float64(b.N)/b.Elapsed().Seconds(), "buckets/s")
}

// BenchmarkStreamMemory holds 1,000 streams of 100 buckets each open
// (each after two reports) and reports the heap they take, per stream
// and per bucket.
func BenchmarkStreamMemory(b *testing.B) {
	const streams, buckets = 1000, 100
	for range b.N {
		svc := benchService(b)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithCancel(context.Background())
		ends := make([]chan *rlqsv3.RateLimitQuotaUsageReports, streams)
		got := make(chan struct{}, streams)
		done := make(chan error, streams)
		for s := range streams {
			in := make(chan *rlqsv3.RateLimitQuotaUsageReports, 2)
			in <- report(s, buckets)
			in <- report(s, buckets)
			ends[s] = in
			n := 0
			go func() {
				done <- svc.Stream(ctx, func() (*rlqsv3.RateLimitQuotaUsageReports, error) {
					r, ok := <-in
					if !ok {
						return nil, io.EOF
					}
					return r, nil
				}, func(*rlqsv3.RateLimitQuotaResponse) error {
					if n++; n == 2 {
						got <- struct{}{}
					}
					return nil
				})
			}()
		}
		for range streams {
			<-got
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if svc.Streams() != streams {
			b.Fatalf("%d streams open, want %d", svc.Streams(), streams)
		}
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		b.ReportMetric(heap/streams, "B/stream")
		b.ReportMetric(heap/(streams*buckets), "B/bucket")
		for _, in := range ends {
			close(in)
		}
		for range streams {
			<-done
		}
		cancel()
	}
}
