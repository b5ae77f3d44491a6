// Package rules owns rate-limit rules: named native rules, envoyproxy/ratelimit
// domains (descriptor trees matched as Envoy's rate-limit service does), the
// YAML formats both are read from, and the [Reloader] that keeps a [Set]
// current with its files.
package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

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
}

// Set is an immutable set of rules: native rules looked up by name, and
// envoyproxy/ratelimit domains that Envoy's rate-limit service matches
// descriptors against. The zero value and nil hold no rules. A *Set is
// safe for concurrent use; to change the rules in use, build a new set and
// swap it in (the API server's SetRules).
type Set struct {
	byName  map[string]Rule
	domains map[string]*Domain
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

// ruleFile is a rules file: native rules, or one envoyproxy/ratelimit
// domain (see envoy.go), not both.
//
//	rules:
//	  - name: api-per-user
//	    limit: 100
//	    window: 1m
//	    algorithm: sliding_window   # optional
//	    shadow_mode: false          # optional
type ruleFile struct {
	Rules       []ruleYAML            `yaml:"rules"`
	Domain      string                `yaml:"domain"`
	Descriptors []envoyDescriptorYAML `yaml:"descriptors"`
}

type ruleYAML struct {
	Name       string `yaml:"name"`
	Limit      uint64 `yaml:"limit"`
	Window     string `yaml:"window"`
	Algorithm  string `yaml:"algorithm"`
	ShadowMode bool   `yaml:"shadow_mode"`
}

// Load reads rules from path: a YAML file, or a directory whose
// *.yaml and *.yml files (not those starting with '.', not
// subdirectories) are read in name order, as envoyproxy/ratelimit reads
// one domain per file. Each file holds native rules or one envoy domain
// (see [Parse]). Rule names and domains must be unique across files.
// The error lists every problem in every file, one per line, each
// starting with the file's path.
func Load(path string) (*Set, error) {
	files, err := rulesFiles(path)
	if err != nil {
		return nil, err
	}
	b := newRulesBuilder()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("load rules: %w", err))
			continue
		}
		b.add(f, data)
	}
	return b.build()
}

// rulesFiles lists the files Load reads for path.
func rulesFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	}
	var files []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		p := filepath.Join(path, n)
		// Follow symlinks (Kubernetes ConfigMap volumes are made of them)
		// but skip directories.
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			continue
		}
		files = append(files, p)
	}
	return files, nil
}

// Parse parses one rules file from YAML, in either format.
//
// Native rules:
//
//	rules:
//	  - name: api-per-user      # required, unique
//	    limit: 100              # 1 to 2^53
//	    window: 1m              # Go duration, 1s to 168h, whole milliseconds
//	    algorithm: sliding_window  # optional: sliding_window (default),
//	                               # fixed_window, token_bucket, sliding_log
//	    shadow_mode: true       # optional: count, but always allow
//
// or one envoyproxy/ratelimit domain, unchanged (domain, descriptors with
// key, value, rate_limit {unit, requests_per_unit, unlimited, name,
// replaces}, shadow_mode, detailed_metric, nested descriptors), plus an
// optional rate_limit.algorithm. Envoy's rate-limit service uses domains;
// the Connect API uses native rules by name.
//
// Unknown fields are errors. The error lists every problem found.
func Parse(b []byte) (*Set, error) {
	rb := newRulesBuilder()
	rb.add("", b)
	return rb.build()
}

// rulesBuilder gathers the rules of one or more files and every problem
// found in them.
type rulesBuilder struct {
	rules   []Rule
	ruleSrc map[string]string // rule name -> where it was defined
	domains map[string]*Domain
	domSrc  map[string]string
	errs    []error
}

func newRulesBuilder() *rulesBuilder {
	return &rulesBuilder{
		ruleSrc: make(map[string]string),
		domains: make(map[string]*Domain),
		domSrc:  make(map[string]string),
	}
}

