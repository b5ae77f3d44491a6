// Package apitest serves handlers for tests the way rlnode serves the API:
// HTTP/1.1 and unencrypted HTTP/2 (h2c, which gRPC needs) on a loopback
// listener, and gives the HTTP/2 client that reaches them; Do, Get and Post
// send plain HTTP/1.1 requests, as curl or a proxy doing forward-auth does.
// [Pool] stands in for the other regions.
package apitest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Serve serves h over HTTP/1.1 and h2c on a loopback port until tb ends.
func Serve(tb testing.TB, h http.Handler) *httptest.Server {
	tb.Helper()
	srv := NewUnstarted(h)
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
}

// NewUnstarted returns a server of h that speaks HTTP/1.1 and h2c, as
// rlnode does, not yet started: its caller may set its listener first,
// and closes it.
func NewUnstarted(h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
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

// Do sends req with the default client and returns the response, whose
// body it has read (the string) and closed; it fails tb on error.
func Do(tb testing.TB, req *http.Request) (*http.Response, string) {
	tb.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

// Get sends a GET to url with the headers hdr, as Do does.
func Get(tb testing.TB, url string, hdr map[string]string) (*http.Response, string) {
	tb.Helper()
	return send(tb, http.MethodGet, url, nil, hdr)
}

// Post sends body to url as JSON (Content-Type application/json, as the
// README's curl does) with the headers hdr, as Do does.
func Post(tb testing.TB, url, body string, hdr map[string]string) (*http.Response, string) {
	tb.Helper()
	return send(tb, http.MethodPost, url, strings.NewReader(body), map[string]string{"Content-Type": "application/json"}, hdr)
}

func send(tb testing.TB, method, url string, body io.Reader, hdrs ...map[string]string) (*http.Response, string) {
	tb.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, body)
	if err != nil {
		tb.Fatal(err)
	}
	for _, hdr := range hdrs {
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
	}
	return Do(tb, req)
}
