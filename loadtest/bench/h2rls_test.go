package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scriptedRLS answers by descriptor value: "over" is OVER_LIMIT, "fail" a
// gRPC error, anything else OK; it counts calls.
type scriptedRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
}

func (s *scriptedRLS) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s.calls.Add(1)
	switch r.GetDescriptors()[0].GetEntries()[0].GetValue() {
	case "over":
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
	case "fail":
		return nil, status.Error(codes.Unavailable, "scripted failure")
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestH2RLSClient drives a grpc-go server with the hand-framed client:
// every answer's code is read right, errors are errors, and many calls in
// flight on few connections (past the server's stream limit and its
// flow-control windows) all complete.
func TestH2RLSClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := &scriptedRLS{}
	s := grpc.NewServer(grpc.MaxConcurrentStreams(4))
	rlsv3.RegisterRateLimitServiceServer(s, svc)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	ctx := context.Background()
	c, err := NewH2RLSClient(ctx, "http://"+l.Addr().String(), 2)
	if err != nil {
		t.Fatalf("NewH2RLSClient() error = %v", err)
	}
	t.Cleanup(c.Close)

	one := func(value string) *Workload {
		return &Workload{Name: value, PerCall: 1, envoy: []*rlsv3.RateLimitRequest{envoyRequest("user", value)}}
	}
	var buf bytes.Buffer
	if a, d, err := c.Do(ctx, one("ok"), 0, &buf); err != nil || a != 1 || d != 0 {
		t.Errorf("Do(ok) = %d, %d, %v, want allowed", a, d, err)
	}
	if a, d, err := c.Do(ctx, one("over"), 0, &buf); err != nil || a != 0 || d != 1 {
		t.Errorf("Do(over) = %d, %d, %v, want denied", a, d, err)
	}
	if _, _, err := c.Do(ctx, one("fail"), 0, &buf); err == nil || !strings.Contains(err.Error(), `grpc-status "14"`) {
		t.Errorf("Do(fail) error = %v, want grpc-status 14", err)
	}
	if _, _, err := c.Do(ctx, testUniform(), 0, &buf); err != errNotEnvoy {
		t.Errorf("Do(Connect workload) error = %v, want %v", err, errNotEnvoy)
	}

	// 32 workers on 2 connections of 4 streams each, with requests large
	// enough (about 4 KB) to spend the server's 64 KB windows many times.
	big := &Workload{Name: "big", PerCall: 1}
	for i := range 100 {
		big.envoy = append(big.envoy, envoyRequest("user", fmt.Sprintf("%s-%d", strings.Repeat("k", 4000), i)))
	}
	// Bounded by count: the time bound only stops a run that hangs.
	o := Run(ctx, c, big, Load{Conns: 32, Duration: time.Minute, MaxRequests: 3000})
	if o.Errors != 0 || o.Requests != 3000 || o.Allowed != 3000 {
		t.Errorf("Run() = %+v (first error %v), want 3000 requests allowed, no errors", o, o.FirstErr)
	}
	if got := svc.calls.Load(); got != 3000+3 {
		t.Errorf("server saw %d calls, want %d", got, 3000+3)
	}
}
