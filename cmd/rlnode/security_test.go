package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/tlstest"
)

// httpsClient trusts roots, offers client certificates certs and speaks
// HTTP/2 (ALPN h2) or, with http1, HTTP/1.1 only.
func httpsClient(roots *x509.CertPool, http1 bool, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}
	var p http.Protocols
	if http1 {
		p.SetHTTP1(true)
	} else {
		p.SetHTTP2(true)
	}
	tr.Protocols = &p
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// serialOf opens a new TLS connection to addr and returns the serial of
// the certificate the server shows.
func serialOf(t *testing.T, addr string, roots *x509.CertPool) (*big.Int, error) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func checkMsg() *ratelimitv1.CheckRequest {
	return &ratelimitv1.CheckRequest{Key: "alice", Limit: &ratelimitv1.Limit{Limit: 5, Window: durationpb.New(time.Minute)}}
}

// TestTLS serves HTTPS and checks a Connect client over HTTP/2 and
// HTTP/1.1, grpc-go over TLS, and a certificate swapped in by SIGHUP
// without dropping an open connection; a broken file keeps the old one.
func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "api")
	first, second := ca.Server(t, "node"), ca.Server(t, "node")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	tlstest.Copy(t, first.CertFile, certFile)
	tlstest.Copy(t, first.KeyFile, keyFile)

	ctx := t.Context()
	n := startNode(t, []string{"--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile}, env(nil))
	addr, logs := strings.TrimPrefix(n.base, "http://"), n.logs
	base := "https://" + addr
	if !strings.Contains(logs.String(), "tls=true mtls=false") {
		t.Errorf("logs do not say TLS is on:\n%s", logs)
	}

	// Connect over HTTP/2 and HTTP/1.1.
	h2 := httpsClient(ca.Pool(), false)
	for name, hc := range map[string]*http.Client{"h2": h2, "http/1.1": httpsClient(ca.Pool(), true)} {
		c := ratelimitv1connect.NewRateLimitServiceClient(hc, base)
		resp, err := c.Check(ctx, connect.NewRequest(checkMsg()))
		if err != nil || !resp.Msg.Allowed {
			t.Fatalf("Connect Check over %s: %v", name, err)
		}
	}
	// A plaintext client is refused (the server answers TLS only).
	if resp, err := http.Get(base[:4] + base[5:] + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plaintext GET /healthz = 200, want refused")
		}
	}

	// grpc-go over TLS.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(ca.Pool(), "")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out ratelimitv1.CheckResponse
	if err := conn.Invoke(ctx, "/ratelimit.v1.RateLimitService/Check", checkMsg(), &out); err != nil || !out.Allowed {
		t.Fatalf("grpc-go Check over TLS: allowed %v, err %v", out.Allowed, err)
	}
	if r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc-go health over TLS: %v %v", r, err)
	}

	// Open one HTTP/2 connection that must survive the reload.
	var reused bool
	traced := func() context.Context {
		return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	}
	c2 := ratelimitv1connect.NewRateLimitServiceClient(h2, base)
	if _, err := c2.Check(traced(), connect.NewRequest(checkMsg())); err != nil {
		t.Fatal(err)
	}
	if got, err := serialOf(t, addr, ca.Pool()); err != nil || got.Cmp(first.Serial()) != 0 {
		t.Fatalf("serial before reload = %v (%v), want %v", got, err, first.Serial())
	}

	// SIGHUP with a broken key keeps the old certificate and counts it.
	writeFile(t, keyFile, "not a key")
	hupAndWait(t, `reload failed: keeping the previous tls certificates`, logs)
	if got, err := serialOf(t, addr, ca.Pool()); err != nil || got.Cmp(first.Serial()) != 0 {
		t.Errorf("serial after a failed reload = %v (%v), want the old %v", got, err, first.Serial())
	}
	if body := getBody(t, h2, base+"/metrics"); !strings.Contains(body, `rlcluster_reloads_total{result="error",what="tls certificates"} 1`) {
		t.Errorf("/metrics does not count the failed reload:\n%s", logtest.Lines(body, "reloads"))
	}

	// SIGHUP with good files: new connections see the new certificate.
	tlstest.Copy(t, second.CertFile, certFile)
	tlstest.Copy(t, second.KeyFile, keyFile)
	sighup(t)
	var serial *big.Int
	if _, ok := polltest.Poll(10*time.Second, func() bool {
		serial, err = serialOf(t, addr, ca.Pool())
		return err == nil && serial.Cmp(second.Serial()) == 0
	}); !ok {
		t.Fatalf("serial after reload = %v (%v), want %v; logs:\n%s", serial, err, second.Serial(), logs)
	}
	// The connection opened before the reload still serves.
	if _, err := c2.Check(traced(), connect.NewRequest(checkMsg())); err != nil || !reused {
		t.Errorf("Check on the old connection after reload: err %v, reused %v; want nil, true", err, reused)
	}
	n.stop()
}

