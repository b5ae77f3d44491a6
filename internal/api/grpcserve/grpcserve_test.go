package grpcserve_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/grpcserve"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/tlstest"
)

const envoyRules = `domain: edge
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
`

// serve starts a grpcserve.Server over an API on the in-memory store and
// returns its address and the server.
func serve(t *testing.T, cfg grpcserve.Config) (string, *grpcserve.Server) {
	t.Helper()
	rs, err := rules.Parse([]byte(envoyRules))
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Store: region.NewMemory(region.MemoryConfig{}), Rules: rs})
	if err != nil {
		t.Fatal(err)
	}
	cfg.API = h
	s, err := grpcserve.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if !s.Stop(ctx) {
			t.Error("Stop: calls still running at the deadline")
		}
		if err := <-done; err != nil {
			t.Errorf("Serve = %v, want nil after Stop", err)
		}
	})
	return ln.Addr().String(), s
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func rlsReq(value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: value}},
	}}}
}

func inlineCheck(key string) *ratelimitv1.CheckRequest {
	return &ratelimitv1.CheckRequest{Key: key, Limit: &ratelimitv1.Limit{Limit: 1, Window: durationpb.New(time.Minute)}}
}

// TestServe calls every service with grpc-go's clients: Envoy's RLS (the
// third call over a limit of 2 is OVER_LIMIT), ratelimit.v1's three
// methods, an invalid request's code and message, health checking (and
// NotServing after SetServing(false)) and reflection.
func TestServe(t *testing.T) {
	addr, s := serve(t, grpcserve.Config{})
	cc := dial(t, addr)
	ctx := context.Background()

	rls := rlsv3.NewRateLimitServiceClient(cc)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := rls.ShouldRateLimit(ctx, rlsReq("alice"))
		if err != nil {
			t.Fatalf("ShouldRateLimit #%d: %v", i, err)
		}
		if got := resp.GetOverallCode(); got != want {
			t.Errorf("ShouldRateLimit #%d = %v, want %v", i, got, want)
		}
	}
	_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge"})
	if got, want := status.Code(err), codes.InvalidArgument; got != want {
		t.Errorf("ShouldRateLimit without descriptors: code %v, want %v (%v)", got, want, err)
	}
	if got, want := status.Convert(err).Message(), "descriptors: at least one is required"; got != want {
		t.Errorf("ShouldRateLimit without descriptors: message %q, want %q", got, want)
	}

	var check ratelimitv1.CheckResponse
	for i, want := range []bool{true, false} {
		if err := cc.Invoke(ctx, "/ratelimit.v1.RateLimitService/Check", inlineCheck("k"), &check); err != nil {
			t.Fatalf("Check #%d: %v", i, err)
		}
		if check.GetAllowed() != want {
			t.Errorf("Check #%d: allowed %v, want %v", i, check.GetAllowed(), want)
		}
	}
	var peek ratelimitv1.PeekResponse
	if err := cc.Invoke(ctx, "/ratelimit.v1.RateLimitService/Peek", &ratelimitv1.PeekRequest{Key: "k2", Limit: inlineCheck("").Limit}, &peek); err != nil || !peek.GetResponse().GetAllowed() {
		t.Errorf("Peek: %v, %v; want allowed", peek.GetResponse(), err)
	}
	// Reset clears k's count: the check denied above is allowed again.
	var reset ratelimitv1.ResetResponse
	if err := cc.Invoke(ctx, "/ratelimit.v1.RateLimitService/Reset", &ratelimitv1.ResetRequest{Key: "k", Limit: inlineCheck("").Limit}, &reset); err != nil || reset.GetResetAt() == nil {
		t.Fatalf("Reset: %v, %v", reset.GetResetAt(), err)
	}
	if err := cc.Invoke(ctx, "/ratelimit.v1.RateLimitService/Check", inlineCheck("k"), &check); err != nil || !check.GetAllowed() {
		t.Errorf("Check after Reset: allowed %v, %v; want allowed", check.GetAllowed(), err)
	}
	var batch ratelimitv1.CheckBatchResponse
	err = cc.Invoke(ctx, "/ratelimit.v1.RateLimitService/CheckBatch", &ratelimitv1.CheckBatchRequest{Checks: []*ratelimitv1.CheckRequest{inlineCheck("b"), {Key: "b"}}}, &batch)
	if err != nil || len(batch.GetResults()) != 2 {
		t.Fatalf("CheckBatch: %v, %v", batch.GetResults(), err)
	}
	if !batch.GetResults()[0].GetResponse().GetAllowed() || batch.GetResults()[1].GetError().GetCode() != "invalid_argument" {
		t.Errorf("CheckBatch results = %v, want allowed and an invalid_argument error", batch.GetResults())
	}
	err = cc.Invoke(ctx, "/ratelimit.v1.RateLimitService/Check", &ratelimitv1.CheckRequest{Key: "k"}, &check)
	if got, want := status.Code(err), codes.InvalidArgument; got != want {
		t.Errorf("Check without a limit: code %v, want %v (%v)", got, want, err)
	}

	hc := healthpb.NewHealthClient(cc)
	for _, svc := range []string{"", "ratelimit.v1.RateLimitService", "envoy.service.ratelimit.v3.RateLimitService"} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, r.GetStatus(), err)
		}
	}
	s.SetServing(false)
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health after SetServing(false) = %v, %v; want NOT_SERVING", r.GetStatus(), err)
	}

	got := listServices(t, ctx, cc)
	for _, want := range []string{"ratelimit.v1.RateLimitService", "envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"} {
		if !got[want] {
			t.Errorf("reflection lists %v, want %s among them", got, want)
		}
	}
}

