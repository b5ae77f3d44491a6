package redistest

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/rlcluster/rlcluster/internal/porttest"
)

// TLSServer is a redis-server that also serves TLS.
type TLSServer struct {
	*Server
	// TLSAddr is the host:port of the TLS listener; Addr stays plaintext
	// (for readiness checks and redis-cli).
	TLSAddr string
}

// TLSURL returns the server's rediss:// URL.
func (s *TLSServer) TLSURL() string { return "rediss://" + s.TLSAddr }

// StartTLS starts a standalone redis-server with a TLS port besides its
// plaintext one, presenting certFile/keyFile. With caFile set, it requires
// client certificates signed by that CA (Redis's tls-auth-clients yes);
// with caFile empty, it requires none. redis-server must be built with
// TLS, as Debian's is.
func StartTLS(t testing.TB, certFile, keyFile, caFile string, extra ...string) *TLSServer {
	t.Helper()
	port := porttest.Steady(t) // as Start's, for Restart
	args := []string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile}
	if caFile != "" {
		args = append(args, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "yes")
	} else {
		args = append(args, "--tls-auth-clients", "no")
	}
	s := Start(t, append(args, extra...)...)
	return &TLSServer{Server: s, TLSAddr: fmt.Sprintf("127.0.0.1:%d", port)}
}
