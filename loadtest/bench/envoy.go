package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Envoy's rate-limit service (RLS v3) as the bench drives it: one domain
// whose "user" descriptor counts each value apart under a limit nothing
// reaches, and whose "hot" descriptor allows 100 hits a minute.
const (
	envoyDomain = "bench"
	// envoyConns is how many HTTP/2 connections the Envoy client spreads
	// its workers over, as an Envoy with 4 worker threads does (each
	// worker keeps its own connection to the rate-limit cluster).
	envoyConns = 4
)

// envoyRules is the rules file the node loads for the Envoy workloads, in
// envoyproxy/ratelimit's format.
var envoyRules = fmt.Sprintf(`domain: %s
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: %d
  - key: hot
    rate_limit:
      unit: minute
      requests_per_unit: %d
`, envoyDomain, highLimit, hotLimit)

func envoyRequest(key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: envoyDomain,
		Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}},
		// HitsAddend 0 means one hit, as Envoy sends it by default.
	}
}

// NewEnvoyUniform makes ShouldRateLimit requests over 10k descriptor
// values of the "user" key, all allowed.
func NewEnvoyUniform(prefix string) *Workload {
	w := &Workload{Name: "uniform10k", PerCall: 1}
	for i := range uniformKeys {
		w.envoy = append(w.envoy, envoyRequest("user", fmt.Sprintf("%s-u%d", prefix, i)))
	}
	return w
}

// NewEnvoyHotKey makes one ShouldRateLimit request for the "hot"
// descriptor, denied after its first 100 hits a minute.
func NewEnvoyHotKey(prefix string) *Workload {
	return &Workload{Name: "hotkey", PerCall: 1, envoy: []*rlsv3.RateLimitRequest{envoyRequest("hot", prefix)}}
}

// EnvoyClient calls ShouldRateLimit the way Envoy does: with
// go-control-plane's generated grpc-go client over plaintext HTTP/2,
// concurrent calls spread round-robin over a few connections.
type EnvoyClient struct {
	conns   []*grpc.ClientConn
	clients []rlsv3.RateLimitServiceClient
	next    atomic.Uint32
}

// NewEnvoyClient returns a client for the server at base (http://host:port)
// over conns HTTP/2 connections. grpc-go keeps one connection per
// ClientConn, so each connection is its own ClientConn.
func NewEnvoyClient(base string, conns int) (*EnvoyClient, error) {
	target := strings.TrimPrefix(base, "http://")
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("envoy client target %q: %w", base, err)
	}
	c := &EnvoyClient{}
	for range max(conns, 1) {
		cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("dial %s: %w", target, err)
		}
		c.conns = append(c.conns, cc)
		c.clients = append(c.clients, rlsv3.NewRateLimitServiceClient(cc))
	}
	return c, nil
}

var errNotEnvoy = errors.New("workload has no Envoy requests")

// Do sends request i of w: OK counts as allowed, OVER_LIMIT as denied.
func (c *EnvoyClient) Do(ctx context.Context, w *Workload, i int, _ *bytes.Buffer) (int, int, error) {
	if w.envoy == nil {
		return 0, 0, errNotEnvoy
	}
	k := int(c.next.Add(1)) % len(c.clients)
	resp, err := c.clients[k].ShouldRateLimit(ctx, w.envoy[i])
	if err != nil {
		return 0, 0, err
	}
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OK:
		return 1, 0, nil
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return 0, 1, nil
	default:
		return 0, 0, fmt.Errorf("overall code %v", resp.GetOverallCode())
	}
}

// Close closes every connection.
func (c *EnvoyClient) Close() {
	for _, cc := range c.conns {
		_ = cc.Close()
	}
}

// ceilingRLS is the Envoy ceiling's service: every ShouldRateLimit is
// answered OK with one preallocated response.
type ceilingRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

var ceilingRLSResp = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}

func (ceilingRLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return ceilingRLSResp, nil
}

// NewCeilingGRPC returns the Envoy ceiling: a grpc-go server with only
// Envoy's RLS v3 registered, the least a gRPC server can do.
func NewCeilingGRPC() *grpc.Server {
	s := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(s, ceilingRLS{})
	return s
}
