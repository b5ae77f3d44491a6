package region

import (
	"crypto/tls"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestClientOptions: every URL form the package doc lists parses into the
// options of its kind (the client, the addresses, master and database,
// who authenticates where, TLS), and RedisConfig's settings fill them.
func TestClientOptions(t *testing.T) {
	type want struct {
		addrs          []string // Addr, Addrs or SentinelAddrs
		master         string
		db             int
		user, pass     string
		sentUser, sent string // the sentinels' user and password
		tlsHost        string // TLSConfig.ServerName; "" without TLS
	}
	for _, c := range []struct {
		url  string
		cfg  RedisConfig
		kind string
		want want
	}{
		{"redis://127.0.0.1:6379", RedisConfig{}, "*redis.Options", want{addrs: []string{"127.0.0.1:6379"}}},
		{"redis://rl:secret@h:6380/2", RedisConfig{}, "*redis.Options", want{addrs: []string{"h:6380"}, db: 2, user: "rl", pass: "secret"}},
		{"rediss://:secret@h:6380", RedisConfig{}, "*redis.Options", want{addrs: []string{"h:6380"}, pass: "secret", tlsHost: "h"}},
		{"redis://u:url@h:1", RedisConfig{Password: "cfg"}, "*redis.Options", want{addrs: []string{"h:1"}, user: "u", pass: "cfg"}},
		{"redis://h1:1?cluster=true", RedisConfig{}, "*redis.ClusterOptions", want{addrs: []string{"h1:1"}}},
		{"redis://h1:1?cluster=false", RedisConfig{}, "*redis.Options", want{addrs: []string{"h1:1"}}},
		{"redis://u:p@h1:1?addr=h2:2&addr=h3:3", RedisConfig{}, "*redis.ClusterOptions", want{addrs: []string{"h1:1", "h2:2", "h3:3"}, user: "u", pass: "p"}},
		{"redis://h1:1?cluster=true&addr=h2:2", RedisConfig{}, "*redis.ClusterOptions", want{addrs: []string{"h1:1", "h2:2"}}},
		{"rediss://h1:1?cluster=true", RedisConfig{}, "*redis.ClusterOptions", want{addrs: []string{"h1:1"}, tlsHost: "h1"}},
		{"redis+sentinel://s1:26379,s2:26379/mymaster", RedisConfig{}, "*redis.FailoverOptions",
			want{addrs: []string{"s1:26379", "s2:26379"}, master: "mymaster"}},
		{"redis+sentinel://u:p@s1:1,s2:2,s3:3/my%20master/3?dial_timeout=1s", RedisConfig{}, "*redis.FailoverOptions",
			want{addrs: []string{"s1:1", "s2:2", "s3:3"}, master: "my master", db: 3, user: "u", pass: "p", sentUser: "u", sent: "p"}},
		{"redis+sentinel://u:p@s1:1/m?password=master", RedisConfig{}, "*redis.FailoverOptions",
			want{addrs: []string{"s1:1"}, master: "m", pass: "master", sentUser: "u", sent: "p"}},
		{"redis+sentinel://s1:1/m", RedisConfig{Password: "cfg"}, "*redis.FailoverOptions",
			want{addrs: []string{"s1:1"}, master: "m", pass: "cfg", sent: "cfg"}},
		{"redis+sentinel://[::1]:1,[::1]:2/m", RedisConfig{}, "*redis.FailoverOptions", want{addrs: []string{"[::1]:1", "[::1]:2"}, master: "m"}},
		{"rediss+sentinel://s1:1,s2:2/m", RedisConfig{}, "*redis.FailoverOptions", want{addrs: []string{"s1:1", "s2:2"}, master: "m", tlsHost: "s1"}},
		{"redis://s1:1?master_name=m&addr=s2:2", RedisConfig{}, "*redis.FailoverOptions", want{addrs: []string{"s1:1", "s2:2"}, master: "m"}},
	} {
		c.cfg.URL = c.url
		o, err := clientOptions(c.cfg)
		if err != nil {
			t.Errorf("clientOptions(%q): %v", c.url, err)
			continue
		}
		var got want
		var tc *tls.Config
		switch o := o.(type) {
		case *redis.Options:
			got = want{addrs: []string{o.Addr}, db: o.DB, user: o.Username, pass: o.Password}
			tc = o.TLSConfig
		case *redis.ClusterOptions:
			got = want{addrs: o.Addrs, user: o.Username, pass: o.Password}
			tc = o.TLSConfig
		case *redis.FailoverOptions:
			got = want{addrs: o.SentinelAddrs, master: o.MasterName, db: o.DB, user: o.Username, pass: o.Password, sentUser: o.SentinelUsername, sent: o.SentinelPassword}
			tc = o.TLSConfig
		}
		if tc != nil {
			got.tlsHost = tc.ServerName
		}
		if kind := reflect.TypeOf(o).String(); kind != c.kind || !reflect.DeepEqual(got, c.want) {
			t.Errorf("clientOptions(%q) = %s %+v, want %s %+v", c.url, kind, got, c.kind, c.want)
		}
	}
}

// TestClientOptionsRefused: a URL that is not one of the forms, or that
// go-redis refuses, is an error that shows no secret.
func TestClientOptionsRefused(t *testing.T) {
	for _, c := range []struct {
		cfg  RedisConfig
		want string
	}{
		{RedisConfig{}, "region: redis: empty URL"},
		{RedisConfig{URL: "h:1"}, `region: redis URL "h:1": missing scheme`},
		{RedisConfig{URL: "http://u:secret@h:1"}, `region: redis URL "http://u:xxxxx@h:1": scheme must be redis, rediss, redis+sentinel or rediss+sentinel`},
		{RedisConfig{URL: "redis://h:1?cluster=maybe"}, `region: redis URL: cluster="maybe": strconv.ParseBool: parsing "maybe": invalid syntax`},
		{RedisConfig{URL: "redis://h:1?bogus=1"}, "region: parse redis URL: redis: unexpected option: bogus"},
		{RedisConfig{URL: "redis://h1:1?addr=h2:2&bogus=1"}, "region: parse cluster URL: redis: unexpected option: bogus"},
		{RedisConfig{URL: "redis+sentinel://s1:1"}, "region: sentinel URL: missing master name (redis+sentinel://host:port,.../mastername)"},
		{RedisConfig{URL: "redis+sentinel:///m"}, "region: sentinel URL: no sentinel addresses"},
		{RedisConfig{URL: "redis+sentinel://s1:1,/m"}, "region: sentinel URL: no sentinel addresses"},
		{RedisConfig{URL: "redis+sentinel://s1:1/m/1/2"}, "region: parse sentinel URL: redis: invalid URL path: /1/2"},
		{RedisConfig{URL: "redis+sentinel://s1:1/m/x"}, `region: parse sentinel URL: redis: invalid database number: "x"`},
		{RedisConfig{URL: "redis+sentinel://u:secret@s1:1/m?bogus=1"}, "region: parse sentinel URL: redis: unexpected option: bogus"},
		{RedisConfig{URL: "redis://h:1", TLSConfig: &tls.Config{}}, errTLSScheme.Error()},
	} {
		_, err := clientOptions(c.cfg)
		if err == nil || err.Error() != c.want {
			t.Errorf("clientOptions(%q) error = %v, want %q", c.cfg.URL, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("clientOptions(%q) error %q shows the password", c.cfg.URL, err)
		}
	}
}

// TestNewClientKinds: each kind of URL makes its kind of client.
func TestNewClientKinds(t *testing.T) {
	for _, tt := range []struct{ url, typ string }{
		{"redis://127.0.0.1:1", "*redis.Client"},
		{"redis://127.0.0.1:1?cluster=true&addr=127.0.0.1:2", "*redis.ClusterClient"},
		{"redis+sentinel://127.0.0.1:1,127.0.0.1:2/m", "*redis.Client"},
	} {
		c, err := newClient(RedisConfig{URL: tt.url})
		if err != nil {
			t.Errorf("newClient(%q): %v", tt.url, err)
			continue
		}
		if got := reflect.TypeOf(c).String(); got != tt.typ {
			t.Errorf("newClient(%q) = %s, want %s", tt.url, got, tt.typ)
		}
		c.Close()
	}
}

// TestRedactURL: every URL form the store accepts loses its password and
// any secret in its query before it is logged.
func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"redis://user:secret@host:6379/0", "redis://user:xxxxx@host:6379/0"},
		{"redis://:secret@host:6379", "redis://:xxxxx@host:6379"},
		{"redis://default@host:6379", "redis://default@host:6379"},
		{"rediss://user:p%2Fss%40w0rd@host:6379", "rediss://user:xxxxx@host:6379"},
		{"redis://user:hun@ter22@host", "redis://user:xxxxx@host"},
		{"redis://user:secret@host:notaport:x", "redis://user:xxxxx@host:notaport:x"},
		{"redis+sentinel://s1:26379,s2:26379/mymaster?password=secret", "redis+sentinel://s1:26379,s2:26379/mymaster?password=xxxxx"},
		{"redis+sentinel://u:secret@s1:26379,s2:26379/m/0?sentinel_password=other&dial_timeout=1s",
			"redis+sentinel://u:xxxxx@s1:26379,s2:26379/m/0?sentinel_password=xxxxx&dial_timeout=1s"},
		{"redis://h:1?master_name=m&addr=h2:2&sentinel_password=secret", "redis://h:1?master_name=m&addr=h2:2&sentinel_password=xxxxx"},
		{"redis://h:1?addr=h2:2&Password=secret&cluster=true", "redis://h:1?addr=h2:2&Password=xxxxx&cluster=true"},
		{"redis://h:1?auth_token=secret", "redis://h:1?auth_token=xxxxx"},
		{"redis://h:1?pass%77ord=secret", "redis://h:1?pass%77ord=xxxxx"},
		{"user:secret@host", "user:xxxxx@host"},
		{"redis://host:6379", "redis://host:6379"},
	} {
		got := RedactURL(c.in)
		if got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(got, "secret") || strings.Contains(got, "hun@ter") || strings.Contains(got, "w0rd") {
			t.Errorf("RedactURL(%q) = %q shows a secret", c.in, got)
		}
	}
}

func TestURLSecrets(t *testing.T) {
	got := URLSecrets("redis+sentinel://u:p%2Bss@s1:1,s2:2/m?sentinel_password=a%2Bb&db=0")
	for _, want := range []string{"p%2Bss", "p+ss", "a%2Bb", "a+b"} {
		if !slices.Contains(got, want) {
			t.Errorf("URLSecrets = %q, want it to hold %q", got, want)
		}
	}
	if got := URLSecrets("redis://default@host?db=1"); len(got) != 0 {
		t.Errorf("URLSecrets of a URL without secrets = %q", got)
	}
}
