package procs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHTTPOK(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	if err := HTTPOK(ctx, srv.URL+"/readyz")(); err != nil {
		t.Errorf("HTTPOK(/readyz answering 200) = %v, want nil", err)
	}
	if err := HTTPOK(ctx, srv.URL+"/other")(); err == nil {
		t.Error("HTTPOK(a path answering 503) = nil, want an error")
	}
}
