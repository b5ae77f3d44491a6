package region

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// newClient builds the go-redis client for cfg.URL.
func newClient(cfg RedisConfig) (redis.UniversalClient, error) {
	if cfg.URL == "" {
		return nil, errors.New("region: redis: empty URL")
	}
	kind, u, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	// Each kind parses into its own options type; all of them get cfg's
	// settings through the same clientOptions.
	var (
		opts  clientOptions
		build func() redis.UniversalClient
	)
	switch kind {
	case "cluster":
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, fmt.Errorf("region: parse cluster URL: %w", urlError(err))
		}
		opts = clientOptions{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.PoolSize, &o.Password, &o.TLSConfig}
		build = func() redis.UniversalClient { return redis.NewClusterClient(o) }
	case "sentinel":
		o, err := redis.ParseFailoverURL(u)
		if err != nil {
			return nil, fmt.Errorf("region: parse sentinel URL: %w", urlError(err))
		}
		if cfg.Password != "" && o.SentinelPassword == "" {
			o.SentinelPassword = cfg.Password
		}
		if o.Username == "" && o.Password == "" {
			// The URL's user info authenticates to the sentinels and to the
			// master alike.
			o.Username, o.Password = o.SentinelUsername, o.SentinelPassword
		}
		opts = clientOptions{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.PoolSize, &o.Password, &o.TLSConfig}
		build = func() redis.UniversalClient { return redis.NewFailoverClient(o) }
	default:
		o, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("region: parse redis URL: %w", urlError(err))
		}
		opts = clientOptions{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.PoolSize, &o.Password, &o.TLSConfig}
		build = func() redis.UniversalClient { return redis.NewClient(o) }
	}
	if err := cfg.fill(opts); err != nil {
		return nil, err
	}
	return build(), nil
}

// clientOptions points at the fields that every kind of go-redis options
// (standalone, Cluster, Sentinel) has and that RedisConfig sets.
type clientOptions struct {
	dial, read, write *time.Duration
	retries, pool     *int
	password          *string
	tls               **tls.Config
}

