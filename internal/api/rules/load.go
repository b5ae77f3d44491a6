package rules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/rlcluster/rlcluster/internal/window"
)

// ruleYAML is one native rule of a rules file:
//
//	rules:
//	  - name: api-per-user
//	    limit: 100
//	    window: 1m
//	    algorithm: sliding_window   # optional
//	    strict: false               # optional, sliding_window only
//	    burst: 20                   # optional, token_bucket only
//	    shadow_mode: false          # optional
//	    scope: global               # optional: global or region
//	    leasable: false             # optional: quota leases may hold it
//
// A file holds native rules or one envoyproxy/ratelimit domain (see
// envoy.go), not both.
type ruleYAML struct {
	Name       string
	Limit      uint64
	Window     string
	Calendar   string
	TimeZone   string
	Algorithm  string
	Strict     bool
	Burst      uint64
	ShadowMode bool
	Scope      string
	Leasable   bool
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
//	                               # sliding_window_two_bucket, fixed_window,
//	                               # token_bucket, sliding_log
//	    strict: true            # optional, sliding_window only: never more
//	                            # than the limit in a trailing window
//	    burst: 20               # optional, token_bucket only: the bucket's
//	                            # capacity (default: limit)
//	    shadow_mode: true       # optional: count, but always allow
//	    scope: region           # optional: global (default) or region
//
// or one envoyproxy/ratelimit domain, unchanged (domain, descriptors with
// key, value, rate_limit {unit, requests_per_unit, unlimited, name,
// replaces}, shadow_mode, share_threshold, quota_mode, metadata,
// detailed_metric, nested descriptors), plus an optional
// rate_limit.algorithm, rate_limit.strict, rate_limit.burst and
// rate_limit.scope.
//
// A limit with a region-local algorithm (token_bucket, sliding_log) and
// global scope is valid: the file does not know how many regions the
// cluster will have. It is listed in [Set.Warnings], and a request under
// it is refused while the cluster has more than one region. Envoy's rate-limit service uses domains;
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
	warns   []string
}

func newRulesBuilder() *rulesBuilder {
	return &rulesBuilder{
		ruleSrc: make(map[string]string),
		domains: make(map[string]*Domain),
		domSrc:  make(map[string]string),
	}
}

// add parses one file's bytes; file names it in problems ("" for none).
// Each problem starts with where it is (file:line, or "line N" without a
// file) and names the rule or descriptor and the field as the file spells
// them.
func (rb *rulesBuilder) add(file string, b []byte) {
	at := func(line int, format string, args ...any) {
		rb.errs = append(rb.errs, fmt.Errorf("%s: %s", location(file, line), fmt.Sprintf(format, args...)))
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		var line int
		if _, scanErr := fmt.Sscanf(msg, "line %d:", &line); scanErr == nil {
			at(line, "not valid YAML: %s", strings.TrimSpace(msg[strings.Index(msg, ":")+1:]))
			return
		}
		if file == "" {
			file = "rules"
		}
		rb.errs = append(rb.errs, fmt.Errorf("%s: not valid YAML: %s", file, msg))
		return
	}
	if len(root.Content) == 0 {
		return // an empty file: no rules
	}
	top := root.Content[0]
	const topWant = "rules, or domain and descriptors"
	if top.Kind != yaml.MappingNode {
		at(top.Line, "want a mapping with %s", topWant)
		return
	}
	var rulesNode, domainKey, domainNode, descsNode *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		switch k.Value {
		case "rules":
			rulesNode = v
		case "domain":
			domainKey, domainNode = k, v
		case "descriptors":
			descsNode = v
		default:
			at(k.Line, "unknown field %q (want %s)", k.Value, topWant)
		}
	}
	if rulesNode != nil && (domainNode != nil || descsNode != nil) {
		at(rulesNode.Line, "a file holds native rules or one envoy domain, not both (put them in separate files)")
		return
	}
	if domainNode != nil || descsNode != nil {
		rb.addDomain(file, top, domainKey, domainNode, descsNode, at)
		return
	}
	if rulesNode == nil || rulesNode.Tag == "!!null" {
		return
	}
	if rulesNode.Kind != yaml.SequenceNode {
		at(rulesNode.Line, "rules: must be a list of rules")
		return
	}
	for i, item := range rulesNode.Content {
		rb.addRule(file, i+1, item, at)
	}
}

