package region

import (
	"cmp"
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
	o, err := clientOptions(cfg)
	if err != nil {
		return nil, err
	}
	switch o := o.(type) {
	case *redis.ClusterOptions:
		return redis.NewClusterClient(o), nil
	case *redis.FailoverOptions:
		return redis.NewFailoverClient(o), nil
	default:
		return redis.NewClient(o.(*redis.Options)), nil
	}
}

// clientOptions parses cfg.URL with go-redis's parser for its kind into
// *redis.Options, *redis.ClusterOptions or *redis.FailoverOptions, and
// fills them from cfg.
func clientOptions(cfg RedisConfig) (any, error) {
	if cfg.URL == "" {
		return nil, errors.New("region: redis: empty URL")
	}
	kind, u, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	// Each kind parses into its own options type; all of them get cfg's
	// settings through the same fill.
	switch kind {
	case "cluster":
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, fmt.Errorf("region: parse cluster URL: %w", urlError(err))
		}
		return o, cfg.fill(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.PoolSize, &o.Password, &o.TLSConfig)
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
		return o, cfg.fill(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.PoolSize, &o.Password, &o.TLSConfig)
	default:
		o, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("region: parse redis URL: %w", urlError(err))
		}
		return o, cfg.fill(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.PoolSize, &o.Password, &o.TLSConfig)
	}
}

// fill sets the fields that every kind of go-redis options has from cfg:
// timeouts, retries and pool size, the password that replaces the URL's,
// and the TLS config (see withTLS).
func (cfg RedisConfig) fill(dial, read, write *time.Duration, retries, pool *int, password *string, tc **tls.Config) error {
	*dial = cmp.Or(cfg.DialTimeout, 2*time.Second)
	*read = cmp.Or(cfg.ReadTimeout, time.Second)
	*write = cmp.Or(cfg.WriteTimeout, time.Second)
	*retries = cmp.Or(cfg.MaxRetries, -1)
	if cfg.PoolSize > 0 {
		*pool = cfg.PoolSize
	}
	*password = cmp.Or(cfg.Password, *password)
	var err error
	*tc, err = withTLS(cfg, *tc)
	return err
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
		u, err := sentinelURL(strings.TrimSuffix(scheme, "+sentinel"), rest)
		return "sentinel", u, err
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
		// go-redis has no cluster parameter: it is ours, and goes.
		v := q.Get("cluster")
		q.Del("cluster")
		u.RawQuery = q.Encode()
		if b, err := strconv.ParseBool(v); err != nil {
			return "", "", fmt.Errorf("region: redis URL: cluster=%q: %w", v, err)
		} else if b || q.Has("addr") {
			return "cluster", u.String(), nil
		}
		return "standalone", u.String(), nil
	case q.Has("addr"):
		return "cluster", raw, nil
	}
	return "standalone", raw, nil
}

// sentinelURL rewrites the rest of a redis+sentinel URL (scheme without
// "+sentinel"), [user:password@]s1:p1,s2:p2/master[/db][?query], into
// go-redis's failover form: scheme://[user:password@]s1:p1[/db]?query
// with master_name=master and addr=s2:p2. Only the list of sentinels is
// cut out by hand (url.Parse cannot read it); go-redis checks the rest.
func sentinelURL(scheme, rest string) (string, error) {
	end := len(rest)
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		end = i
	}
	at := strings.LastIndexByte(rest[:end], '@') + 1
	hosts := strings.Split(rest[at:end], ",")
	if slices.Contains(hosts, "") {
		return "", errors.New("region: sentinel URL: no sentinel addresses")
	}
	u, err := url.Parse(scheme + "://" + rest[:at] + hosts[0] + rest[end:])
	if err != nil {
		return "", fmt.Errorf("region: sentinel URL: %w", urlError(err))
	}
	master, db, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if master == "" {
		return "", fmt.Errorf("region: sentinel URL: missing master name (%s+sentinel://host:port,.../mastername)", scheme)
	}
	q := u.Query()
	q.Set("master_name", master)
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u.Path, u.RawPath, u.RawQuery = "", "", q.Encode()
	if db != "" {
		u.Path = "/" + db
	}
	return u.String(), nil
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