// fill sets o from cfg: timeouts, retries and pool size, the password that
// replaces the URL's, and the TLS config (see withTLS).
func (cfg RedisConfig) fill(o clientOptions) error {
	*o.dial = orDefault(cfg.DialTimeout, 2*time.Second)
	*o.read = orDefault(cfg.ReadTimeout, time.Second)
	*o.write = orDefault(cfg.WriteTimeout, time.Second)
	*o.retries = cfg.MaxRetries
	if cfg.MaxRetries == 0 {
		*o.retries = -1
	}
	if cfg.PoolSize > 0 {
		*o.pool = cfg.PoolSize
	}
	if cfg.Password != "" {
		*o.password = cfg.Password
	}
	tc, err := withTLS(cfg, *o.tls)
	*o.tls = tc
	return err
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// parseURL classifies a Redis URL as "standalone", "cluster" or "sentinel"
// and rewrites it into the form go-redis's parser for that kind accepts.
func parseURL(raw string) (kind, rewritten string, err error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "", "", fmt.Errorf("region: redis URL %q: missing scheme", RedactURL(raw))
	}
	switch scheme {
	case "redis+sentinel", "rediss+sentinel":
		return parseSentinelURL(strings.TrimSuffix(scheme, "+sentinel"), rest)
	case "redis", "rediss":
	default:
		return "", "", fmt.Errorf("region: redis URL %q: scheme must be redis, rediss, redis+sentinel or rediss+sentinel", RedactURL(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("region: redis URL: %w", urlError(err))
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		return "sentinel", raw, nil
	case q.Has("cluster"):
		v := q.Get("cluster")
		q.Del("cluster")
		u.RawQuery = q.Encode()
		if b, err := strconv.ParseBool(v); err != nil {
			return "", "", fmt.Errorf("region: redis URL: cluster=%q: %w", v, err)
		} else if b {
			return "cluster", u.String(), nil
		}
		if q.Has("addr") {
			return "cluster", u.String(), nil
		}
		return "standalone", u.String(), nil
	case q.Has("addr"):
		return "cluster", raw, nil
	}
	return "standalone", raw, nil
}

// parseSentinelURL turns [user:pass@]h1:p1,h2:p2/master[/db][?query] into
// go-redis's failover URL form.
func parseSentinelURL(scheme, rest string) (string, string, error) {
	query := ""
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest, query = rest[:i], rest[i+1:]
	}
	hostsPart, path, _ := strings.Cut(rest, "/")
	userinfo := ""
	if i := strings.LastIndexByte(hostsPart, '@'); i >= 0 {
		userinfo, hostsPart = hostsPart[:i+1], hostsPart[i+1:]
	}
	hosts := strings.Split(hostsPart, ",")
	if hostsPart == "" || slices.Contains(hosts, "") {
		return "", "", fmt.Errorf("region: sentinel URL: no sentinel addresses")
	}
	parts := strings.Split(path, "/")
	if parts[0] == "" {
		return "", "", fmt.Errorf("region: sentinel URL: missing master name (%s+sentinel://host:port,.../mastername)", scheme)
	}
	if len(parts) > 2 {
		return "", "", fmt.Errorf("region: sentinel URL: path %q: want /mastername or /mastername/db", path)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", "", fmt.Errorf("region: sentinel URL: %w", err)
	}
	master, err := url.PathUnescape(parts[0])
	if err != nil {
		return "", "", fmt.Errorf("region: sentinel URL: %w", err)
	}
	q.Set("master_name", master)
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	out := scheme + "://" + userinfo + hosts[0]
	if len(parts) == 2 {
		out += "/" + parts[1]
	}
	return "sentinel", out + "?" + q.Encode(), nil
}

// urlError strips the URL from a url.Parse error (it may hold a password).
func urlError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redacted is what RedactURL puts in place of a secret, as url.Redacted
// does.
const redacted = "xxxxx"

// RedactURL returns raw, a Redis URL in any form the store accepts (or
// none), fit for a log line: the password of its user info and the value
// of every query parameter that may hold a secret (see [URLSecrets]) are
// replaced by "xxxxx". It does not need raw to parse: when it cannot tell
// where the user info ends, it masks everything up to the last "@".
func RedactURL(raw string) string {
	var b strings.Builder
	b.Grow(len(raw))
	forEachURLPart(raw, func(part string, secret bool) {
		if secret {
			b.WriteString(redacted)
		} else {
			b.WriteString(part)
		}
	})
	return b.String()
}

// URLSecrets returns the secrets raw holds, as written and percent-decoded:
// the password of its user info and the values of query parameters whose
// name holds "pass", "token", "secret" or "auth" (go-redis's password and
// sentinel_password among them).
func URLSecrets(raw string) []string {
	var out []string
	forEachURLPart(raw, func(part string, secret bool) {
		if !secret || part == "" {
			return
		}
		out = append(out, part)
		for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			if d, err := unescape(part); err == nil && !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	})
	return out
}

// forEachURLPart calls fn with the parts of raw in order, which concatenate
// to raw, marking those that are secret.
func forEachURLPart(raw string, fn func(part string, secret bool)) {
	rest := raw
	if i := strings.Index(rest, "://"); i >= 0 {
		fn(rest[:i+3], false)
		rest = rest[i+3:]
	}
	// The user info ends at the last "@": a password may hold "@", "/" or
	// "?" unescaped, and masking too much is safe.
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		user, pass, hasPass := strings.Cut(rest[:i], ":")
		if hasPass {
			fn(user+":", false)
			fn(pass, true)
		} else {
			fn(user, false) // a user name alone, no secret
		}
		rest = rest[i:]
	}
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		fn(rest, false)
		return
	}
	fn(rest[:q+1], false)
	for i, kv := range strings.Split(rest[q+1:], "&") {
		if i > 0 {
			fn("&", false)
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !secretParam(k) {
			fn(kv, false)
			continue
		}
		fn(k+"=", false)
		fn(v, true)
	}
}

// secretParam reports whether a query parameter named k may hold a secret.
func secretParam(k string) bool {
	if u, err := url.QueryUnescape(k); err == nil {
		k = u
	}
	k = strings.ToLower(k)
	for _, s := range []string{"pass", "token", "secret", "auth"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}
