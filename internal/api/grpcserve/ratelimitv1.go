package grpcserve

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/grpc"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/api"
)

// rateLimitServiceDesc describes ratelimit.v1.RateLimitService to grpc-go
// over the generated messages, in place of protoc-gen-go-grpc's output:
// each method decodes its request and calls the Connect handler's method
// of the same name ([api.Server]), so both transports share it.
var rateLimitServiceDesc = grpc.ServiceDesc{
	ServiceName: ratelimitv1connect.RateLimitServiceName,
	HandlerType: (*ratelimitv1connect.RateLimitServiceHandler)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Check", Handler: unary(ratelimitv1connect.RateLimitServiceCheckProcedure, ratelimitv1connect.RateLimitServiceHandler.Check)},
		{MethodName: "CheckBatch", Handler: unary(ratelimitv1connect.RateLimitServiceCheckBatchProcedure, ratelimitv1connect.RateLimitServiceHandler.CheckBatch)},
		{MethodName: "Peek", Handler: unary(ratelimitv1connect.RateLimitServicePeekProcedure, ratelimitv1connect.RateLimitServiceHandler.Peek)},
		{MethodName: "Reset", Handler: unary(ratelimitv1connect.RateLimitServiceResetProcedure, ratelimitv1connect.RateLimitServiceHandler.Reset)},
	},
	Streams: []grpc.StreamDesc{{
		StreamName: "Lease", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			err := srv.(*api.Server).LeaseStream(ss.Context(), func() (*ratelimitv1.LeaseRequest, error) {
				m := new(ratelimitv1.LeaseRequest)
				if err := ss.RecvMsg(m); err != nil {
					return nil, err
				}
				return m, nil
			}, func(m *ratelimitv1.LeaseResponse) error { return ss.SendMsg(m) })
			if err != nil {
				return grpcError(err)
			}
			return nil
		},
	}},
	Metadata: "ratelimit/v1/ratelimit.proto",
}

// unary returns the grpc-go method handler of procedure, which calls
// method of the registered RateLimitServiceHandler.
func unary[Req, Resp any](procedure string, method func(ratelimitv1connect.RateLimitServiceHandler, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, err
		}
		call := func(ctx context.Context, req any) (any, error) {
			resp, err := method(srv.(ratelimitv1connect.RateLimitServiceHandler), ctx, connect.NewRequest(req.(*Req)))
			if err != nil {
				return nil, err
			}
			return resp.Msg, nil
		}
		if icpt == nil {
			return call(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: procedure}, call)
	}
}