// TestMTLS requires client certificates: a client without one, or with one
// from another CA, is refused; one with a certificate from the CA is served.
// A reload of --tls-client-ca to another CA changes who is accepted.
func TestMTLS(t *testing.T) {
	ca, other := tlstest.NewCA(t, "api"), tlstest.NewCA(t, "other")
	srvPair := ca.Server(t, "node")
	client, stranger := ca.Client(t, "caller"), other.Client(t, "stranger")
	clientCA := filepath.Join(t.TempDir(), "clients.pem")
	tlstest.Copy(t, ca.CertFile, clientCA)

	ctx := t.Context()
	n := startNode(t, []string{"--listen", "127.0.0.1:0", "--tls-cert", srvPair.CertFile, "--tls-key", srvPair.KeyFile,
		"--tls-client-ca", clientCA}, env(nil))
	addr := strings.TrimPrefix(n.base, "http://")
	base := "https://" + addr

	call := func(certs ...tls.Certificate) error {
		c := ratelimitv1connect.NewRateLimitServiceClient(httpsClient(ca.Pool(), false, certs...), base)
		_, err := c.Check(ctx, connect.NewRequest(checkMsg()))
		return err
	}
	if err := call(); err == nil {
		t.Error("Check without a client certificate succeeded, want refused")
	}
	if err := call(stranger.TLS); err == nil {
		t.Error("Check with another CA's client certificate succeeded, want refused")
	}
	if err := call(client.TLS); err != nil {
		t.Errorf("Check with a client certificate: %v", err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS}})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out ratelimitv1.CheckResponse
	if err := conn.Invoke(ctx, "/ratelimit.v1.RateLimitService/Check", checkMsg(), &out); err != nil {
		t.Errorf("grpc-go Check with a client certificate: %v", err)
	}

	// Trust the other CA instead.
	tlstest.Copy(t, other.CertFile, clientCA)
	hupAndWait(t, `msg=reloaded what="tls certificates"`, n.logs)
	if err := call(stranger.TLS); err != nil {
		t.Errorf("after reload, Check with the newly trusted CA's certificate: %v", err)
	}
	if err := call(client.TLS); err == nil {
		t.Error("after reload, Check with the no longer trusted CA's certificate succeeded")
	}
	n.stop()
}

// TestAuthToken runs a node with tokens from the environment and a file:
// without a token the API answers 401 unauthenticated, health and metrics
// stay open, and a SIGHUP reloads the file.
func TestAuthToken(t *testing.T) {
	const envTok, fileTok, newTok = "env-token-0123456789", "file-token-0123456789", "new-file-token-0123456789"
	tokFile := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, tokFile, "# callers\n"+fileTok+"\n")
	ctx := t.Context()
	n := startNode(t, []string{"--listen", "127.0.0.1:0", "--auth-token-file", tokFile},
		env(map[string]string{authTokenEnv: envTok}))
	base, logs := n.base, n.logs

	do := func(tok string) (int, string) {
		return postAs(t, base+"/ratelimit.v1.RateLimitService/Check", tok, `{"key":"k","limit":{"limit":9,"window":"60s"}}`)
	}
	for _, tc := range []struct {
		name, tok string
		want      int
	}{
		{"none", "", http.StatusUnauthorized},
		{"wrong", "wrong-token-0123456789", http.StatusUnauthorized},
		{"env", envTok, http.StatusOK},
		{"file", fileTok, http.StatusOK},
	} {
		code, body := do(tc.tok)
		if code != tc.want {
			t.Errorf("%s token: %d %s, want %d", tc.name, code, body, tc.want)
		}
		if code == http.StatusUnauthorized && !strings.Contains(body, `"code":"unauthenticated"`) {
			t.Errorf("%s token: body %s, want code unauthenticated", tc.name, body)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if resp, err := http.Get(base + p); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s without a token: %v %v, want 200", p, resp, err)
		} else {
			resp.Body.Close()
		}
	}
	// grpc-go with the token in metadata (plaintext h2c here).
	conn, err := grpc.NewClient(strings.TrimPrefix(base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out ratelimitv1.CheckResponse
	if err := conn.Invoke(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+fileTok),
		"/ratelimit.v1.RateLimitService/Check", checkMsg(), &out); err != nil {
		t.Errorf("grpc-go Check with a token: %v", err)
	}

	if body := getBody(t, http.DefaultClient, base+"/metrics"); !strings.Contains(body, "rlcluster_auth_rejected_total 2") {
		t.Errorf("/metrics does not count the 2 refused requests:\n%s", logtest.Lines(body, "auth"))
	}

	// Rotate the file: the new token works, the old one no longer.
	writeFile(t, tokFile, newTok+"\n")
	hupAndWait(t, `msg=reloaded what="auth tokens"`, logs)
	if code, _ := do(newTok); code != http.StatusOK {
		t.Errorf("new token after reload: %d, want 200", code)
	}
	if code, _ := do(fileTok); code != http.StatusUnauthorized {
		t.Errorf("removed token after reload: %d, want 401", code)
	}
	if code, _ := do(envTok); code != http.StatusOK {
		t.Errorf("env token after reload: %d, want 200", code)
	}
	// An empty file is refused; the tokens stay.
	writeFile(t, tokFile, "# nobody\n")
	hupAndWait(t, `reload failed: keeping the previous auth tokens`, logs)
	if code, _ := do(newTok); code != http.StatusOK {
		t.Errorf("token after a failed reload: %d, want 200", code)
	}
	n.stop()
}

