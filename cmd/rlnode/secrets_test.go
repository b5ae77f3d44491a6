package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/logtest"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
	"github.com/rlcluster/rlcluster/internal/tlstest"
)

// Secrets of TestNoSecretsInLogs. Each is long and distinctive so that a
// leak cannot hide.
const (
	redisDefaultPass = "redis-default-pass-Zq81"
	redisACLPass     = "redis-acl-pass/Zq82+x" // '/' and '+' are escaped in a URL
	envToken         = "env-bearer-token-Zq83"
	fileToken        = "file-bearer-token-Zq84"
	brokenToken      = "short-Zq85" // refused (too short) on reload
)

var (
	gossipKeyA = base64.StdEncoding.EncodeToString([]byte("gossip-key-A-Zq86-0123456789abcd"))
	gossipKeyB = base64.StdEncoding.EncodeToString([]byte("gossip-key-B-Zq87-0123456789abcd"))
	gossipKeyC = base64.StdEncoding.EncodeToString([]byte("gossip-key-C-Zq88-01234567"))[:20] // broken
)

// TestNoSecretsInLogs runs two regions with every kind of secret: eu on a
// TLS Redis with client certificates as an ACL user, bearer tokens from a
// file and the environment; us on a password-protected Redis named in the
// environment; both with gossip keys from a file rotated A -> B by SIGHUP. It drives them through success and failure (bad reloads,
// refused requests, nodes that fail to start) at debug level and scans
// every log line and error for every secret.
func TestNoSecretsInLogs(t *testing.T) {
	ca := tlstest.NewCA(t, "redis")
	srvCert, cliCert := ca.Server(t, "redis"), ca.Client(t, "rlnode")
	redisEU := redistest.StartTLS(t, srvCert.CertFile, srvCert.KeyFile, ca.CertFile,
		"--requirepass", redisDefaultPass, "--user", "rl", "on", ">"+redisACLPass, "~rl:*", "+@all")
	redisUS := redistest.Start(t, "--requirepass", redisDefaultPass)
	euURL := "rediss://rl:" + url.QueryEscape(redisACLPass) + "@" + redisEU.TLSAddr
	usURL := "redis://:" + redisDefaultPass + "@" + redisUS.Addr

	dir := t.TempDir()
	tokFile, keyFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "gossip-keys")
	writeFile(t, tokFile, fileToken+"\n")
	writeFile(t, keyFile, gossipKeyA+"\n")

	// Exact counts below: a long store timeout keeps -race on a busy
	// machine from deciding or merging any of them in a failover's fallback.
	euNode := startNode(t, []string{"--listen=127.0.0.1:0", "--region=eu", "--node-name=eu-1", "--log-level=debug", "--store-timeout=2s",
		"--redis-url", euURL, "--redis-ca", ca.CertFile, "--redis-cert", cliCert.CertFile, "--redis-key", cliCert.KeyFile,
		"--auth-token-file", tokFile, "--gossip-addr=127.0.0.1:0", "--gossip-key-file", keyFile},
		env(map[string]string{authTokenEnv: envToken}))
	eu, euLogs := euNode.base, euNode.logs
	m := gossipRE.FindStringSubmatch(euLogs.String())
	if m == nil {
		t.Fatalf("eu's logs lack its gossip address:\n%s", euLogs)
	}
	usNode := startNode(t, []string{"--listen=127.0.0.1:0", "--region=us", "--node-name=us-1", "--log-level=debug", "--store-timeout=2s",
		"--gossip-addr=127.0.0.1:0", "--join", m[1], "--gossip-key-file", keyFile},
		env(map[string]string{"RLNODE_REDIS_URL": usURL}))
	us, usLogs := usNode.base, usNode.logs
	if !strings.Contains(euLogs.String(), `store="redis rediss://rl:xxxxx@`) || !strings.Contains(euLogs.String(), "encrypted=true") {
		t.Errorf("eu's start line lacks the redacted store URL or encryption:\n%s", euLogs)
	}

	check := func(base, tok, key string) (int, string) {
		return postAs(t, base+"/ratelimit.v1.RateLimitService/Check", tok, `{"key":"`+key+`","limit":{"limit":100,"window":"3600s"}}`)
	}
	// replicated checks that hits on eu reach us.
	replicated := func(step, key string, hits int) {
		t.Helper()
		for i := 0; i < hits; i++ {
			if code, b := check(eu, envToken, key); code != http.StatusOK {
				t.Fatalf("%s: Check on eu: %d %s", step, code, b)
			}
		}
		body := `{"key":"` + key + `","limit":{"limit":100,"window":"3600s"}}`
		var got string
		if _, ok := polltest.Poll(15*time.Second, func() bool {
			got = peek(t, us, body).Response.Stats.Current
			return got == "3"
		}); !ok {
			t.Fatalf("%s: us's count of eu's hits on %s after 15s = %s, want 3\neu:\n%s\nus:\n%s", step, key, got, euLogs, usLogs)
		}
	}
	replicated("key A", "k-a", 3)
	if code, _ := check(eu, "", "k-x"); code != http.StatusUnauthorized {
		t.Errorf("Check without a token = %d, want 401", code)
	}
	if code, _ := check(eu, "wrong-"+fileToken, "k-x"); code != http.StatusUnauthorized {
		t.Errorf("Check with a wrong token = %d, want 401", code)
	}
	if code, _ := check(eu, fileToken, "k-x"); code != http.StatusOK {
		t.Errorf("Check with the file's token = %d, want 200", code)
	}

	// Rotate the gossip key A -> B through the key file both nodes read;
	// one SIGHUP reloads both (they share this process).
	for _, step := range []struct{ name, keys, key string }{
		{"keys [A,B]", gossipKeyA + "\n" + gossipKeyB + "\n", "k-ab"},
		{"keys [B,A]", gossipKeyB + "\n" + gossipKeyA + "\n", "k-ba"},
		{"keys [B]", gossipKeyB + "\n", "k-b"},
	} {
		writeFile(t, keyFile, step.keys)
		hupAndWait(t, `msg=reloaded what="gossip keys"`, euLogs, usLogs)
		replicated(step.name, step.key, 3)
	}

	// Failed reloads: a broken key, a too short token. Both keep the old
	// contents and say so without the values.
	writeFile(t, keyFile, gossipKeyC+"\n")
	hupAndWait(t, `reload failed: keeping the previous gossip keys`, euLogs, usLogs)
	writeFile(t, tokFile, brokenToken+"\n")
	hupAndWait(t, `reload failed: keeping the previous auth tokens`, euLogs)
	if code, _ := check(eu, fileToken, "k-y"); code != http.StatusOK {
		t.Errorf("Check with the old file token after a failed reload = %d, want 200", code)
	}
	replicated("after failed reloads", "k-fail", 3)

	// Nodes that fail to start: a wrong Redis password, an unparsable URL
	// with a password, a gossip key that is not a key.
	var startErrs []string
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--redis-url", "redis://:wrong-" + redisDefaultPass + "@" + redisUS.Addr}, nil},
		{[]string{"--redis-url", "redis://rl:" + redisACLPass + "@" + redisUS.Addr + ":99999x"}, nil},
		{[]string{"--redis-url", "rl:" + redisACLPass + "@" + redisUS.Addr}, nil},
		{[]string{"--gossip-addr=127.0.0.1:0"}, map[string]string{"RLNODE_GOSSIP_KEY": gossipKeyA + "," + gossipKeyC}},
		{nil, map[string]string{authTokenEnv: brokenToken}},
	} {
		logs := &logtest.Buffer{}
		err := run(context.Background(), append([]string{"--listen=127.0.0.1:0", "--log-level=debug"}, tc.args...), env(tc.env), io.Discard, logs)
		if err == nil {
			t.Errorf("run(%q, %v) = nil, want an error", tc.args, tc.env)
			continue
		}
		startErrs = append(startErrs, err.Error(), logs.String())
	}

	stopNodes(euNode, usNode)

	all := euLogs.String() + usLogs.String() + strings.Join(startErrs, "\n")
	for _, s := range []string{redisDefaultPass, redisACLPass, url.QueryEscape(redisACLPass), envToken, fileToken, brokenToken,
		gossipKeyA, gossipKeyB, gossipKeyC} {
		if strings.Contains(all, s) {
			t.Errorf("secret %q appears in the logs or errors:\n%s", s, logtest.Lines(all, s))
		}
	}
	// The checks above did log: the test would see a leak.
	for _, want := range []string{"rlnode listening", "reloaded", "reload failed", "gossip key installed", "gossip key in use", "WRONGPASS"} {
		if !strings.Contains(all, want) {
			t.Errorf("logs and errors lack %q; the scan proves little without it", want)
		}
	}
	t.Logf("scanned %d bytes of logs and errors", len(all))
}

