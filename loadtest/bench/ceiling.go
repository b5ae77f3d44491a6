package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
)

// ceilingBody is the ceiling's fixed answer, about the size of a node's.
var ceilingBody = []byte(`{"allowed":true,"limit":"1000000000","remaining":"999999999","resetAfter":"60s"}`)

// ceilingBatchBody answers CheckBatch: ten allowed results.
var ceilingBatchBody = []byte(`{"results":[` + strings.Repeat(`{"response":`+string(ceilingBody)+`},`, batchSize-1) +
	`{"response":` + string(ceilingBody) + `}]}`)

// CeilingHandler is the ceiling: a trivial net/http handler that reads the
// request and answers a small fixed JSON body (ten of them in a batch for
// CheckBatch), or its protobuf for a request in protobuf. gRPC requests (content type
// application/grpc) go to a generated Connect handler that answers a fixed
// CheckResponse (or one per check for CheckBatch), the least a gRPC server
// can do.
func CeilingHandler() http.Handler {
	_, grpcH := ratelimitv1connect.NewRateLimitServiceHandler(ceilingService{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			grpcH.ServeHTTP(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("Content-Type") == "application/proto" {
			w.Header().Set("Content-Type", "application/proto")
			if r.URL.Path == batchPath {
				_, _ = w.Write(ceilingBatchProto)
				return
			}
			_, _ = w.Write(ceilingProto)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == batchPath {
			_, _ = w.Write(ceilingBatchBody)
			return
		}
		_, _ = w.Write(ceilingBody)
	})
}

type ceilingService struct {
	ratelimitv1connect.UnimplementedRateLimitServiceHandler
}

var ceilingResp = &ratelimitv1.CheckResponse{Allowed: true, Limit: 1_000_000_000, Remaining: 999_999_999}

// ceilingProto and ceilingBatchProto are ceilingBody and ceilingBatchBody
// in protobuf (without the reset duration, which the bench does not read).
var ceilingProto, ceilingBatchProto = func() ([]byte, []byte) {
	one, _ := proto.Marshal(ceilingResp)
	batch := &ratelimitv1.CheckBatchResponse{}
	for range batchSize {
		batch.Results = append(batch.Results, &ratelimitv1.CheckResult{Result: &ratelimitv1.CheckResult_Response{Response: ceilingResp}})
	}
	all, _ := proto.Marshal(batch)
	return one, all
}()

func (ceilingService) Check(context.Context, *connect.Request[ratelimitv1.CheckRequest]) (*connect.Response[ratelimitv1.CheckResponse], error) {
	return connect.NewResponse(ceilingResp), nil
}

func (ceilingService) CheckBatch(_ context.Context, req *connect.Request[ratelimitv1.CheckBatchRequest]) (*connect.Response[ratelimitv1.CheckBatchResponse], error) {
	res := make([]*ratelimitv1.CheckResult, len(req.Msg.GetChecks()))
	for i := range res {
		res[i] = &ratelimitv1.CheckResult{Result: &ratelimitv1.CheckResult_Response{Response: ceilingResp}}
	}
	return connect.NewResponse(&ratelimitv1.CheckBatchResponse{Results: res}), nil
}

// runCeiling is the `ceiling` subcommand: serve CeilingHandler on -listen
// and, with -grpc-listen, the grpc-go Envoy ceiling (NewCeilingGRPC) there,
// until ctx is done.
func runCeiling(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ceiling", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on (loopback)")
	grpcListen := fs.String("grpc-listen", "", "address to serve the grpc-go Envoy RLS ceiling on (loopback); empty: none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("ceiling listen: %w", err)
	}
	if *grpcListen != "" {
		gl, err := net.Listen("tcp", *grpcListen)
		if err != nil {
			l.Close()
			return fmt.Errorf("ceiling grpc listen: %w", err)
		}
		gs := NewCeilingGRPC()
		go func() { _ = gs.Serve(gl) }()
		defer gs.Stop()
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: CeilingHandler(), Protocols: &p}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("ceiling serve: %w", err)
	}
	return nil
}
