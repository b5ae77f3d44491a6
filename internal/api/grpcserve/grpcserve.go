// Package grpcserve serves the API's gRPC services with grpc-go's own
// HTTP/2 transport on a listener of their own: Envoy's rate-limit service
// (RLS v3 ShouldRateLimit), its rate limit quota service (RLQS
// StreamRateLimitQuotas), ratelimit.v1 RateLimitService (Check,
// CheckBatch, Peek, Reset, Lease), gRPC health checking and server
// reflection.
//
// Every call goes through the same methods as the Connect handler on the
// main port ([api.Server] and [envoyrls.Service]), hence the one decision
// path; only the transport differs. grpc-go's transport is the reason for
// the separate listener: net/http's HTTP/2 server, which Connect (and
// grpc.Server.ServeHTTP) ride on, costs more per call than the decision
// itself (see docs/performance.md).
//
// Bearer tokens, TLS and mutual TLS work as on the main port: the same
// tokens and open paths (a method's full name is its path, so
// /grpc.health.v1.Health/Check is open by default) and the same
// certificates, reloaded with them.
package grpcserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"

	"connectrpc.com/connect"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/envoyrls"
	"github.com/rlcluster/rlcluster/internal/api/rlqs"
)

// Config configures a [Server]. API is required; other zero fields mean
// their documented default.
type Config struct {
	// API serves the calls: its ratelimit.v1 methods and its Envoy
	// service ([api.Server.Envoy]).
	API *api.Server
	// Tokens, when set, requires "authorization: Bearer <token>" metadata
	// on every call except the methods in OpenPaths, as
	// [auth.RequireBearer] does on the main port; a token's scope binds
	// the call the same way.
	Tokens *auth.Tokens
	// OpenPaths are served without a token (see [auth.OpenPaths]).
	OpenPaths []string
	// TLS, when set, serves gRPC over TLS with it (mutual TLS when it
	// requires client certificates); nil serves plaintext HTTP/2.
	TLS *tls.Config
	// MaxRequestBytes bounds a request message; default
	// [api.DefaultMaxRequestBytes].
	MaxRequestBytes int
	// IdleTimeout closes connections idle this long; default 2m.
	IdleTimeout time.Duration
	// MaxStreams bounds the calls in flight on one connection (HTTP/2's
	// SETTINGS_MAX_CONCURRENT_STREAMS); default [DefaultMaxStreams].
	MaxStreams uint32
	// StreamTimeout bounds a streaming call (server reflection, health
	// Watch) from its start; it then ends with DeadlineExceeded. Default
	// [api.DefaultStreamTimeout].
	StreamTimeout time.Duration
	// Conns, when set, is told when calls start and end on each
	// connection (by its remote address) and when one carried a valid
	// token, as a [connlimit.Listener] that Serve is given needs to be.
	Conns ConnEvents
}

// ConnEvents receives the calls' events by connection; [connlimit.Listener]
// implements it. Its methods must not block.
type ConnEvents interface {
	Begin(remoteAddr string)
	End(remoteAddr string)
	Authenticated(remoteAddr string)
}

// DefaultMaxStreams is Config.MaxStreams's default.
const DefaultMaxStreams = 100

// streamWorkers is how many goroutines serve calls, reused from call to
// call (grpc-go starts a new goroutine for a call when they are all busy).
// A new goroutine per call would grow its stack through the decision path
// on every call (docs/performance.md has what that copying cost).
func streamWorkers() uint32 {
	return uint32(max(64, 16*runtime.GOMAXPROCS(0)))
}

// Server is the grpc-go server. It is safe for concurrent use.
type Server struct {
	grpc   *grpc.Server
	health *health.Server
}

// New checks cfg and returns the server, not yet serving.
func New(cfg Config) (*Server, error) {
	if cfg.API == nil {
		return nil, errors.New("grpcserve: Config.API is required")
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = api.DefaultMaxRequestBytes
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.StreamTimeout <= 0 {
		cfg.StreamTimeout = api.DefaultStreamTimeout
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxRequestBytes),
		grpc.MaxConcurrentStreams(cfg.MaxStreams),
		grpc.ForceServerCodecV2(boundedCodec{api: cfg.API, proto: encoding.GetCodecV2(protoenc.Name)}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.IdleTimeout}),
	}
	budget := budgeted{api: cfg.API}
	timeout := streamTimeout(cfg.StreamTimeout)
	if cfg.Tokens != nil {
		a := authenticator{tokens: cfg.Tokens, open: auth.OpenPaths(cfg.OpenPaths), conns: cfg.Conns}
		opts = append(opts, grpc.ChainUnaryInterceptor(a.unary, unaryErrors, budget.unary), grpc.ChainStreamInterceptor(a.stream, timeout.stream))
	} else {
		opts = append(opts, grpc.ChainUnaryInterceptor(unaryErrors, budget.unary), grpc.StreamInterceptor(timeout.stream))
	}
	if cfg.Conns != nil {
		opts = append(opts, grpc.StatsHandler(connStats{cfg.Conns}))
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	opts = append(opts, grpc.NumStreamWorkers(streamWorkers()))
	s := &Server{grpc: grpc.NewServer(opts...), health: health.NewServer()}
	rlsv3.RegisterRateLimitServiceServer(s.grpc, envoyServer{svc: cfg.API.Envoy()})
	rlqsv3.RegisterRateLimitQuotaServiceServer(s.grpc, rlqsServer{svc: cfg.API.RLQS()})
	s.grpc.RegisterService(&rateLimitServiceDesc, cfg.API)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.SetServing(true)
	return s, nil
}