func TestSecretsMaskURLs(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		leaks     []string // forms of the password that must not survive
	}{
		{"plain", "redis://user:hunter22@host:6379", []string{"hunter22"}},
		{"escaped", "rediss://user:p%2Fss%2Bw0rd@host:6379", []string{"p/ss+w0rd", "p%2Fss%2Bw0rd"}},
		{"no user", "redis://:hunter22@host:6379", []string{"hunter22"}},
		{"unparsable", "redis://user:hunter22@host:notaport:x", []string{"hunter22"}},
		{"sentinel", "redis+sentinel://user:hunter22@s1:26379,s2:26379/mymaster", []string{"hunter22"}},
		{"no scheme", "user:hunter22@host", []string{"hunter22"}},
		{"at in password", "redis://user:hun@ter22@host", []string{"hun@ter22"}},
		{"sentinel query", "redis+sentinel://s1:26379,s2:26379/mymaster?password=hunter22&sentinel_password=hunter33",
			[]string{"hunter22", "hunter33"}},
		{"go-redis sentinel query", "redis://s1:26379?master_name=m&sentinel_password=hunter%2B33", []string{"hunter%2B33", "hunter+33"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s secrets
			s.addURL(tc.url)
			for _, leak := range tc.leaks {
				if got := s.scrub("dial " + leak + " failed"); strings.Contains(got, leak) {
					t.Errorf("scrub kept %q: %q", leak, got)
				}
			}
		})
	}
	// A URL without a password masks nothing (a user name is no secret).
	var s secrets
	s.addURL("redis://default@host:6379")
	if got := s.scrub("user default"); got != "user default" {
		t.Errorf("scrub = %q, want it unchanged", got)
	}
}

