package decision

import (
	"strings"

	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/region"
)

// Namespace is where a counter key lives. Every namespace's store keys
// start with a tag of their own, so no caller of one entry point can name
// a counter of another, whatever key it sends.
type Namespace uint8

// The namespaces.
const (
	// Inline keys are a caller's key with an inline limit: "i:" + key.
	Inline Namespace = iota + 1
	// Rule keys are a caller's key under a named rule through the Connect
	// API: "r:" + rule + ":" + key.
	Rule
	// ForwardAuth keys are a key derived from a proxy's request headers
	// under a named rule (the /check endpoint): "f:" + rule + ":" + key.
	ForwardAuth
	// Envoy keys are a descriptor of Envoy's rate-limit service:
	// "e:" + domain + "/" + key=value/... with '%', '/' and '=' escaped in
	// every part (see [EnvoyDescriptor]); an entry that a wildcard with
	// share_threshold matched is key=%*wildcard.
	Envoy
)

// The tags that start each namespace's keys. None is a prefix of another,
// and rule names hold no ':' (see [rules.CheckName]), so each store key
// has exactly one (namespace, rule, key) that makes it.
//
// A region-scoped limit's keys ([rules.ScopeRegion]) start with tagRegion
// before the namespace's tag ("li:alice"): no namespace's tag starts with
// it, so a region-scoped counter is never the same key's global counter,
// which other regions' totals merge into.
const (
	tagInline      = "i:"
	tagRule        = "r:"
	tagForwardAuth = "f:"
	tagEnvoy       = "e:"
	tagRegion      = "l"
)

// MaxPrefixBytes is the longest prefix a namespace adds to a caller's key:
// a reset generation's tag (see [GenKey]), the region tag, a namespace's
// tag, the longest rule name and its ':'.
const MaxPrefixBytes = maxGenPrefixBytes + len(tagRegion) + len(tagRule) + rules.MaxNameBytes + 1

// MaxKeyBytes is the largest bound on a caller's key (Config.MaxKeyBytes)
// that keeps every store key within [region.MaxKeyBytes], the longest key
// the stores keep and replication carries.
const MaxKeyBytes = region.MaxKeyBytes - MaxPrefixBytes

// InlineKey returns the store key of a caller's key with an inline limit.
func InlineKey(key string) string { return tagInline + key }

// RuleKey returns the store key of a caller's key under the named rule,
// through the Connect API.
func RuleKey(rule, key string) string { return tagRule + rule + ":" + key }

// ForwardAuthKey returns the store key of a key derived from a proxy's
// headers under the named rule, through the /check endpoint.
func ForwardAuthKey(rule, key string) string { return tagForwardAuth + rule + ":" + key }

// EnvoyDescriptor encodes a domain and a request descriptor's entries as
// domain + "/" + key=value/key=value..., each part escaped ('%' as %25,
// '/' as %2F, '=' as %3D) so that different descriptors never share a
// string. A Shared entry's value is "%*" + its wildcard, which no escaped
// value can be (an escaped '%' is followed by two hex digits), so a
// shared counter is never a single value's. Config.MaxKeyBytes bounds the
// result; [EnvoyKey] tags it.
func EnvoyDescriptor(domain string, entries []rules.Entry) string {
	_, d := EnvoyStoreKey(domain, entries)
	return d
}

// EnvoyStoreKey returns the store key [EnvoyKey]([EnvoyDescriptor](domain,
// entries)) and the descriptor, a substring of it, built in one allocation
// when nothing needs escaping (see Input.StoreKey).
func EnvoyStoreKey(domain string, entries []rules.Entry) (storeKey, descriptor string) {
	n := len(tagEnvoy) + len(domain)
	for _, e := range entries {
		n += 4 + len(e.Key) + len(e.Value)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(tagEnvoy)
	b.WriteString(escapeKeyPart(domain))
	for _, e := range entries {
		b.WriteByte('/')
		b.WriteString(escapeKeyPart(e.Key))
		b.WriteByte('=')
		if e.Shared {
			b.WriteString(sharedMark)
		}
		b.WriteString(escapeKeyPart(e.Value))
	}
	k := b.String()
	return k, k[len(tagEnvoy):]
}

// EnvoyKey returns the store key of an encoded descriptor
// ([EnvoyDescriptor]).
func EnvoyKey(descriptor string) string { return tagEnvoy + descriptor }

// RegionKey returns the store key of a region-scoped limit's counter,
// given the store key the same limit has with global scope.
func RegionKey(storeKey string) string { return tagRegion + storeKey }

// sharedMark starts the value of an entry matched by a wildcard with
// share_threshold.
const sharedMark = "%*"

var keyPartEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "=", "%3D")

func escapeKeyPart(s string) string { return keyPartEscaper.Replace(s) }

// counterKey returns the store key of key in namespace ns under rule,
// with scope sc; it makes the string in one allocation.
func counterKey(ns Namespace, rule, key string, sc rules.Scope) string {
	var p string
	if sc == rules.ScopeRegion {
		p = tagRegion
	}
	switch ns {
	case Rule:
		return p + tagRule + rule + ":" + key
	case ForwardAuth:
		return p + tagForwardAuth + rule + ":" + key
	case Envoy:
		return p + tagEnvoy + key
	default:
		return p + tagInline + key
	}
}
