package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestFastPathMatchesConnect sends the same calls to two servers in the
// same state, one through serveFast and one through Connect, and wants the
// same status, content type and body, byte for byte.
func TestFastPathMatchesConnect(t *testing.T) {
	now := time.UnixMilli(29_000_000*60_000 + 30_000)
	rs, err := rules.New([]rules.Rule{{Name: "login", Limit: window.Limit{Limit: 2, Window: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	newSrv := func() *Server {
		s, err := NewHandler(Config{Store: region.NewMemory(region.MemoryConfig{}), Rules: rs, Now: func() time.Time { return now }, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	fast, slow := newSrv(), newSrv()
	calls := []struct {
		name, path, ct, body string
		wantFast             bool
	}{
		{"check", pathCheck, "application/json", `{"key":"alice","limit":{"limit":"2","window":"60s"}}`, true},
		{"check again", pathCheck, "application/json", `{"key":"alice","limit":{"limit":2,"window":"60s"}}`, true},
		{"check denied", pathCheck, "application/json", `{"key":"alice","limit":{"limit":2,"window":"60s"}}`, true},
		{"charset", pathCheck, "application/json; charset=utf-8", `{"key":"bob","rule":"login"}`, true},
		{"token bucket", pathCheck, "application/json", `{"key":"t","hits":2,"limit":{"limit":5,"window":"1.5s","algorithm":"ALGORITHM_TOKEN_BUCKET"}}`, true},
		{"peek", pathPeek, "application/json", `{"key":"alice","limit":{"limit":2,"window":"60s"}}`, true},
		{"batch", pathCheckBatch, "application/json", `{"checks":[{"key":"a","limit":{"limit":1,"window":"1s"}},{"key":"","limit":{"limit":1,"window":"1s"}},{"key":"r","rule":"nope"}]}`, true},
		{"bad hits", pathCheck, "application/json", `{"key":"alice","hits":500,"limit":{"limit":100,"window":"60s"}}`, true},
		{"empty key", pathCheck, "application/json", `{"key":"","limit":{"limit":100,"window":"60s"}}`, true},
		{"unknown rule", pathCheck, "application/json", `{"key":"x","rule":"nope"}`, true},
		{"escaped key", pathCheck, "application/json", `{"key":"a\"b<>","limit":{"limit":1,"window":"60s"}}`, false},
		{"malformed", pathCheck, "application/json", `{"key":`, false},
		{"unknown field", pathCheck, "application/json", `{"key":"u","limit":{"limit":1,"window":"60s"},"x":1}`, false},
		{"too big", pathCheck, "application/json", `{"key":"` + strings.Repeat("k", DefaultMaxRequestBytes) + `"}`, false},
		{"proto codec", pathCheck, "application/proto", "", false},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			req := func() *http.Request {
				r := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
				r.Header.Set("Content-Type", c.ct)
				return r
			}
			fw := httptest.NewRecorder()
			took := fast.serveFast(fw, req())
			if took != c.wantFast {
				t.Fatalf("serveFast took it: %v, want %v", took, c.wantFast)
			}
			if !took {
				fast.ServeHTTP(fw, req())
			}
			sw := httptest.NewRecorder()
			slow.mux.ServeHTTP(sw, req())
			if fw.Code != sw.Code {
				t.Errorf("status %d, Connect's %d", fw.Code, sw.Code)
			}
			if got, want := fw.Header().Get("Content-Type"), sw.Header().Get("Content-Type"); got != want {
				t.Errorf("Content-Type %q, Connect's %q", got, want)
			}
			if got, want := fw.Body.String(), sw.Body.String(); got != want {
				t.Errorf("body\n got  %.300s\n want %.300s", got, want)
			}
		})
	}
}
