package rules

import (
	"fmt"

	"github.com/rlcluster/rlcluster/internal/window"
)

// Scope says whose hits a limit counts. The zero value is ScopeGlobal.
type Scope uint8

// The scopes.
const (
	// ScopeGlobal is one limit for the whole cluster: a region decides on
	// the sum of every region's counts, which gossip replicates. Only the
	// counter algorithms ([window.Algorithm.Counted]) replicate, so a
	// region-local algorithm with ScopeGlobal is refused while the cluster
	// has more than one region (see [RegionLocal]).
	ScopeGlobal Scope = iota
	// ScopeRegion is one limit per region: a region counts only its own
	// hits, under counters apart from the global ones, and replicates
	// nothing. R regions together admit up to R times the limit.
	ScopeRegion
)

// String returns the scope's name as rules files spell it.
func (s Scope) String() string {
	switch s {
	case ScopeGlobal:
		return "global"
	case ScopeRegion:
		return "region"
	}
	return fmt.Sprintf("Scope(%d)", uint8(s))
}

// ParseScope parses a rules file's scope; "" means ScopeGlobal.
func ParseScope(s string) (Scope, error) {
	switch s {
	case "", "global":
		return ScopeGlobal, nil
	case "region":
		return ScopeRegion, nil
	}
	return 0, fmt.Errorf("%q is not global or region", s)
}

// RegionLocal reports whether a limit counted by a with scope s needs the
// other regions' counts that a does not replicate: a region-local
// algorithm (token_bucket, sliding_log) with ScopeGlobal. Such a limit is
// fine in a cluster of one region and refused in one of more.
func RegionLocal(a window.Algorithm, s Scope) bool {
	return s == ScopeGlobal && !a.Counted()
}

// regionLocalWarning is the warning of a rules file's limit for which
// RegionLocal holds.
func regionLocalWarning(a window.Algorithm) string {
	return fmt.Sprintf("%s is region-local and scope is global: accepted while the cluster has one region, "+
		"refused (invalid_argument) while it has more; set scope: region for one limit per region, "+
		"or use sliding_window or fixed_window for one global limit", a)
}
