// Package apitest serves handlers for tests the way rlnode serves the API:
// HTTP/1.1 and unencrypted HTTP/2 (h2c, which gRPC needs) on a loopback
// listener, and gives the HTTP/2 client that reaches them and a plain GET
// with headers, as a proxy doing forward-auth sends.
package apitest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Serve serves h over HTTP/1.1 and h2c on a loopback port until tb ends.
func Serve(tb testing.TB, h http.Handler) *httptest.Server {
	tb.Helper()
	srv := httptest.NewUnstartedServer(h)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
}

// H2CClient speaks HTTP/2 without TLS (prior knowledge), as gRPC needs; its
// idle connections close when tb ends.
func H2CClient(tb testing.TB) *http.Client {
	tb.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// Get sends a GET to url with the headers hdr and returns the response,
// whose body it has read (the string) and closed.
func Get(tb testing.TB, url string, hdr map[string]string) (*http.Response, string) {
	tb.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	return resp, string(b)
}
