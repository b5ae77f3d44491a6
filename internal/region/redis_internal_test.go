package region

import (
	"fmt"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		in, kind, out string
		err           bool
	}{
		{in: "redis://127.0.0.1:6379", kind: "standalone", out: "redis://127.0.0.1:6379"},
		{in: "rediss://u:p@h:6380/2", kind: "standalone", out: "rediss://u:p@h:6380/2"},
		{in: "redis://h1:1?cluster=true&addr=h2:2&addr=h3:3", kind: "cluster", out: "redis://h1:1?addr=h2%3A2&addr=h3%3A3"},
		{in: "redis://h1:1?cluster=true", kind: "cluster", out: "redis://h1:1"},
		{in: "redis://h1:1?addr=h2:2", kind: "cluster", out: "redis://h1:1?addr=h2:2"},
		{in: "redis://h1:1?cluster=false", kind: "standalone", out: "redis://h1:1"},
		{in: "redis://h1:1?master_name=m&addr=h2:2", kind: "sentinel", out: "redis://h1:1?master_name=m&addr=h2:2"},
		{in: "redis+sentinel://s1:26379,s2:26379/mymaster", kind: "sentinel", out: "redis://s1:26379?addr=s2%3A26379&master_name=mymaster"},
		{in: "rediss+sentinel://u:p@s1:1/m/3?dial_timeout=1s", kind: "sentinel", out: "rediss://u:p@s1:1/3?dial_timeout=1s&master_name=m"},
		{in: "redis+sentinel://s1:1", err: true},
		{in: "redis+sentinel:///m", err: true},
		{in: "redis+sentinel://s1:1,/m", err: true},
		{in: "redis+sentinel://s1:1/m/1/2", err: true},
		{in: "http://h:1", err: true},
		{in: "h:1", err: true},
		{in: "redis://h:1?cluster=maybe", err: true},
	}
	for _, tt := range tests {
		kind, out, err := parseURL(tt.in)
		if (err != nil) != tt.err {
			t.Errorf("parseURL(%q) error = %v, want error %v", tt.in, err, tt.err)
			continue
		}
		if kind != tt.kind || out != tt.out {
			t.Errorf("parseURL(%q) = %q, %q, want %q, %q", tt.in, kind, out, tt.kind, tt.out)
		}
	}
}

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
		if got := typeName(c); got != tt.typ {
			t.Errorf("newClient(%q) = %s, want %s", tt.url, got, tt.typ)
		}
		c.Close()
	}
	if _, err := newClient(RedisConfig{URL: "redis://h:1?bogus=1"}); err == nil {
		t.Errorf("unknown URL parameter: no error")
	}
}

func TestEscapeKeyIsInjective(t *testing.T) {
	keys := []string{"a}b", "a%7Db", "a%b", "a%25b", "a%257Db", "}", "%", "%%", "%7D", "{", "{}"}
	seen := map[string]string{}
	for _, k := range keys {
		ck := CounterKey(k, time.Minute, 5)
		if other, ok := seen[ck]; ok {
			t.Errorf("keys %q and %q share the Redis key %q", k, other, ck)
		}
		seen[ck] = k
		// The hash tag is the whole escaped key.
		tag := ck[len("rl:{"):]
		if i := indexByte(tag, '}'); i != len(escapeKey(k)) {
			t.Errorf("key %q: hash tag ends at %d in %q, want %d", k, i, ck, len(escapeKey(k)))
		}
	}
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
