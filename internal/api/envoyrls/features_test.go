package envoyrls_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/decision"
	"github.com/rlcluster/rlcluster/internal/api/envoyrls"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
)

// t0 is a fixed instant in the middle of a minute.
var t0 = time.UnixMilli(29_000_000*60_000 + 30_000)

// serve serves ShouldRateLimit for the rules of file (one of
// envoyproxy/ratelimit's configurations, unchanged) on a memory store,
// and returns go-control-plane's gRPC client for it, as Envoy calls it.
func serve(t *testing.T, file string) rlsv3.RateLimitServiceClient {
	t.Helper()
	rs, err := rules.Load("../testdata/envoyproxy-tests/" + file)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := decision.New(decision.Config{
		Store:       region.NewMemory(region.MemoryConfig{}),
		MaxKeyBytes: 1024, MaxHits: 1 << 20, MaxWindow: 7 * 24 * time.Hour, MaxLogLimit: 1000,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry(),
	}, rs)
	if err != nil {
		t.Fatal(err)
	}
	svc := envoyrls.New(envoyrls.Config{Decider: dec, MaxBatch: 16, Now: func() time.Time { return t0 }})
	srv := apitest.Serve(t, svc.Handler())
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask sends one request and returns its overall code, each status's code
// as "OK"/"OVER_LIMIT" joined by spaces, and its dynamic metadata as
// JSON ("" when none).
func ask(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, ds ...*commonv3.RateLimitDescriptor) (overall string, codes string, md string) {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	var cs []string
	for _, s := range resp.GetStatuses() {
		cs = append(cs, s.GetCode().String())
	}
	if m := resp.GetDynamicMetadata(); m != nil {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		md = strings.ReplaceAll(string(b), " ", "")
	}
	return resp.GetOverallCode().String(), strings.Join(cs, " "), md
}

// TestShareThresholdDecides: with share_threshold every value matching
// the wildcard spends one counter (10 per hour across files/a, files/b,
// ...); without it each value has its own.
func TestShareThresholdDecides(t *testing.T) {
	c := serve(t, "share_threshold_integration.yaml")
	const dom = "share-threshold-test"
	for i := range 10 {
		v := []string{"files/a", "files/b", "files/c"}[i%3]
		if o, _, _ := ask(t, c, dom, desc("files", v)); o != "OK" {
			t.Fatalf("request %d (%s): %s, want OK", i+1, v, o)
		}
	}
	if o, _, _ := ask(t, c, dom, desc("files", "files/new")); o != "OVER_LIMIT" {
		t.Errorf("11th request on the shared wildcard: %s, want OVER_LIMIT", o)
	}
	for i := range 10 {
		if o, _, _ := ask(t, c, dom, desc("files_no_share", "files_no_share/a")); o != "OK" {
			t.Fatalf("files_no_share/a request %d: %s, want OK", i+1, o)
		}
	}
	if o, _, _ := ask(t, c, dom, desc("files_no_share", "files_no_share/a")); o != "OVER_LIMIT" {
		t.Errorf("files_no_share/a 11th request: %s, want OVER_LIMIT", o)
	}
	// Another value of the wildcard without share_threshold has its own
	// counter.
	if o, _, _ := ask(t, c, dom, desc("files_no_share", "files_no_share/b")); o != "OK" {
		t.Errorf("files_no_share/b: %s, want OK", o)
	}
}

// TestShareThresholdNested: in envoyproxy/ratelimit's share_threshold test
// configuration, a shared parent wildcard and an unshared child wildcard
// count per child value across parent values; an exact value has its own
// counter beside a shared wildcard.
func TestShareThresholdNested(t *testing.T) {
	c := serve(t, "share_threshold.yaml")
	const dom = "test-domain"
	for i := range 120 {
		parent := []string{"path/a", "path/b"}[i%2]
		if o, _, _ := ask(t, c, dom, desc("path", parent, "file", "file/1", "type", "pdf")); o != "OK" {
			t.Fatalf("request %d: %s, want OK", i+1, o)
		}
	}
	if o, _, _ := ask(t, c, dom, desc("path", "path/c", "file", "file/1", "type", "pdf")); o != "OVER_LIMIT" {
		t.Errorf("121st request for file/1 under any path/*: %s, want OVER_LIMIT", o)
	}
	if o, _, _ := ask(t, c, dom, desc("path", "path/c", "file", "file/2", "type", "pdf")); o != "OK" {
		t.Errorf("file/2: %s, want OK (file/* does not share)", o)
	}
	for i := range 50 {
		if o, _, _ := ask(t, c, dom, desc("file", "test1")); o != "OK" {
			t.Fatalf("test1 request %d: %s, want OK", i+1, o)
		}
	}
	if o, _, _ := ask(t, c, dom, desc("file", "test1")); o != "OVER_LIMIT" {
		t.Errorf("test1 51st: %s, want OVER_LIMIT", o)
	}
	if o, _, _ := ask(t, c, dom, desc("file", "test2")); o != "OK" {
		t.Errorf("test2 after test1 is spent: %s, want OK (test* is its own counter)", o)
	}
}

// TestQuotaMode: with envoyproxy/ratelimit's quota example (service_1: 1
// per minute, service_2: 2 per minute, both quota_mode), a request is
// over the limit only when every quota is; each status still says which
// quota is spent, and the metadata lists the spent ones.
func TestQuotaMode(t *testing.T) {
	c := serve(t, "quota.yaml")
	s1, s2 := desc("service", "service_1"), desc("service", "service_2")
	for i, want := range []struct{ overall, codes, md string }{
		{"OK", "OK OK", `{"quotaModeEnabled":true,"quotaModeViolations":[]}`},
		{"OK", "OVER_LIMIT OK", `{"quotaModeEnabled":true,"quotaModeViolations":[0]}`},
		{"OVER_LIMIT", "OVER_LIMIT OVER_LIMIT", `{"quotaModeEnabled":true,"quotaModeViolations":[0,1]}`},
	} {
		o, codes, md := ask(t, c, "quota", s1, s2)
		if o != want.overall || codes != want.codes || md != want.md {
			t.Errorf("request %d: %s [%s] %s, want %s [%s] %s", i+1, o, codes, md, want.overall, want.codes, want.md)
		}
	}
}

// TestMetadata: a descriptor's metadata comes back in dynamic_metadata
// while it is under its limit, and not once it is over.
func TestMetadata(t *testing.T) {
	c := serve(t, "metadata.yaml")
	const dom = "test-domain"
	d := desc("key1", "value1", "subkey1", "x")
	for i := range 5 {
		if o, _, md := ask(t, c, dom, d); o != "OK" || md != `{"name":"service_1"}` {
			t.Fatalf("request %d: %s %s, want OK {\"name\":\"service_1\"}", i+1, o, md)
		}
	}
	if o, _, md := ask(t, c, dom, d); o != "OVER_LIMIT" || md != "" {
		t.Errorf("6th request: %s %q, want OVER_LIMIT without metadata", o, md)
	}
	// Two descriptors under their limits: both metadata, merged.
	o, _, md := ask(t, c, dom, desc("key2", "y"), desc("key1", "value1", "subkey1", "z"))
	if want := `{"name":"service_1","service_with_quota":{"name":"service_2"}}`; o != "OK" || md != want {
		t.Errorf("two descriptors: %s %s, want OK %s", o, md, want)
	}
	// No metadata configured: none returned.
	if _, _, md := ask(t, c, dom, desc("key1", "value1", "subkey1", "subvalue1")); md != "" {
		t.Errorf("subvalue1: metadata %s, want none", md)
	}
}
