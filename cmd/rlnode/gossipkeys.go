package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/rlcluster/rlcluster/internal/gossip"
)

// decodeGossipKeys decodes a list of base64 AES keys separated by commas
// or newlines (a --gossip-key value or a --gossip-key-file's contents);
// the first one encrypts, all decrypt. flag names the source in errors,
// which never repeat a key.
func decodeGossipKeys(s, flag string) ([][]byte, error) {
	var keys [][]byte
	for _, part := range splitKeyList(s) {
		key, err := decodeGossipKey(part)
		if err != nil {
			if len(keys) > 0 {
				return nil, fmt.Errorf("%s: key %d: %w", flag, len(keys)+1, err)
			}
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no key", flag)
	}
	return keys, nil
}

// gossipKeys returns the keys c gives, from --gossip-key or
// --gossip-key-file (nil for none), and marks them secret.
func gossipKeys(c config, sec *secrets) ([][]byte, error) {
	switch { // parseConfig refuses both at once
	case c.GossipKey != "":
		return decodeGossipKeys(c.GossipKey, "--gossip-key")
	case c.GossipKeyFile != "":
		b, err := os.ReadFile(c.GossipKeyFile)
		if err != nil {
			return nil, fmt.Errorf("read --gossip-key-file: %w", err)
		}
		sec.addKeys(string(b))
		return decodeGossipKeys(string(b), "--gossip-key-file")
	}
	return nil, nil
}

// watchGossipKeys makes SIGHUP re-read --gossip-key-file into node's
// keyring (gossip.Node.SetKeys): rotate keys by rewriting the file on
// every node and sending SIGHUP, once per step ([old,new], [new,old],
// [new]).
func watchGossipKeys(c config, sec *secrets, node *gossip.Node, rl *reloaders) {
	if c.GossipKeyFile == "" || node == nil {
		return
	}
	rl.add("gossip keys", func() error {
		keys, err := gossipKeys(c, sec)
		if err != nil {
			return err
		}
		return node.SetKeys(keys)
	})
}

// addKeys marks every key of a key list secret.
func (s *secrets) addKeys(list string) { s.add(splitKeyList(list)...) }

// splitKeyList returns the keys of a list separated by commas or newlines,
// trimmed, without empty entries and "#" comments.
func splitKeyList(list string) []string {
	var out []string
	for _, part := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if part = strings.TrimSpace(part); part != "" && !strings.HasPrefix(part, "#") {
			out = append(out, part)
		}
	}
	return out
}
