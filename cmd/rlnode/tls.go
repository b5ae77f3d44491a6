package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
)

// serverTLS is the API's TLS setup: a certificate and key (PEM files) and,
// for mutual TLS, a CA bundle that client certificates must chain to.
//
// Every handshake takes the tls.Config built by the last successful load
// (GetConfigForClient reads an atomic pointer), so a reload swaps the
// certificate and CA for new connections without touching open ones. A
// failed reload leaves the previous config in place.
//
// Safe for concurrent use.
type serverTLS struct {
	certFile, keyFile, clientCAFile string
	cur                             atomic.Pointer[tls.Config]
}

// newServerTLS loads the files once; an error here stops the node.
func newServerTLS(certFile, keyFile, clientCAFile string) (*serverTLS, error) {
	s := &serverTLS{certFile: certFile, keyFile: keyFile, clientCAFile: clientCAFile}
	if err := s.reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// reload reads the files again and, when they all parse, uses them for
// every new connection.
func (s *serverTLS) reload() error {
	cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		// LoadX509KeyPair names the files but never prints key material.
		return fmt.Errorf("load --tls-cert/--tls-key: %w", err)
	}
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		// h2 first: gRPC needs HTTP/2; browsers and curl may use either.
		NextProtos: []string{"h2", "http/1.1"},
	}
	if s.clientCAFile != "" {
		pool, err := loadCAPool(s.clientCAFile, "--tls-client-ca")
		if err != nil {
			return err
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	s.cur.Store(c)
	return nil
}

// config returns the tls.Config to give http.Server: its handshakes use
// whatever the last successful load built.
func (s *serverTLS) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load(), nil
		},
	}
}

// loadCAPool reads a PEM bundle of CA certificates; flag names the flag
// for errors.
func loadCAPool(path, flag string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("load %s: %s holds no PEM certificate", flag, path)
	}
	return pool, nil
}

// checkTLSFlags reports inconsistent TLS flags.
func checkTLSFlags(c config) []error {
	var errs []error
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key: give both or neither"))
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		errs = append(errs, errors.New("--tls-client-ca: needs --tls-cert and --tls-key"))
	}
	return errs
}

// serveTLS sets srv up for HTTPS when c asks for it: HTTP/2 (gRPC) and
// HTTP/1.1 over TLS, the files reloaded on SIGHUP through rl.
func serveTLS(c config, srv *http.Server, rl *reloaders) error {
	if c.TLSCert == "" {
		return nil
	}
	st, err := newServerTLS(c.TLSCert, c.TLSKey, c.TLSClientCA)
	if err != nil {
		return err
	}
	rl.add("tls certificates", st.reload)
	srv.TLSConfig = st.config()
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	srv.Protocols = &p
	return nil
}
