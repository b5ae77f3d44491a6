package region_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/region/storetest"
	"github.com/rlcluster/rlcluster/internal/tlstest"
	"github.com/rlcluster/rlcluster/internal/window"
)

const (
	defaultPass = "default-pass-Secr3t"
	aclPass     = "acl-pass-Secr3t"
)

// startAuthRedis starts a redis-server whose default user needs
// defaultPass and with an ACL user "rl" (password aclPass) that may run
// any command but the dangerous ones (FLUSHALL, CONFIG, KEYS, ...), and
// only on keys under rl:, the store's prefix.
func startAuthRedis(t *testing.T, extra ...string) *redistest.Server {
	t.Helper()
	return redistest.Start(t, append([]string{"--requirepass", defaultPass,
		"--user", "rl", "on", ">" + aclPass, "~rl:*", "+@all", "-@dangerous"}, extra...)...)
}

func open(t *testing.T, cfg region.RedisConfig) (*region.Redis, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := region.NewRedis(ctx, cfg)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// TestRedisAuth connects with requirepass's password and an ACL user
// through the URL; wrong or missing credentials fail without the password
// in the error.
func TestRedisAuth(t *testing.T) {
	srv := startAuthRedis(t)
	for _, tc := range []struct {
		name, url string
		wantErr   string // empty: connects and decides
	}{
		{"requirepass", "redis://:" + defaultPass + "@" + srv.Addr, ""},
		{"default user named", "redis://default:" + defaultPass + "@" + srv.Addr, ""},
		{"acl user", "redis://rl:" + aclPass + "@" + srv.Addr, ""},
		{"no password", "redis://" + srv.Addr, "NOAUTH"},
		{"wrong password", "redis://rl:wrong-Secr3t@" + srv.Addr, "WRONGPASS"},
		{"unparsable", "redis://rl:" + aclPass + "@" + srv.Addr + ":bad", "region: redis URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := open(t, region.RedisConfig{URL: tc.url, Region: "here"})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("NewRedis(%s) = %v, want an error containing %q", tc.name, err, tc.wantErr)
				}
				for _, secret := range []string{aclPass, defaultPass, "wrong-Secr3t"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("NewRedis error %q shows a password", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("NewRedis(%s): %v", tc.name, err)
			}
			l := window.Limit{Limit: 2, Window: time.Minute}
			for i, want := range []bool{true, true, false} {
				r, err := check(t, s, region.Request{Key: "auth/" + tc.name, Limit: l, Hits: 1, Now: t0})
				if err != nil || r.Allowed != want {
					t.Fatalf("Check %d = %v, %v; want allowed %v", i+1, r.Allowed, err, want)
				}
			}
		})
	}
}

// TestRedisStoreACLUser runs the store contract as an ACL user confined to
// keys under rl:, which shows the store touches no other key.
func TestRedisStoreACLUser(t *testing.T) {
	srv := startAuthRedis(t)
	storetest.RunStoreTests(t, func(t *testing.T, reg string) region.Store {
		return newRedisStore(t, "redis://rl:"+aclPass+"@"+srv.Addr, reg, region.Coalesce{})
	})
}

// TestRedisTLS decides over rediss:// against a redis-server that requires
// client certificates, with the CA and client certificate in
// RedisConfig.TLSConfig, and an ACL user on top.
func TestRedisTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "redis")
	server, client := ca.Server(t, "redis"), ca.Client(t, "rlnode")
	srv := redistest.StartTLS(t, server.CertFile, server.KeyFile, ca.CertFile, "--requirepass", defaultPass,
		"--user", "rl", "on", ">"+aclPass, "~rl:*", "+@all")
	url := "rediss://rl:" + aclPass + "@" + srv.TLSAddr
	for _, tc := range []struct {
		name    string
		url     string
		tls     *tls.Config
		wantErr string
	}{
		{"ca and client cert", url, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS}}, ""},
		{"no client cert", url, &tls.Config{RootCAs: ca.Pool()}, "region: store unavailable"},
		{"system roots", url, nil, "certificate"},
		{"tls config on redis://", "redis://" + srv.Addr, &tls.Config{RootCAs: ca.Pool()}, "URL scheme is not rediss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := open(t, region.RedisConfig{URL: tc.url, Region: "here", TLSConfig: tc.tls})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("NewRedis = %v, want an error containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), aclPass) {
					t.Errorf("NewRedis error %q shows the password", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewRedis over TLS: %v", err)
			}
			r, err := check(t, s, region.Request{Key: "tls", Limit: window.Limit{Limit: 1, Window: time.Minute}, Hits: 1, Now: t0})
			if err != nil || !r.Allowed {
				t.Fatalf("Check over TLS = %v, %v; want allowed", r.Allowed, err)
			}
		})
	}
	// The plaintext port holds what the TLS connection wrote.
	s, err := open(t, region.RedisConfig{URL: "redis://rl:" + aclPass + "@" + srv.Addr, Region: "here"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := check(t, s, region.Request{Key: "tls", Limit: window.Limit{Limit: 1, Window: time.Minute}, Hits: 1, Now: t0, Peek: true})
	if err != nil || r.Allowed {
		t.Errorf("Peek on the plaintext port = %v, %v; want denied (the TLS client spent the limit)", r.Allowed, err)
	}
}

func TestRedisURLErrorsHidePasswords(t *testing.T) {
	for _, raw := range []string{
		"redis://user:" + aclPass + "@host:notaport",
		"rediss://user:" + aclPass + "@[::1",
		"redis://user:" + aclPass + "@host:6379?cluster=maybe",
		"redis://user:" + aclPass + "@host:6379?bogus=1",
		"rediss+sentinel://user:" + aclPass + "@/mymaster",
		"http://user:" + aclPass + "@host",
		"user:" + aclPass + "@host",
	} {
		_, err := region.NewRedis(context.Background(), region.RedisConfig{URL: raw})
		if err == nil {
			t.Errorf("NewRedis(%q) = nil error, want one", raw)
			continue
		}
		if strings.Contains(err.Error(), aclPass) {
			t.Errorf("NewRedis error %q shows the password", err)
		}
	}
}

// TestRedisTLSServerOnly: a Redis that verifies no client certificate
// needs only the CA (rlnode's --redis-ca).
func TestRedisTLSServerOnly(t *testing.T) {
	ca := tlstest.NewCA(t, "redis")
	server := ca.Server(t, "redis")
	srv := redistest.StartTLS(t, server.CertFile, server.KeyFile, "")
	s, err := open(t, region.RedisConfig{URL: srv.TLSURL(), Region: "here", TLSConfig: &tls.Config{RootCAs: ca.Pool()}})
	if err != nil {
		t.Fatalf("NewRedis(%s) with the CA: %v", srv.TLSURL(), err)
	}
	if r, err := check(t, s, region.Request{Key: "tls-only", Limit: window.Limit{Limit: 1, Window: time.Minute}, Hits: 1, Now: t0}); err != nil || !r.Allowed {
		t.Fatalf("Check over TLS = %v, %v; want allowed", r.Allowed, err)
	}
}
