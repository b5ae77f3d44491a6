package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/rlcluster/rlcluster/internal/window"
)

// Rule is a named limit that callers refer to by name instead of sending
// the limit inline. A rule's counters are kept apart from every other
// rule's: the counter key is the rule name, a colon and the caller's key.
type Rule struct {
	// Name identifies the rule in requests ([a-zA-Z0-9_.-], 1 to 128 bytes).
	Name string
	// Limit is the limit the rule applies.
	Limit window.Limit
}

// CounterKey returns the store key that counts key under r:
// r.Name + ":" + key.
func (r Rule) CounterKey(key string) string { return r.Name + ":" + key }

// Rules is an immutable set of rules, looked up by name. The zero value and
// nil hold no rules. A *Rules is safe for concurrent use; to change the rules
// in use, build a new set and swap it in with [Server.SetRules].
type Rules struct {
	byName map[string]Rule
}

// NewRules builds a rule set, checking every rule. The error lists every
// problem found, one per line.
func NewRules(rules []Rule) (*Rules, error) {
	rs := &Rules{byName: make(map[string]Rule, len(rules))}
	var errs []error
	for i, r := range rules {
		if err := checkRuleName(r.Name); err != nil {
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
func (rs *Rules) Lookup(name string) (Rule, bool) {
	if rs == nil {
		return Rule{}, false
	}
	r, ok := rs.byName[name]
	return r, ok
}

// Len returns the number of rules.
func (rs *Rules) Len() int {
	if rs == nil {
		return 0
	}
	return len(rs.byName)
}

// All returns the rules sorted by name.
func (rs *Rules) All() []Rule {
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

var ruleNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)

func checkRuleName(name string) error {
	if !ruleNameRE.MatchString(name) {
		return fmt.Errorf("%q must be 1 to 128 of a-z, A-Z, 0-9, '_', '.', '-'", name)
	}
	return nil
}

// ruleFile is the native YAML rules format:
//
//	rules:
//	  - name: api-per-user
//	    limit: 100
//	    window: 1m
//	    algorithm: sliding_window   # optional
type ruleFile struct {
	Rules []ruleYAML `yaml:"rules"`
}

type ruleYAML struct {
	Name      string `yaml:"name"`
	Limit     uint64 `yaml:"limit"`
	Window    string `yaml:"window"`
	Algorithm string `yaml:"algorithm"`
}

// LoadRules reads native rules from the YAML file at path; see [ParseRules].
func LoadRules(path string) (*Rules, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	}
	rs, err := ParseRules(b)
	if err != nil {
		return nil, fmt.Errorf("load rules from %s: %w", path, err)
	}
	return rs, nil
}

// ParseRules parses native rules from YAML:
//
//	rules:
//	  - name: api-per-user      # required, unique
//	    limit: 100              # 1 to 2^53
//	    window: 1m              # Go duration, 1s to 168h, whole milliseconds
//	    algorithm: sliding_window  # optional: sliding_window (default),
//	                               # fixed_window, token_bucket, sliding_log
//
// Unknown fields are errors. The error lists every problem found.
func ParseRules(b []byte) (*Rules, error) {
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parse rules: %w", err)
	}
	var (
		rules []Rule
		errs  []error
		seen  = make(map[string]int)
	)
	for i, y := range f.Rules {
		label := fmt.Sprintf("rule %d", i)
		if y.Name != "" {
			label = fmt.Sprintf("rule %d (%s)", i, y.Name)
		}
		var bad []string
		if y.Name == "" {
			bad = append(bad, "name: required")
		} else if err := checkRuleName(y.Name); err != nil {
			bad = append(bad, "name: "+err.Error())
		} else if j, dup := seen[y.Name]; dup {
			bad = append(bad, fmt.Sprintf("name: duplicate of rule %d", j))
		} else {
			seen[y.Name] = i
		}
		if y.Limit < 1 || y.Limit > window.MaxLimit {
			bad = append(bad, fmt.Sprintf("limit: must be from 1 to 2^53, got %d", y.Limit))
		}
		var w time.Duration
		if y.Window == "" {
			bad = append(bad, "window: required (a Go duration such as 1s, 1m, 1h)")
		} else if d, err := time.ParseDuration(y.Window); err != nil {
			bad = append(bad, fmt.Sprintf("window: %q is not a Go duration such as 1s, 1m, 1h", y.Window))
		} else if err := checkWindow(d); err != nil {
			bad = append(bad, "window: "+err.Error())
		} else {
			w = d
		}
		algo, err := window.ParseAlgorithm(y.Algorithm)
		if err != nil {
			bad = append(bad, "algorithm: "+err.Error())
		}
		if len(bad) > 0 {
			errs = append(errs, fmt.Errorf("%s: %s", label, strings.Join(bad, "; ")))
			continue
		}
		rules = append(rules, Rule{Name: y.Name, Limit: window.Limit{Limit: y.Limit, Window: w, Algorithm: algo}})
	}
	rs, err := NewRules(rules)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rs, nil
}

// checkWindow explains why d is not a valid window, or returns nil.
func checkWindow(d time.Duration) error {
	if d < window.MinWindow || d > window.MaxWindow {
		return fmt.Errorf("must be from %v to %v, got %v", window.MinWindow, window.MaxWindow, d)
	}
	if d%time.Millisecond != 0 {
		return fmt.Errorf("must be a whole number of milliseconds, got %v", d)
	}
	return nil
}
