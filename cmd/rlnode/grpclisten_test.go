package main

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/tlstest"
)

var grpcListenRE = regexp.MustCompile(`msg="rlnode listening" .*grpc=(\S+)`)

// TestGRPCListen runs a node with --grpc-listen, mutual TLS and a token:
// grpc-go's client with the CA's client certificate and the token is
// served there, without the token it is unauthenticated, health checking
// is open, a client without a certificate is refused; the node stops
// cleanly with both ports serving.
func TestGRPCListen(t *testing.T) {
	const tok = "grpc-token-0123456789"
	ca := tlstest.NewCA(t, "api")
	srvPair, client := ca.Server(t, "node"), ca.Client(t, "caller")
	clientCA := filepath.Join(t.TempDir(), "clients.pem")
	tlstest.Copy(t, ca.CertFile, clientCA)
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	n := startNode(t, []string{"--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
		"--tls-cert", srvPair.CertFile, "--tls-key", srvPair.KeyFile, "--tls-client-ca", clientCA,
		"--auth-token-file", tokFile}, env(nil))
	m := grpcListenRE.FindStringSubmatch(n.logs.String())
	if m == nil {
		t.Fatalf("logs do not give the gRPC address:\n%s", n.logs)
	}
	addr := m[1]

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS}})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()
	var out ratelimitv1.CheckResponse
	err = conn.Invoke(ctx, "/ratelimit.v1.RateLimitService/Check", checkMsg(), &out)
	if got, want := status.Code(err), codes.Unauthenticated; got != want {
		t.Errorf("Check without a token: code %v, want %v", got, want)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	if err := conn.Invoke(authed, "/ratelimit.v1.RateLimitService/Check", checkMsg(), &out); err != nil || !out.Allowed {
		t.Errorf("Check with a token: allowed %v, err %v", out.Allowed, err)
	}
	if r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a token = %v, %v; want SERVING", r.GetStatus(), err)
	}

	// Without a client certificate: refused.
	anon, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(ca.Pool(), "")))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if err := anon.Invoke(authed, "/ratelimit.v1.RateLimitService/Check", checkMsg(), &out); err == nil {
		t.Error("Check without a client certificate succeeded, want refused")
	}
	n.stop()
}