// Serve accepts connections on ln until [Server.Stop]; it returns nil
// after a stop.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("grpc serve: %w", err)
	}
	return nil
}

// SetServing sets what health checking reports for every service and the
// server as a whole, for example NotServing while shutting down.
func (s *Server) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !serving {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, name := range []string{"", ratelimitv1connect.RateLimitServiceName, envoyrls.ServiceName, rlqs.ServiceName} {
		s.health.SetServingStatus(name, st)
	}
}

// Stop stops accepting connections and waits for the calls in flight to
// finish until ctx is done, then closes every connection. It reports
// whether every call finished.
func (s *Server) Stop(ctx context.Context) bool {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		return false
	}
}

// boundedCodec is grpc-go's protobuf codec, except that requests decode
// as the API's own codecs decode them ([api.Server.UnmarshalRequest]): at
// most one more check, descriptor or entry than a request may carry.
type boundedCodec struct {
	api   *api.Server
	proto encoding.CodecV2
}

func (c boundedCodec) Name() string { return c.proto.Name() }

func (c boundedCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c boundedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return c.api.UnmarshalRequest(buf.ReadOnlyData(), m)
}

// budgeted makes large requests take their size from the API's request
// memory budget ([api.Server.AcquireRequest]) while they are decided.
type budgeted struct{ api *api.Server }

func (b budgeted) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	size := 0
	switch m := req.(type) {
	case *ratelimitv1.CheckBatchRequest:
		size = proto.Size(m)
	case *rlsv3.RateLimitRequest:
		if len(m.GetDescriptors()) > 4 { // Envoy's usual calls are not measured
			size = proto.Size(m)
		}
	}
	release, err := b.api.AcquireRequest(ctx, size)
	if err != nil {
		return nil, err
	}
	defer release()
	return h(ctx, req)
}

// unaryErrors turns the API's Connect errors into gRPC statuses with the
// same code and message.
func unaryErrors(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

func grpcError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	// Connect's codes are gRPC's, number for number.
	return status.Error(codes.Code(connect.CodeOf(err)), decision.Message(err))
}

// authenticator requires a bearer token on every method outside open.
type authenticator struct {
	tokens *auth.Tokens
	open   func(string) bool
	conns  ConnEvents // nil: not told
}

var errUnauthenticated = status.Error(codes.Unauthenticated, "missing or invalid bearer token")

// check returns ctx with the token's scope, or the refusal.
func (a authenticator) check(ctx context.Context, method string) (context.Context, error) {
	if a.open(method) {
		return ctx, nil
	}
	var hdr string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) == 1 {
			hdr = v[0]
		}
	}
	sc, ok := a.tokens.Authorize(hdr)
	if !ok {
		_ = grpc.SetHeader(ctx, metadata.Pairs("www-authenticate", `Bearer realm="rlcluster"`))
		return nil, errUnauthenticated
	}
	if p, ok := peer.FromContext(ctx); ok && a.conns != nil {
		a.conns.Authenticated(p.Addr.String())
	}
	if sc != nil {
		ctx = auth.NewContext(ctx, sc)
	}
	return ctx, nil
}

func (a authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := a.check(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (a authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := a.check(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return h(srv, ctxStream{ServerStream: ss, ctx: ctx})
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

// streamTimeout ends a streaming call that has run this long.
type streamTimeout time.Duration

// stream runs the handler until it returns or the timeout passes; then
// the call ends with DeadlineExceeded, which closes the stream, and the
// handler, blocked on the closed stream, returns in its own time. The
// rate limit quota service's streams (and Lease's) live longer and bound
// themselves ([rlqs.Config.Lifetime]).
func (d streamTimeout) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod == rlqs.Procedure || info.FullMethod == ratelimitv1connect.RateLimitServiceLeaseProcedure {
		return h(srv, ss)
	}
	ctx, cancel := context.WithTimeout(ss.Context(), time.Duration(d))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h(srv, ctxStream{ServerStream: ss, ctx: ctx}) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return status.Error(codes.DeadlineExceeded, "stream timeout: the call ran longer than this node allows a stream")
	}
}

// connStats tells ConnEvents when calls start and end on each connection.
type connStats struct{ conns ConnEvents }

func (c connStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c connStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c connStats) HandleConn(context.Context, stats.ConnStats)                       {}

func (c connStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return
	}
	switch s.(type) {
	case *stats.Begin:
		c.conns.Begin(p.Addr.String())
	case *stats.End:
		c.conns.End(p.Addr.String())
	}
}

// rlqsServer adapts [rlqs.Service] to grpc-go's generated server.
type rlqsServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	svc *rlqs.Service
}

func (r rlqsServer) StreamRateLimitQuotas(st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	if err := r.svc.Stream(st.Context(), st.Recv, st.Send); err != nil {
		return grpcError(err)
	}
	return nil
}

// envoyServer adapts [envoyrls.Service] to grpc-go's generated server.
type envoyServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	svc *envoyrls.Service
}

func (e envoyServer) ShouldRateLimit(ctx context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return e.svc.Decide(ctx, r)
}
