package region

import (
	"testing"
	"time"
)

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