// addRule checks the n-th (from 1) rule of a native rules file.
func (rb *rulesBuilder) addRule(file string, n int, item *yaml.Node, at func(int, string, ...any)) {
	var y ruleYAML
	lines := map[string]int{}
	probs := decodeFields(item, lines,
		field{"name", &y.Name}, field{"limit", &y.Limit}, field{"window", &y.Window},
		field{"calendar", &y.Calendar}, field{"time_zone", &y.TimeZone},
		field{"algorithm", &y.Algorithm}, field{"strict", &y.Strict}, field{"burst", &y.Burst},
		field{"shadow_mode", &y.ShadowMode}, field{"scope", &y.Scope}, field{"leasable", &y.Leasable})
	label := fmt.Sprintf("rule %d", n)
	if y.Name != "" {
		label = fmt.Sprintf("rule %d (%s)", n, y.Name)
	}
	lineOf := func(f string) int {
		if l, ok := lines[f]; ok {
			return l
		}
		return item.Line
	}
	bad := len(probs) > 0
	for _, p := range probs {
		at(p.line, "%s: %s", label, p.text(""))
	}
	fail := func(f, format string, args ...any) {
		at(lineOf(f), "%s: %s: %s", label, f, fmt.Sprintf(format, args...))
		bad = true
	}
	_, nameSet := lines["name"]
	_, limitSet := lines["limit"]
	switch {
	case !nameSet:
		fail("name", "required")
	case hasProblem(probs, "name"):
	case CheckName(y.Name) != nil:
		fail("name", "%v", CheckName(y.Name))
	default:
		if src, dup := rb.ruleSrc[y.Name]; dup {
			fail("name", "%q is already the name of %s", y.Name, src)
		} else {
			rb.ruleSrc[y.Name] = fmt.Sprintf("rule %d at %s", n, location(file, lineOf("name")))
		}
	}
	switch {
	case !limitSet:
		fail("limit", "required (1 to 2^53)")
	case hasProblem(probs, "limit"):
	case y.Limit < 1 || y.Limit > window.MaxLimit:
		fail("limit", "must be from 1 to 2^53, got %d", y.Limit)
	}
	var w time.Duration
	var cal window.Calendar
	_, calSet := lines["calendar"]
	_, windowSet := lines["window"]
	_, zoneSet := lines["time_zone"]
	switch {
	case calSet && windowSet:
		fail("calendar", "a rule has a window or a calendar, not both")
	case calSet && !hasProblem(probs, "calendar") && !hasProblem(probs, "time_zone"):
		c, err := window.ParseCalendar(y.Calendar, y.TimeZone)
		switch {
		case errors.Is(err, window.ErrTimeZone):
			fail("time_zone", "%q is not an IANA time zone such as UTC or Europe/Berlin", y.TimeZone)
		case err != nil:
			fail("calendar", "%q is not minute, hour, day, week, month or year", y.Calendar)
		default:
			cal = c
		}
	case zoneSet && !calSet:
		fail("time_zone", "applies to a calendar window only")
	}
	if !calSet && !windowSet {
		fail("window", "required (a Go duration such as 1s, 1m, 1h), or a calendar (minute, hour, day, week, month or year)")
	} else if !calSet && !hasProblem(probs, "window") {
		d, err := time.ParseDuration(y.Window)
		switch {
		case err != nil:
			fail("window", "%q is not a Go duration such as 1s, 1m, 1h", y.Window)
		case d < window.MinWindow || d > window.MaxWindow:
			fail("window", "must be from %s to %s, got %s", shortDuration(window.MinWindow), shortDuration(window.MaxWindow), y.Window)
		case d%time.Millisecond != 0:
			fail("window", "must be a whole number of milliseconds, got %s", y.Window)
		default:
			w = d
		}
	}
	algo, err := window.ParseAlgorithm(y.Algorithm)
	if err != nil && !hasProblem(probs, "algorithm") {
		fail("algorithm", "%s", algorithmProblem(y.Algorithm))
	}
	if _, set := lines["algorithm"]; calSet && set && err == nil && algo != window.FixedWindow {
		fail("algorithm", "a calendar window is counted as fixed_window, not %s", algo)
	} else if calSet {
		algo = window.FixedWindow
	}
	if y.Strict && err == nil && !algo.Trails() {
		fail("strict", "applies to sliding_window only, not %s", algo)
	}
	if _, set := lines["burst"]; set && !hasProblem(probs, "burst") && err == nil {
		if p := burstProblem(algo, y.Burst, y.Limit); p != "" {
			fail("burst", "%s", p)
		}
	}
	scope, err := ParseScope(y.Scope)
	if err != nil && !hasProblem(probs, "scope") {
		fail("scope", "%v", err)
	}
	if bad {
		return
	}
	if RegionLocal(algo, scope) {
		f := "algorithm"
		if _, set := lines["scope"]; set {
			f = "scope"
		}
		rb.warns = append(rb.warns, fmt.Sprintf("%s: %s: %s: %s", location(file, lineOf(f)), label, f, regionLocalWarning(algo)))
	}
	rb.rules = append(rb.rules, Rule{Name: y.Name, Limit: window.Limit{Limit: y.Limit, Window: w, Algorithm: algo, Strict: y.Strict, Burst: y.Burst, Calendar: cal}, Shadow: y.ShadowMode, Scope: scope, Leasable: y.Leasable})
}

