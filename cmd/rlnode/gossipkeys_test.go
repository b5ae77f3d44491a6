package main

import (
	"strings"
	"testing"
)

func TestDecodeGossipKeys(t *testing.T) {
	const a, b = "QUFBQUFBQUFBQUFBQUFBQQ==", "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=" // 16 and 32 bytes
	for _, tc := range []struct {
		name, in string
		want     []int // key lengths
		err      string
	}{
		{"one", a, []int{16}, ""},
		{"comma list", a + "," + b, []int{16, 32}, ""},
		{"file", "# rotated\n" + b + "\r\n\n" + a + "\n", []int{32, 16}, ""},
		{"empty", " , ", nil, "--gossip-key: no key"},
		{"bad first", "c2hvcnQ=," + a, nil, "--gossip-key: must be 16, 24 or 32 bytes, got 5"},
		{"bad second", a + ",not base64!", nil, "--gossip-key: key 2: not valid base64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := decodeGossipKeys(tc.in, "--gossip-key")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("decodeGossipKeys(%q) = %v, want an error containing %q", tc.in, err, tc.err)
				}
				if strings.Contains(err.Error(), a) {
					t.Errorf("error %q shows a key", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != len(tc.want) {
				t.Fatalf("got %d keys, want %d", len(keys), len(tc.want))
			}
			for i, k := range keys {
				if len(k) != tc.want[i] {
					t.Errorf("key %d: %d bytes, want %d", i+1, len(k), tc.want[i])
				}
			}
		})
	}
	var s secrets
	s.addKeys("# a comment line\n" + a + "," + b)
	if got := s.scrub("x " + a + " y # a comment line"); got != "x "+mask+" y # a comment line" {
		t.Errorf("scrub = %q, want the key masked and the comment kept", got)
	}
}