func TestSecretsInLogger(t *testing.T) {
	var s secrets
	s.add("tok-secret-1", "abc") // "abc" is too short to mask
	var buf bytes.Buffer
	log := newLogger(config{LogFormat: "json"}, &buf, &s)
	log.Info("saw tok-secret-1", "err", errors.New("bad tok-secret-1"), "any", []string{"tok-secret-1"},
		slog.Group("g", "v", "x tok-secret-1"), "short", "abc")
	out := buf.String()
	if strings.Contains(out, "tok-secret-1") {
		t.Errorf("log line shows the secret: %s", out)
	}
	if got := strings.Count(out, mask); got != 4 {
		t.Errorf("log line has %d masks, want 4: %s", got, out)
	}
	if !strings.Contains(out, `"short":"abc"`) {
		t.Errorf("short value masked: %s", out)
	}
	err := s.scrubErr(fmt.Errorf("open: %w", errors.New("tok-secret-1 refused")))
	if got, want := err.Error(), "open: "+mask+" refused"; got != want {
		t.Errorf("scrubErr = %q, want %q", got, want)
	}
	plain := errors.New("nothing here")
	if s.scrubErr(plain) != plain {
		t.Error("scrubErr replaced an error that holds no secret")
	}
}

// TestSecretsAddOnce: a reload that adds the same secrets again does not
// grow the list each scrub walks.
func TestSecretsAddOnce(t *testing.T) {
	var s secrets
	for range 3 {
		s.add("token-one-123", "token-two-456", "short")
	}
	if got, want := len(s.list), 2; got != want {
		t.Errorf("secrets held after three identical adds = %d, want %d", got, want)
	}
	if got, want := s.scrub("a token-two-456 b"), "a "+mask+" b"; got != want {
		t.Errorf("scrub = %q, want %q", got, want)
	}
}