// addDomain checks an envoyproxy/ratelimit domain file.
func (rb *rulesBuilder) addDomain(file string, top, domainKey, domainNode, descsNode *yaml.Node, at func(int, string, ...any)) {
	var name string
	line := top.Line
	if domainNode != nil {
		line = domainKey.Line
		if err := domainNode.Decode(&name); err != nil || domainNode.Kind != yaml.ScalarNode {
			at(domainNode.Line, "domain: must be a name")
			return
		}
	}
	var descs []envoyDescriptorYAML
	if descsNode != nil && descsNode.Tag != "!!null" {
		if descsNode.Kind != yaml.SequenceNode {
			at(descsNode.Line, "descriptors: must be a list of descriptors")
			return
		}
		if err := descsNode.Decode(&descs); err != nil {
			at(descsNode.Line, "descriptors: %v", err) // the envoy types never fail; kept for safety
			return
		}
	}
	d, bad := buildDomain(name, line, descs)
	for _, p := range bad {
		if name == "" {
			at(p.line, "%s", p.msg)
		} else {
			at(p.line, "domain %q: %s", name, p.msg)
		}
	}
	if name == "" {
		return
	}
	if src, dup := rb.domSrc[name]; dup {
		at(line, "domain %q: duplicate of the domain in %s", name, src)
	} else if len(bad) == 0 {
		rb.domains[name] = d
		rb.domSrc[name] = orStdin(file)
		for _, w := range d.warns {
			rb.warns = append(rb.warns, fmt.Sprintf("%s: domain %q: %s", location(file, w.line), name, w.msg))
		}
	}
}

// location says where a problem is: "file:line", or "line N" without a
// file.
func location(file string, line int) string {
	if file == "" {
		return fmt.Sprintf("line %d", line)
	}
	return fmt.Sprintf("%s:%d", file, line)
}

// burstProblem explains why burst cannot go with algo and limit, or
// returns "".
func burstProblem(algo window.Algorithm, burst, limit uint64) string {
	switch {
	case algo != window.TokenBucket:
		return fmt.Sprintf("applies to token_bucket only, not %s", algo)
	case burst < 1 || burst > window.MaxLimit:
		return fmt.Sprintf("must be from 1 to 2^53, got %d", burst)
	case limit > 0 && (burst/window.MaxBurstFactor > limit || (burst/window.MaxBurstFactor == limit && burst%window.MaxBurstFactor != 0)):
		return fmt.Sprintf("must be at most %d times the limit (%d), got %d", window.MaxBurstFactor, limit, burst)
	}
	return ""
}

// algorithmProblem explains an unknown algorithm name in the file's words.
func algorithmProblem(name string) string {
	return fmt.Sprintf("%q is not sliding_window, sliding_window_two_bucket, fixed_window, token_bucket or sliding_log", name)
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
	rs.warns = rb.warns
	return rs, nil
}
