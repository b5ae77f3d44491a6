package region_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/rlcluster/rlcluster/internal/region"
)

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
		got := region.RedactURL(c.in)
		if got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(got, "secret") || strings.Contains(got, "hun@ter") || strings.Contains(got, "w0rd") {
			t.Errorf("RedactURL(%q) = %q shows a secret", c.in, got)
		}
	}
}

func TestURLSecrets(t *testing.T) {
	got := region.URLSecrets("redis+sentinel://u:p%2Bss@s1:1,s2:2/m?sentinel_password=a%2Bb&db=0")
	for _, want := range []string{"p%2Bss", "p+ss", "a%2Bb", "a+b"} {
		if !slices.Contains(got, want) {
			t.Errorf("URLSecrets = %q, want it to hold %q", got, want)
		}
	}
	if got := region.URLSecrets("redis://default@host?db=1"); len(got) != 0 {
		t.Errorf("URLSecrets of a URL without secrets = %q", got)
	}
}