// add parses one file's bytes; file prefixes its problems ("" for none).
func (rb *rulesBuilder) add(file string, b []byte) {
	prefix := ""
	if file != "" {
		prefix = file + ": "
	}
	fail := func(format string, args ...any) {
		rb.errs = append(rb.errs, fmt.Errorf("%s%s", prefix, fmt.Sprintf(format, args...)))
	}
	var f ruleFile
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		fail("parse rules: %v", err)
		return
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			fail("parse rules: %v", err)
			return
		}
		for _, e := range te.Errors {
			fail("%s", e)
		}
	}
	envoy := f.Domain != "" || f.Descriptors != nil
	if envoy && f.Rules != nil {
		fail("a file holds native rules or one envoy domain, not both (put them in separate files)")
		return
	}
	if envoy {
		line := 1
		if len(root.Content) > 0 {
			line = root.Content[0].Line
			if m := root.Content[0]; m.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(m.Content); i += 2 {
					if m.Content[i].Value == "domain" {
						line = m.Content[i].Line
					}
				}
			}
		}
		d, bad := buildDomain(f.Domain, line, f.Descriptors)
		for _, p := range bad {
			fail("domain %q: %s", f.Domain, p)
		}
		if f.Domain != "" {
			if src, dup := rb.domSrc[f.Domain]; dup {
				fail("domain %q: duplicate of the domain in %s", f.Domain, src)
			} else if len(bad) == 0 {
				rb.domains[f.Domain] = d
				rb.domSrc[f.Domain] = orStdin(file)
			}
		}
		return
	}
	for i, y := range f.Rules {
		label := fmt.Sprintf("rule %d", i)
		if y.Name != "" {
			label = fmt.Sprintf("rule %d (%s)", i, y.Name)
		}
		var bad []string
		if y.Name == "" {
			bad = append(bad, "name: required")
		} else if err := CheckName(y.Name); err != nil {
			bad = append(bad, "name: "+err.Error())
		} else if src, dup := rb.ruleSrc[y.Name]; dup {
			bad = append(bad, "name: duplicate of "+src)
		} else {
			rb.ruleSrc[y.Name] = fmt.Sprintf("rule %d", i)
			if file != "" {
				rb.ruleSrc[y.Name] = fmt.Sprintf("rule %d in %s", i, file)
			}
		}
		if y.Limit < 1 || y.Limit > window.MaxLimit {
			bad = append(bad, fmt.Sprintf("limit: must be from 1 to 2^53, got %d", y.Limit))
		}
		var w time.Duration
		if y.Window == "" {
			bad = append(bad, "window: required (a Go duration such as 1s, 1m, 1h)")
		} else if d, err := time.ParseDuration(y.Window); err != nil {
			bad = append(bad, fmt.Sprintf("window: %q is not a Go duration such as 1s, 1m, 1h", y.Window))
		} else if err := CheckWindow(d); err != nil {
			bad = append(bad, "window: "+err.Error())
		} else {
			w = d
		}
		algo, err := window.ParseAlgorithm(y.Algorithm)
		if err != nil {
			bad = append(bad, "algorithm: "+err.Error())
		}
		if len(bad) > 0 {
			fail("%s: %s", label, strings.Join(bad, "; "))
			continue
		}
		rb.rules = append(rb.rules, Rule{Name: y.Name, Limit: window.Limit{Limit: y.Limit, Window: w, Algorithm: algo}, Shadow: y.ShadowMode})
	}
}

func orStdin(file string) string {
	if file == "" {
		return "another file"
	}
	return file
}

// build returns the rules, or every problem found.
func (rb *rulesBuilder) build() (*Set, error) {
	rs, err := New(rb.rules)
	if err != nil {
		rb.errs = append(rb.errs, err)
	}
	if len(rb.errs) > 0 {
		return nil, errors.Join(rb.errs...)
	}
	rs.domains = rb.domains
	return rs, nil
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
