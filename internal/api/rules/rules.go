// Package rules owns rate-limit rules: named native rules, envoyproxy/ratelimit
// domains (descriptor trees matched as Envoy's rate-limit service does), the
// YAML formats both are read from, and the [Reloader] that keeps a [Set]
// current with its files.
package rules

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// Rule is a named limit that callers refer to by name instead of sending
// the limit inline. A rule's counters are kept apart from every other
// rule's and from inline limits' (the API builds the counter keys).
type Rule struct {
	// Name identifies the rule in requests ([a-zA-Z0-9_.-], 1 to 128 bytes).
	Name string
	// Limit is the limit the rule applies.
	Limit window.Limit
	// Shadow decides and counts as usual but always answers allowed; what
	// would have been denied shows in metrics (outcome "shadow_denied")
	// and in the answer's retry_after, which is then above zero.
	Shadow bool
	// Scope says whose hits count: every region's (the zero value,
	// ScopeGlobal) or only the deciding region's.
	Scope Scope
	// Leasable lets quota leases hold the rule's keys (Envoy's rate limit
	// quota service, and the Go client's leases): the requests a lease
	// admits are decided before they arrive, which loosens the bound (see
	// docs/design.md, "Quota leases"), so a rule opts in.
	Leasable bool
}

// Set is an immutable set of rules: native rules looked up by name, and
// envoyproxy/ratelimit domains that Envoy's rate-limit service matches
// descriptors against. The zero value and nil hold no rules. A *Set is
// safe for concurrent use; to change the rules in use, build a new set and
// swap it in (the API server's SetRules).
type Set struct {
	byName  map[string]Rule
	domains map[string]*Domain
	warns   []string
}

// New builds a rule set, checking every rule. The error lists every
// problem found, one per line.
func New(rules []Rule) (*Set, error) {
	rs := &Set{byName: make(map[string]Rule, len(rules))}
	var errs []error
	for i, r := range rules {
		if err := CheckName(r.Name); err != nil {
			errs = append(errs, fmt.Errorf("rule %d: name: %w", i, err))
			continue
		}
		if _, dup := rs.byName[r.Name]; dup {
			errs = append(errs, fmt.Errorf("rule %d (%s): duplicate name", i, r.Name))
			continue
		}
		if err := r.Limit.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("rule %d (%s): %w", i, r.Name, err))
			continue
		}
		rs.byName[r.Name] = r
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rs, nil
}

// Lookup returns the rule called name.
func (rs *Set) Lookup(name string) (Rule, bool) {
	if rs == nil {
		return Rule{}, false
	}
	r, ok := rs.byName[name]
	return r, ok
}

// Len returns the number of native rules (not counting envoy domains).
func (rs *Set) Len() int {
	if rs == nil {
		return 0
	}
	return len(rs.byName)
}

// Limits returns the number of limits the rules define: native rules plus
// every envoy domain's limits. --max-rules bounds it.
func (rs *Set) Limits() int {
	if rs == nil {
		return 0
	}
	n := len(rs.byName)
	for _, d := range rs.domains {
		n += d.limits
	}
	return n
}

// All returns the native rules sorted by name.
func (rs *Set) All() []Rule {
	if rs == nil {
		return nil
	}
	out := make([]Rule, 0, len(rs.byName))
	for _, r := range rs.byName {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// MaxNameBytes is the longest rule name.
const MaxNameBytes = 128

var ruleNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

// CheckName explains why name is not a valid rule name (1 to MaxNameBytes
// of a-z, A-Z, 0-9, '_', '.', '-': never a ':' or a '/', which counter
// keys use as separators), or returns nil.
func CheckName(name string) error {
	if !ruleNameRE.MatchString(name) {
		return fmt.Errorf("%q must be 1 to 128 of a-z, A-Z, 0-9, '_', '.', '-'", name)
	}
	return nil
}

// Warnings lists, one line each and in file order, the limits of the rules
// files that are valid but will be refused in some clusters: a
// region-local algorithm with global scope, refused while the cluster has
// more than one region. Rules built by [New] have none.
func (rs *Set) Warnings() []string {
	if rs == nil {
		return nil
	}
	return rs.warns
}

// Summary describes the rules in one line, for logs and `rlnode validate`:
// "2 rules, 1 domain (messaging: 2 limits)".
func (rs *Set) Summary() string {
	names := rs.domainNames()
	s := fmt.Sprintf("%d %s, %d %s", rs.Len(), plural(rs.Len(), "rule", "rules"), len(names), plural(len(names), "domain", "domains"))
	if len(names) == 0 {
		return s
	}
	parts := make([]string, len(names))
	for i, n := range names {
		l := rs.domains[n].limits
		parts[i] = fmt.Sprintf("%s: %d %s", n, l, plural(l, "limit", "limits"))
	}
	return s + " (" + strings.Join(parts, "; ") + ")"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// shortDuration spells d as a rules file would: 168h, not 168h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// CheckWindow explains why d is not a valid window, or returns nil.
func CheckWindow(d time.Duration) error {
	if d < window.MinWindow || d > window.MaxWindow {
		return fmt.Errorf("must be from %v to %v, got %v", window.MinWindow, window.MaxWindow, d)
	}
	if d%time.Millisecond != 0 {
		return fmt.Errorf("must be a whole number of milliseconds, got %v", d)
	}
	return nil
}
