package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/api/auth"
)

// authTokenEnv holds a bearer token. It has no flag on purpose: a flag's
// value shows in ps and in shell history.
const authTokenEnv = "RLNODE_AUTH_TOKEN"

// securityUsage ends -help: what the security flags share.
const securityUsage = `
Environment only:
  RLNODE_AUTH_TOKEN
	a bearer token the API accepts (with those of --auth-token-file), at
	least 16 bytes of visible ASCII (no spaces); no flag, so that it never
	shows in ps or shell history

SIGHUP reloads --tls-cert, --tls-key, --tls-client-ca, --auth-token-file,
--gossip-key-file and --rules (which also reloads by itself when its files
change) without dropping connections; a file that fails to load
keeps the previous contents (logged, and counted in
rlcluster_reloads_total{result="error"}). Secrets (Redis passwords, tokens,
gossip keys) are never logged; give them through the environment or files
rather than flags, which show in ps.
`

// addSecurityFlags adds the TLS, authentication and Redis TLS flags.
func addSecurityFlags(fs *flag.FlagSet, c *config) {
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM certificate (chain) `file` for the API; with --tls-key the node serves HTTPS (HTTP/2 and HTTP/1.1, so gRPC too) instead of plaintext; reloaded on SIGHUP")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM private key `file` of --tls-cert; reloaded on SIGHUP")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", "", "PEM CA bundle `file`: require client certificates signed by it (mutual TLS) on every connection; reloaded on SIGHUP")
	fs.StringVar(&c.AuthTokenFile, "auth-token-file", "", "`file` of bearer tokens, one per line (# comments), each at least 16 bytes of visible ASCII (no spaces), optionally followed by rules=a,b inline=yes domains=d prefixes=p1,p2 to bind it to those rules, inline limits, Envoy domains and key prefixes (a bound token may use only what it names); with it or RLNODE_AUTH_TOKEN, every request except --auth-open-paths needs \"Authorization: Bearer <token>\"; reloaded on SIGHUP")
	fs.StringVar(&c.AuthOpenPaths, "auth-open-paths", strings.Join(auth.DefaultOpenPaths, ","), "comma-separated `paths` served without a token when authentication is on (a trailing / covers the subtree); drop /metrics to protect it")
	fs.StringVar(&c.RedisCA, "redis-ca", "", "PEM CA bundle `file` to verify a rediss:// server with (default: the system's roots)")
	fs.StringVar(&c.RedisCert, "redis-cert", "", "PEM client certificate `file` for a rediss:// server that verifies clients (tls-auth-clients)")
	fs.StringVar(&c.RedisKey, "redis-key", "", "PEM private key `file` of --redis-cert")
	fs.StringVar(&c.RedisPasswordFile, "redis-password-file", "", "`file` holding the Redis AUTH password (one line), used in place of any password in --redis-url, so that none needs to be on the command line")
}

// readRedisPassword reads --redis-password-file: its first line, without
// the line ending.
func readRedisPassword(c config) (string, error) {
	if c.RedisURL == "" {
		return "", errors.New("--redis-password-file: needs --redis-url")
	}
	b, err := os.ReadFile(c.RedisPasswordFile)
	if err != nil {
		return "", fmt.Errorf("read --redis-password-file: %w", err)
	}
	pass, _, _ := strings.Cut(string(b), "\n")
	pass = strings.TrimSuffix(pass, "\r")
	if pass == "" {
		return "", fmt.Errorf("--redis-password-file %s: empty", c.RedisPasswordFile)
	}
	return pass, nil
}

// checkSecurityFlags reports inconsistent security flags.
func checkSecurityFlags(c config) []error {
	errs := checkTLSFlags(c)
	if (c.RedisCert == "") != (c.RedisKey == "") {
		errs = append(errs, errors.New("--redis-cert and --redis-key: give both or neither"))
	}
	if c.RedisCA != "" || c.RedisCert != "" {
		if !strings.HasPrefix(c.RedisURL, "rediss://") && !strings.HasPrefix(c.RedisURL, "rediss+sentinel://") {
			errs = append(errs, errors.New("--redis-ca, --redis-cert: need a rediss:// or rediss+sentinel:// --redis-url"))
		}
	}
	return errs
}

// redisTLS returns the TLS config for the Redis client, or nil for the
// URL's own.
func redisTLS(c config) (*tls.Config, error) {
	if c.RedisCA == "" && c.RedisCert == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.RedisCA != "" {
		pool, err := loadCAPool(c.RedisCA, "--redis-ca")
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if c.RedisCert != "" {
		cert, err := tls.LoadX509KeyPair(c.RedisCert, c.RedisKey)
		if err != nil {
			return nil, fmt.Errorf("load --redis-cert/--redis-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// authTokens loads the bearer tokens from --auth-token-file and
// RLNODE_AUTH_TOKEN (nil when neither is set), marks them secret,
// registers the file's reload and the rejection counter.
func authTokens(c config, sec *secrets, rl *reloaders, reg prometheus.Registerer) (*auth.Tokens, error) {
	if c.AuthTokenFile == "" && c.AuthToken == "" {
		return nil, nil
	}
	load := func() ([]string, error) {
		var toks []string
		if c.AuthToken != "" {
			if err := auth.CheckEntry(c.AuthToken); err != nil {
				return nil, fmt.Errorf("%s: %w", authTokenEnv, err)
			}
			toks = append(toks, c.AuthToken)
		}
		if c.AuthTokenFile != "" {
			b, err := os.ReadFile(c.AuthTokenFile)
			if err != nil {
				return nil, fmt.Errorf("read --auth-token-file: %w", err)
			}
			fromFile := auth.ParseTokenLines(b)
			for _, l := range fromFile {
				sec.add(auth.Token(l.Entry))
			}
			if len(fromFile) == 0 {
				return nil, fmt.Errorf("--auth-token-file %s: no token in it", c.AuthTokenFile)
			}
			for _, l := range fromFile {
				if err := auth.CheckEntry(l.Entry); err != nil {
					return nil, fmt.Errorf("--auth-token-file %s:%d: %w", c.AuthTokenFile, l.Line, err)
				}
				toks = append(toks, l.Entry)
			}
		}
		return toks, nil
	}
	toks, err := load()
	if err != nil {
		return nil, err
	}
	t, err := auth.NewTokens(toks)
	if err != nil {
		return nil, fmt.Errorf("auth tokens: %w", err)
	}
	if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "rlcluster_auth_rejected_total",
		Help: "Requests refused for a missing or invalid bearer token.",
	}, func() float64 { return float64(t.Rejected()) })); err != nil {
		return nil, err
	}
	if c.AuthTokenFile != "" {
		rl.add("auth tokens", func() error {
			toks, err := load()
			if err != nil {
				return err
			}
			return t.Set(toks)
		})
	}
	return t, nil
}

// protect wraps h with bearer-token authentication when tokens is set.
func protect(c config, tokens *auth.Tokens, h http.Handler) http.Handler {
	if tokens == nil {
		return h
	}
	return auth.RequireBearer(tokens, openPaths(c), h)
}

// openPaths returns --auth-open-paths as a list.
func openPaths(c config) []string {
	var open []string
	for _, p := range strings.Split(c.AuthOpenPaths, ",") {
		if p = strings.TrimSpace(p); p != "" {
			open = append(open, p)
		}
	}
	return open
}

// secrets returns the secrets c holds, for the logger to mask.
func (c config) secrets() *secrets {
	s := &secrets{}
	s.addURL(c.RedisURL)
	s.add(c.RedisPassword)
	s.add(c.AuthToken)
	s.addKeys(c.GossipKey)
	return s
}
