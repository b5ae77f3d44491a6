// Package tlstest makes throwaway certificate authorities and certificates
// for tests: a CA, server certificates for 127.0.0.1 and localhost, and
// client certificates, as PEM files in a test's temporary directory.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// serials makes every certificate's serial number unique in a test binary,
// so a test can tell which certificate a connection saw.
var serials atomic.Int64

func init() { serials.Store(time.Now().UnixNano()) }

// CA is a certificate authority that signs server and client certificates.
type CA struct {
	Cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	CertPEM []byte
	// CertFile is CertPEM written to a file in the test's temp directory.
	CertFile string
	dir      string
}

// Pair is a signed certificate with its private key.
type Pair struct {
	Cert     *x509.Certificate
	CertFile string // PEM certificate
	KeyFile  string // PEM PKCS#8 private key
	TLS      tls.Certificate
}

// Serial returns the certificate's serial number.
func (p Pair) Serial() *big.Int { return p.Cert.SerialNumber }

// NewCA returns a new self-signed CA named cn, valid for a day.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key, cert, der := sign(t, cn, &x509.Certificate{
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	ca := &CA{Cert: cert, key: key, dir: t.TempDir()}
	ca.CertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	ca.CertFile = write(t, ca.dir, cn+"-ca.pem", ca.CertPEM)
	return ca
}

// Pool returns a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server returns a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB, cn string) Pair {
	t.Helper()
	return ca.issue(t, cn, x509.ExtKeyUsageServerAuth)
}

// Client returns a client certificate for cn.
func (ca *CA) Client(t testing.TB, cn string) Pair {
	t.Helper()
	return ca.issue(t, cn, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(t testing.TB, cn string, usage x509.ExtKeyUsage) Pair {
	t.Helper()
	tmpl := &x509.Certificate{
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	key, cert, der := sign(t, cn, tmpl, ca.Cert, ca.key)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: marshal key: %v", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("tlstest: key pair %s: %v", cn, err)
	}
	return Pair{
		Cert:     cert,
		CertFile: write(t, ca.dir, cn+"-"+cert.SerialNumber.String()+".pem", certPEM),
		KeyFile:  write(t, ca.dir, cn+"-"+cert.SerialNumber.String()+"-key.pem", keyPEM),
		TLS:      pair,
	}
}

// sign makes a key and a certificate for cn from tmpl, to which it adds a
// unique serial, the subject and a day's validity, signed with parentKey
// as parent, or self-signed when parent is nil.
func sign(t testing.TB, cn string, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = big.NewInt(serials.Add(1))
	tmpl.Subject = pkix.Name{CommonName: cn}
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatalf("tlstest: sign %s: %v", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: parse %s: %v", cn, err)
	}
	return key, cert, der
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: generate key: %v", err)
	}
	return key
}

func write(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatalf("tlstest: write %s: %v", p, err)
	}
	return p
}

// Copy copies the file src to dst (replacing it), for tests that rotate the
// files a server reads.
func Copy(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("tlstest: read %s: %v", src, err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatalf("tlstest: write %s: %v", dst, err)
	}
}