// TestAuthOpenPaths: the forward-auth check endpoint is behind the token
// like the rest; --auth-open-paths can protect /metrics and open /check.
func TestAuthOpenPaths(t *testing.T) {
	for _, tc := range []struct {
		name, open string
		want       map[string]int
	}{
		{"default", "", map[string]int{"/metrics": http.StatusOK, "/healthz": http.StatusOK, "/check/none": http.StatusUnauthorized}},
		{"protect metrics", "/healthz,/readyz", map[string]int{"/metrics": http.StatusUnauthorized, "/healthz": http.StatusOK}},
		// Open, /check answers for itself: 400, no such rule.
		{"open check", "/healthz,/check/", map[string]int{"/check/none": http.StatusBadRequest, "/metrics": http.StatusUnauthorized}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--listen", "127.0.0.1:0"}
			if tc.open != "" {
				args = append(args, "--auth-open-paths", tc.open)
			}
			n := startNode(t, args, env(map[string]string{authTokenEnv: "env-token-0123456789"}))
			for p, want := range tc.want {
				resp, err := http.Get(n.base + p)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("GET %s = %d, want %d", p, resp.StatusCode, want)
				}
			}
			n.stop()
		})
	}
}

func TestSecurityFlags(t *testing.T) {
	checkRefused(t, []refusal{
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key: give both or neither"},
		{[]string{"--tls-client-ca", "ca.pem"}, "--tls-client-ca: needs --tls-cert and --tls-key"},
		{[]string{"--redis-ca", "ca.pem", "--redis-url", "redis://h:1"}, "need a rediss://"},
		{[]string{"--redis-cert", "c.pem", "--redis-url", "rediss://h:1"}, "--redis-cert and --redis-key: give both or neither"},
	})
	// Files that do not load stop the node before it listens.
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	writeFile(t, bad, "junk")
	ca := tlstest.NewCA(t, "x")
	pair := ca.Server(t, "n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", bad, "--tls-key", bad}, "load --tls-cert/--tls-key"},
		{[]string{"--tls-cert", pair.CertFile, "--tls-key", pair.KeyFile, "--tls-client-ca", bad}, "--tls-client-ca: " + bad + " holds no PEM certificate"},
		{[]string{"--auth-token-file", filepath.Join(dir, "missing")}, "read --auth-token-file"},
	} {
		err := run(context.Background(), append([]string{"--listen", "127.0.0.1:0"}, tc.args...), env(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func sighup(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// hupAndWait sends SIGHUP and waits until each node's logs contain want
// once more than before.
func hupAndWait(t *testing.T, want string, logs ...*logtest.Buffer) {
	t.Helper()
	before := make([]int, len(logs))
	for i, l := range logs {
		before[i] = strings.Count(l.String(), want)
	}
	sighup(t)
	lacking, got := 0, 0
	if _, ok := polltest.Poll(10*time.Second, func() bool {
		for i, l := range logs {
			if got = strings.Count(l.String(), want); got <= before[i] {
				lacking = i
				return false
			}
		}
		return true
	}); !ok {
		t.Fatalf("logs hold %q %d times 10s after SIGHUP, want at least %d:\n%s", want, got, before[lacking]+1, logs[lacking])
	}
}

func getBody(t *testing.T, hc *http.Client, u string) string {
	t.Helper()
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestAuthTokenProblemsNamed: a token that will not do is told by where
// it came from, the environment variable or the file's line, never by its
// value.
func TestAuthTokenProblemsNamed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	writeFile(t, file, "# callers\n\nfile-token-0123456789\nsecret-but-short\tx\nabc\n")
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{authTokenEnv: "abc"}, "RLNODE_AUTH_TOKEN: 3 bytes, want at least 16"},
		{nil, map[string]string{authTokenEnv: "env-token-0123456789 rules="}, "RLNODE_AUTH_TOKEN: rules=: an empty entry"},
		{[]string{"--auth-token-file", file}, nil, "--auth-token-file " + file + ":4: word 2 is not admin, or rules=, inline=, domains= or prefixes= followed by a comma-separated list (tokens hold no spaces)"},
	} {
		err := run(context.Background(), append([]string{"--listen", "127.0.0.1:0"}, tc.args...), env(tc.env), io.Discard, io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("run(%q, %v) = %v, want %q", tc.args, tc.env, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "abc") {
			t.Errorf("the error repeats the token: %v", err)
		}
	}
	writeFile(t, file, "file-token-0123456789\n# short:\nabc\n")
	err := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--auth-token-file", file}, env(nil), io.Discard, io.Discard)
	if want := "--auth-token-file " + file + ":3: 3 bytes, want at least 16"; err == nil || err.Error() != want {
		t.Errorf("run = %v, want %q", err, want)
	}
}
