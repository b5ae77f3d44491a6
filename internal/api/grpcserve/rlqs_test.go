package grpcserve_test

import (
	"context"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/grpcserve"
	"github.com/rlcluster/rlcluster/internal/api/rlqs/rlqsfilter"
)

// bearer adds a token to every call of a grpc-go client, as Envoy's
// grpc_service initial_metadata does.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// TestRLQS: Envoy's rate limit quota service on grpc-go's listener, with
// tokens required: the test client of Envoy's filter gets a token bucket
// for a known bucket (and enforces the limit of 2 a minute with it) over
// a stream that outlives the stream timeout; without a token, or with one
// bound to another domain, the stream is refused.
func TestRLQS(t *testing.T) {
	const tok, scoped = "caller-token-0123456789", "scoped-token-0123456789"
	tokens, err := auth.NewTokens([]string{tok, scoped + " domains=other"})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, grpcserve.Config{Tokens: tokens, OpenPaths: auth.DefaultOpenPaths, StreamTimeout: time.Second})

	f, err := rlqsfilter.New(rlqsfilter.Config{Domain: "edge", ReportingInterval: 200 * time.Millisecond, NoAssignment: rlqsfilter.DenyAll()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- f.Run(ctx, rlqsv3.NewRateLimitQuotaServiceClient(dial(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer(tok)))))
	}()
	id := map[string]string{"user": "alice"}
	f.Allow(id) // subscribes; denied until the first assignment
	for {
		st, _ := f.State(id)
		if st.Phase == rlqsfilter.PhaseActive {
			if st.Strategy.Kind != rlqsfilter.KindTokenBucket {
				t.Fatalf("assignment %v, want a token bucket", st.Strategy)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no assignment within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	allowed := 0
	for range 10 {
		if f.Allow(id) {
			allowed++
		}
	}
	if allowed < 1 || allowed > 2 {
		t.Errorf("the filter allowed %d of 10 under a limit of 2 a minute", allowed)
	}
	// Past the stream timeout of 1 s, the stream is still the first one.
	time.Sleep(1500 * time.Millisecond)
	if got := f.Stats().Streams; got != 1 {
		t.Errorf("%d streams opened, want 1 (the stream timeout does not end RLQS streams)", got)
	}
	cancel()
	<-done

	cc := dial(t, addr)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		code codes.Code
	}{
		{"no token", context.Background(), codes.Unauthenticated},
		{"another domain's token", metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+scoped), codes.PermissionDenied},
	} {
		st, err := rlqsv3.NewRateLimitQuotaServiceClient(cc).StreamRateLimitQuotas(tc.ctx)
		if err == nil {
			err = st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: &rlqsv3.BucketId{Bucket: id}}}})
		}
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
}