// listServices asks server reflection for the services.
func listServices(t *testing.T, ctx context.Context, cc *grpc.ClientConn) map[string]bool {
	t.Helper()
	st, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	_ = st.CloseSend()
	got := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		got[s.GetName()] = true
	}
	return got
}

// TestBearer requires tokens: a call without one or with a wrong one is
// unauthenticated (and counted), health stays open, a good token is
// served, and a token bound to a domain may not use another.
func TestBearer(t *testing.T) {
	const tok, scoped = "caller-token-0123456789", "scoped-token-0123456789"
	tokens, err := auth.NewTokens([]string{tok, scoped + " domains=other"})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, grpcserve.Config{Tokens: tokens, OpenPaths: auth.DefaultOpenPaths})
	cc := dial(t, addr)
	rls := rlsv3.NewRateLimitServiceClient(cc)
	with := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	}

	var hdr metadata.MD
	_, err = rls.ShouldRateLimit(context.Background(), rlsReq("a"), grpc.Header(&hdr))
	if got, want := status.Code(err), codes.Unauthenticated; got != want {
		t.Errorf("ShouldRateLimit without a token: code %v, want %v", got, want)
	}
	if got := hdr.Get("www-authenticate"); len(got) != 1 || got[0] != `Bearer realm="rlcluster"` {
		t.Errorf("www-authenticate = %q, want Bearer realm", got)
	}
	if _, err := rls.ShouldRateLimit(with("wrong-token-0123456789"), rlsReq("a")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ShouldRateLimit with a wrong token: %v, want unauthenticated", err)
	}
	if got, want := tokens.Rejected(), uint64(2); got != want {
		t.Errorf("Rejected() = %d, want %d", got, want)
	}
	if _, err := rls.ShouldRateLimit(with(tok), rlsReq("a")); err != nil {
		t.Errorf("ShouldRateLimit with a token: %v", err)
	}
	_, err = rls.ShouldRateLimit(with(scoped), rlsReq("a"))
	if got, want := status.Code(err), codes.PermissionDenied; got != want {
		t.Errorf("ShouldRateLimit with a token bound to another domain: code %v, want %v (%v)", got, want, err)
	}
	if r, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a token = %v, %v; want SERVING (open path)", r.GetStatus(), err)
	}
	// Reflection streams are authenticated too.
	st, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(context.Background())
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("reflection without a token: %v, want unauthenticated", err)
	}
	if got := listServices(t, with(tok), cc); !got["grpc.health.v1.Health"] {
		t.Errorf("reflection with a token lists %v", got)
	}
}

// TestTLS serves over TLS and, with client certificates required, mutual
// TLS: a plaintext client and a client without a certificate fail, one
// with the CA's certificate is served.
func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "api")
	srvPair, client := ca.Server(t, "node"), ca.Client(t, "caller")
	ctx := context.Background()

	addr, _ := serve(t, grpcserve.Config{TLS: &tls.Config{Certificates: []tls.Certificate{srvPair.TLS}, MinVersion: tls.VersionTLS12}})
	cc := dial(t, addr, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(ca.Pool(), "")))
	if _, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, rlsReq("a")); err != nil {
		t.Errorf("ShouldRateLimit over TLS: %v", err)
	}
	plain := dial(t, addr)
	if _, err := rlsv3.NewRateLimitServiceClient(plain).ShouldRateLimit(ctx, rlsReq("a")); status.Code(err) != codes.Unavailable {
		t.Errorf("ShouldRateLimit over plaintext to a TLS port: %v, want unavailable", err)
	}

	maddr, _ := serve(t, grpcserve.Config{TLS: &tls.Config{Certificates: []tls.Certificate{srvPair.TLS}, MinVersion: tls.VersionTLS12,
		ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}})
	anon := dial(t, maddr, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(ca.Pool(), "")))
	if _, err := rlsv3.NewRateLimitServiceClient(anon).ShouldRateLimit(ctx, rlsReq("a")); err == nil {
		t.Error("ShouldRateLimit without a client certificate succeeded, want refused")
	}
	mc := dial(t, maddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS}})))
	if _, err := rlsv3.NewRateLimitServiceClient(mc).ShouldRateLimit(ctx, rlsReq("a")); err != nil {
		t.Errorf("ShouldRateLimit with a client certificate: %v", err)
	}
}
