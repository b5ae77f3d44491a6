package decision

import (
	"testing"

	"github.com/rlcluster/rlcluster/internal/api/rules"
)

// TestCounterKeysAreDistinct: keys chosen to look like another
// namespace's (or another rule's) counter keys never make the same store
// key as a different (namespace, rule, key).
func TestCounterKeysAreDistinct(t *testing.T) {
	type id struct {
		ns        Namespace
		rule, key string
		scope     rules.Scope
	}
	keys := []string{"alice", "api:alice", "r:api:alice", "f:api:alice", "i:alice", "e:d/k=v", "d/k=v", "rls/d/k=v", ":", "", "a:b:c",
		"li:alice", "lr:api:alice", "l", "lalice"}
	var ids []id
	for _, k := range keys {
		for _, sc := range []rules.Scope{rules.ScopeGlobal, rules.ScopeRegion} {
			ids = append(ids, id{Inline, "", k, sc}, id{Envoy, "", k, sc})
			for _, r := range []string{"api", "r", "a", "l"} {
				ids = append(ids, id{Rule, r, k, sc}, id{ForwardAuth, r, k, sc})
			}
		}
	}
	seen := map[string]id{}
	for _, x := range ids {
		k := counterKey(x.ns, x.rule, x.key, x.scope)
		if prev, dup := seen[k]; dup {
			t.Errorf("%+v and %+v both make the store key %q", prev, x, k)
		}
		seen[k] = x
	}
	// Envoy descriptors: escaping keeps domains and entries apart.
	descs := [][]string{{"d", "k", "v"}, {"d/k=v", "", ""}, {"d", "k=v", ""}, {"d", "k", "v/x=y"}, {"d%2F", "k", "v"}, {"d/", "k", "v"}}
	dseen := map[string]int{}
	for i, d := range descs {
		var es []rules.Entry
		if d[1] != "" {
			es = []rules.Entry{{Key: d[1], Value: d[2]}}
		}
		k := EnvoyKey(EnvoyDescriptor(d[0], es))
		if j, dup := dseen[k]; dup {
			t.Errorf("descriptors %v and %v both make %q", descs[j], d, k)
		}
		dseen[k] = i
	}
}

func TestMaxKeyBytesLeavesRoomForPrefix(t *testing.T) {
	long := string(make([]byte, MaxKeyBytes))
	name := string(make([]byte, rules.MaxNameBytes))
	for _, k := range []string{RuleKey(name, long), ForwardAuthKey(name, long), InlineKey(long), EnvoyKey(long)} {
		if len(k) > 4096 || len(RegionKey(k)) > 4096 {
			t.Errorf("store key of %d bytes, more than region.MaxKeyBytes", len(RegionKey(k)))
		}
	}
	// After a reset, a key counts under its generation: the longest
	// generation of the longest key fits exactly.
	if got, want := len(GenKey(counterKey(Rule, name, long, rules.ScopeRegion), 1<<53-1)), 4096; got != want {
		t.Errorf("longest rule key's generation = %d bytes, want exactly %d (MaxKeyBytes is as large as it can be)", got, want)
	}
	if got, want := len(ResetKey(counterKey(Rule, name, long, rules.ScopeRegion))), 4096; got > want {
		t.Errorf("longest reset key = %d bytes, more than %d", got, want)
	}
}
