package gossip

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// Gossip encryption keys and their rotation.
//
// A node started with Config.SecretKey or Config.SecretKeys holds a
// keyring: memberlist encrypts every packet and stream with the primary
// key (AES-GCM) and tries every installed key to decrypt. A node started
// without a key never encrypts and cannot start later: turning encryption
// on is a restart of the whole pool.
//
// Rotating from key A to key B without losing a member:
//
//  1. On every node, install B (keys [A, B]: A encrypts, both decrypt).
//  2. Once every node holds B, make B primary everywhere (keys [B, A]).
//     Nodes still on A as primary are understood, since all hold A.
//  3. Once every node uses B, remove A everywhere (keys [B]). A node that
//     only knows A is now refused.
//
// Each step must reach every node before the next starts. rlnode does it
// by rewriting its --gossip-key-file and sending SIGHUP (SetKeys), or by
// restarting nodes with the new list; a library user calls InstallKey,
// UseKey and RemoveKey.

// ErrNoEncryption is returned by the key methods of a node started without
// a key.
var ErrNoEncryption = errors.New("gossip: encryption is off (the node started without a key)")

// CheckKey reports whether k is a valid AES key for gossip encryption:
// 16, 24 or 32 bytes (AES-128, -192 or -256).
func CheckKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("must be 16, 24 or 32 bytes, got %d", len(k))
}

// keys returns the configured keys, primary first, without duplicates.
func (c Config) keys() [][]byte {
	var out [][]byte
	add := func(k []byte) {
		for _, o := range out {
			if bytes.Equal(o, k) {
				return
			}
		}
		out = append(out, append([]byte(nil), k...))
	}
	if len(c.SecretKey) > 0 {
		add(c.SecretKey)
	}
	for _, k := range c.SecretKeys {
		add(k)
	}
	return out
}

// KeyFingerprint names a key in logs and status pages without revealing
// it: the first 8 bytes of its SHA-256, in hex.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// Encrypted reports whether the node encrypts gossip.
func (n *Node) Encrypted() bool { return n.keys != nil }

// Keys returns the fingerprints (KeyFingerprint) of the installed keys,
// the primary first; nil without encryption.
func (n *Node) Keys() []string {
	if n.keys == nil {
		return nil
	}
	primary := n.keys.GetPrimaryKey()
	out := []string{KeyFingerprint(primary)}
	for _, k := range n.keys.GetKeys() {
		if !bytes.Equal(k, primary) {
			out = append(out, KeyFingerprint(k))
		}
	}
	return out
}

// InstallKey adds key to the keyring: it decrypts from now on; the
// primary key still encrypts. Installing a key twice is a no-op.
func (n *Node) InstallKey(key []byte) error {
	if n.keys == nil {
		return ErrNoEncryption
	}
	if err := CheckKey(key); err != nil {
		return fmt.Errorf("gossip: install key: %w", err)
	}
	if err := n.keys.AddKey(key); err != nil {
		return fmt.Errorf("gossip: install key: %w", err)
	}
	n.log.Info("gossip key installed", "key", KeyFingerprint(key))
	return nil
}

// UseKey makes an installed key the primary, the one that encrypts.
func (n *Node) UseKey(key []byte) error {
	if n.keys == nil {
		return ErrNoEncryption
	}
	if !n.hasKey(key) {
		return fmt.Errorf("gossip: use key %s: not installed", KeyFingerprint(key))
	}
	if err := n.keys.UseKey(key); err != nil {
		return fmt.Errorf("gossip: use key %s: %w", KeyFingerprint(key), err)
	}
	n.log.Info("gossip key in use", "key", KeyFingerprint(key))
	return nil
}

// RemoveKey removes a key that is not the primary; packets encrypted with
// it are refused from then on. Removing a key not installed is a no-op.
func (n *Node) RemoveKey(key []byte) error {
	if n.keys == nil {
		return ErrNoEncryption
	}
	if bytes.Equal(key, n.keys.GetPrimaryKey()) {
		return fmt.Errorf("gossip: remove key %s: it is the primary key; use another first", KeyFingerprint(key))
	}
	if err := n.keys.RemoveKey(key); err != nil {
		return fmt.Errorf("gossip: remove key %s: %w", KeyFingerprint(key), err)
	}
	n.log.Info("gossip key removed", "key", KeyFingerprint(key))
	return nil
}

// SetKeys makes the keyring hold exactly keys, the first primary: it
// installs the new ones, uses the first, then removes the others. keys
// are checked first, so a bad list changes nothing.
func (n *Node) SetKeys(keys [][]byte) error {
	if n.keys == nil {
		return ErrNoEncryption
	}
	if len(keys) == 0 {
		return errors.New("gossip: set keys: empty list (encryption cannot be turned off at run time)")
	}
	for i, k := range keys {
		if err := CheckKey(k); err != nil {
			return fmt.Errorf("gossip: set keys: key %d: %w", i+1, err)
		}
	}
	for _, k := range keys {
		if !n.hasKey(k) {
			if err := n.InstallKey(k); err != nil {
				return err
			}
		}
	}
	if !bytes.Equal(keys[0], n.keys.GetPrimaryKey()) {
		if err := n.UseKey(keys[0]); err != nil {
			return err
		}
	}
	for _, old := range n.keys.GetKeys() {
		keep := false
		for _, k := range keys {
			keep = keep || bytes.Equal(k, old)
		}
		if !keep {
			if err := n.RemoveKey(old); err != nil {
				return err
			}
		}
	}
	return nil
}

func (n *Node) hasKey(key []byte) bool {
	for _, k := range n.keys.GetKeys() {
		if bytes.Equal(k, key) {
			return true
		}
	}
	return false
}
