package rules

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/rlcluster/rlcluster/internal/window"
)

// This file holds envoyproxy/ratelimit's configuration format, loaded
// unchanged: one domain per file, a tree of descriptors, each optionally
// carrying a rate limit.
//
//	domain: messaging
//	descriptors:
//	  - key: message_type
//	    value: marketing
//	    descriptors:
//	      - key: to_number          # no value: any value, each counted apart
//	        rate_limit:
//	          unit: day             # second, minute, hour, day or week
//	          requests_per_unit: 5
//	          algorithm: fixed_window  # rlcluster's addition; default sliding_window
//	          scope: region            # rlcluster's addition; default global
//	          strict: false            # rlcluster's addition, sliding_window only
//	          burst: 20                # rlcluster's addition, token_bucket only
//	  - key: to_number
//	    rate_limit: {unit: day, requests_per_unit: 100}
//	    shadow_mode: true
//	  - key: path
//	    value: files/*          # a wildcard: '*' matches any run of characters
//	    share_threshold: true   # every matching value counts under one counter
//	    rate_limit: {unit: minute, requests_per_unit: 100}
//	  - key: service
//	    value: service_1
//	    quota_mode: true        # over the limit only when every quota is
//	    rate_limit: {unit: minute, requests_per_unit: 1}
//	    metadata: {name: service_1}  # sent back while under the limit
//
// Matching follows envoyproxy/ratelimit: for each entry of a request's
// descriptor, the key and value are looked up in the current level (an
// exact key and value first, then the values holding a '*' wildcard, in
// file order, then the key alone); the limit applies only when the last
// entry lands on a descriptor with a rate_limit. A request descriptor with
// more or fewer entries than the configured depth matches nothing.

// envoyUnits maps envoyproxy/ratelimit's units to windows: month and
// year are calendar windows in UTC (fixed windows, as all of
// envoyproxy/ratelimit's are).
var envoyUnits = map[string]struct {
	unit   rlsv3.RateLimitResponse_RateLimit_Unit
	window time.Duration
	cal    window.CalendarUnit
}{
	"SECOND": {rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second, 0},
	"MINUTE": {rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute, 0},
	"HOUR":   {rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour, 0},
	"DAY":    {rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour, 0},
	"WEEK":   {rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour, 0},
	"MONTH":  {rlsv3.RateLimitResponse_RateLimit_MONTH, 0, window.CalendarMonth},
	"YEAR":   {rlsv3.RateLimitResponse_RateLimit_YEAR, 0, window.CalendarYear},
}

// EnvoyLimit is one configured rate_limit of an envoy-format descriptor,
// or a request's limit override.
type EnvoyLimit struct {
	// Stat names the limit in metrics: domain.key_value.key..., as
	// envoyproxy/ratelimit names its stats (value-less keys without a
	// value).
	Stat      string
	Name      string   // rate_limit.name, the target of other limits' replaces
	Replaces  []string // names this limit replaces when both match
	Unlimited bool
	Shadow    bool
	Unit      rlsv3.RateLimitResponse_RateLimit_Unit
	// Limit is the limit to decide against; Limit.Limit is
	// requests_per_unit and may be 0, which denies every request.
	Limit window.Limit
	// Scope says whose hits count (rate_limit.scope; default global).
	Scope Scope
	// QuotaMode is the descriptor's quota_mode: its denial alone does not
	// make the request over the limit; the request is over the limit when
	// every quota-mode descriptor of it is (or any other one is).
	QuotaMode bool
	// Metadata is the descriptor's metadata, returned in the response's
	// dynamic_metadata while the descriptor is under its limit; nil when
	// none is configured.
	Metadata *structpb.Struct
}

// descKey is a descriptor's key and value ("" for a value-less key).
type descKey struct{ key, value string }

// EnvoyUnit returns the unit and window of an envoyproxy/ratelimit unit
// name (SECOND, MINUTE, HOUR, DAY or WEEK, any case).
func EnvoyUnit(name string) (rlsv3.RateLimitResponse_RateLimit_Unit, time.Duration, bool) {
	u, ok := envoyUnits[strings.ToUpper(name)]
	return u.unit, u.window, ok
}

// descNode is one level of a domain's descriptor tree.
type descNode struct {
	children  map[descKey]*descNode
	wildcards []wildcardChild // values ending in '*', in file order
	limit     *EnvoyLimit
}

// wildcardChild is a descriptor whose value holds a '*'.
type wildcardChild struct {
	key, pattern string
	// share is share_threshold: every value the pattern matches counts
	// under one counter, the pattern's.
	share bool
	node  *descNode
}

func (n *descNode) leaf() bool { return len(n.children) == 0 && len(n.wildcards) == 0 }

// Domain is one envoy-format domain.
type Domain struct {
	name   string
	root   descNode
	limits int
	warns  []problem // valid limits that some clusters refuse (see Set.Warnings)
}

// Entry is one key/value pair of a request's descriptor.
type Entry struct {
	Key, Value string
	// Shared is set by [Domain.Match] on an entry that a wildcard with
	// share_threshold matched: Value is then the wildcard, which every
	// value it matches counts under.
	Shared bool
}

// Match returns the limit that applies to a request descriptor's entries,
// or nil when none does. An entry matched by a wildcard with
// share_threshold on the way is rewritten in place: its Value becomes the
// wildcard and Shared is set, so that the counter key built from the
// entries is the same for every value the wildcard matches.
func (d *Domain) Match(entries []Entry) *EnvoyLimit {
	n := &d.root
	for i := range entries {
		next := n.next(&entries[i])
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next.limit
		}
		if next.leaf() {
			return nil
		}
		n = next
	}
	return nil
}

// next returns the child of n that entry e leads to, or nil: the child of
// its key and value, else the first wildcard of its key that its value
// matches (rewriting e when the wildcard shares its counter, see
// [Domain.Match]), else the child of its key alone.
func (n *descNode) next(e *Entry) *descNode {
	if next := n.children[descKey{e.Key, e.Value}]; next != nil {
		return next
	}
	for _, w := range n.wildcards {
		if w.key == e.Key && MatchWildcard(w.pattern, e.Value) {
			if w.share {
				e.Value, e.Shared = w.pattern, true
			}
			return w.node
		}
	}
	return n.children[descKey{e.Key, ""}]
}

// matchSteps bounds the children MatchSet tries for one set of entries.
const matchSteps = 4096

// MatchSet matches entries that come without an order (the bucket_id of
// Envoy's rate limit quota service is a map): it returns the limit of the
// first order of every entry, trying them in the order given at each
// level, that [Domain.Match] finds one for, and the entries in that order
// (rewritten as Match rewrites them); nil when no order matches within a
// bounded search.
func (d *Domain) MatchSet(entries []Entry) (*EnvoyLimit, []Entry) {
	ordered := make([]Entry, 0, len(entries))
	used := make([]bool, len(entries))
	steps := 0
	var walk func(n *descNode) *EnvoyLimit
	walk = func(n *descNode) *EnvoyLimit {
		for i := range entries {
			if used[i] {
				continue
			}
			if steps++; steps > matchSteps {
				return nil
			}
			e := entries[i]
			next := n.next(&e)
			if next == nil {
				continue
			}
			used[i] = true
			ordered = append(ordered, e)
			if len(ordered) == len(entries) {
				if next.limit != nil {
					return next.limit
				}
			} else if !next.leaf() {
				if l := walk(next); l != nil {
					return l
				}
			}
			used[i] = false
			ordered = ordered[:len(ordered)-1]
		}
		return nil
	}
	if l := walk(&d.root); l != nil {
		return l, ordered
	}
	return nil, nil
}

// MatchWildcard reports whether value matches pattern, in which each '*'
// matches any run of characters, the empty one included ("files/*",
// "/api*v1", "svc*ep*rpc").
func MatchWildcard(pattern, value string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// envoyDescriptorYAML is one entry of a descriptors list.
type envoyDescriptorYAML struct {
	Key            string
	Value          string
	RateLimit      *envoyRateLimitYAML
	ShadowMode     bool
	ShareThreshold bool
	QuotaMode      bool
	Metadata       yaml.Node
	DetailedMetric bool // accepted; metrics only
	ValueToMetric  bool // accepted; metrics only
	Descriptors    []envoyDescriptorYAML

	line  int
	lines map[string]int // line of each field present
	probs []fieldProblem
}

// lineOf returns the line of field f, or of the descriptor when f is
// absent.
func (d *envoyDescriptorYAML) lineOf(f string) int {
	if l, ok := d.lines[f]; ok {
		return l
	}
	return d.line
}

// metadataStruct converts a descriptor's metadata, a mapping of any
// YAML values, to the Struct the response carries; nil when absent.
func metadataStruct(n *yaml.Node) (*structpb.Struct, error) {
	if n.Kind == 0 || n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, errors.New("must be a mapping")
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return nil, fmt.Errorf("must be a mapping with string keys: %v", err)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil, fmt.Errorf("must hold only strings, numbers, booleans, lists and mappings: %v", err)
	}
	return s, nil
}

type envoyRateLimitYAML struct {
	Unit            string
	RequestsPerUnit uint64
	Unlimited       bool
	Name            string
	Replaces        []envoyReplaceYAML
	Algorithm       string
	Scope           string
	Strict          bool
	Burst           uint64

	line  int
	lines map[string]int // line of each field present
	probs []fieldProblem
}

// lineOf returns the line of field f, or of the rate_limit when f is
// absent.
func (r *envoyRateLimitYAML) lineOf(f string) int {
	if l, ok := r.lines[f]; ok {
		return l
	}
	return r.line
}

type envoyReplaceYAML struct {
	Name string

	line  int
	probs []fieldProblem
}

// The envoy types decode their fields one by one (see decodeFields), so
// that every problem names its field and line; they never fail.

func (d *envoyDescriptorYAML) UnmarshalYAML(n *yaml.Node) error {
	d.line = n.Line
	d.lines = map[string]int{}
	d.probs = decodeFields(n, d.lines,
		field{"key", &d.Key}, field{"value", &d.Value}, field{"rate_limit", &d.RateLimit},
		field{"shadow_mode", &d.ShadowMode}, field{"share_threshold", &d.ShareThreshold},
		field{"quota_mode", &d.QuotaMode}, field{"metadata", &d.Metadata},
		field{"detailed_metric", &d.DetailedMetric},
		field{"value_to_metric", &d.ValueToMetric}, field{"descriptors", &d.Descriptors})
	return nil
}

func (r *envoyRateLimitYAML) UnmarshalYAML(n *yaml.Node) error {
	r.line = n.Line
	r.lines = map[string]int{}
	r.probs = decodeFields(n, r.lines,
		field{"unit", &r.Unit}, field{"requests_per_unit", &r.RequestsPerUnit}, field{"unlimited", &r.Unlimited},
		field{"name", &r.Name}, field{"replaces", &r.Replaces}, field{"algorithm", &r.Algorithm},
		field{"strict", &r.Strict}, field{"burst", &r.Burst},
		field{"scope", &r.Scope})
	return nil
}

func (r *envoyReplaceYAML) UnmarshalYAML(n *yaml.Node) error {
	r.line = n.Line
	r.probs = decodeFields(n, nil, field{"name", &r.Name})
	return nil
}

// problem is one problem found in a domain: its line and what is wrong,
// the field named by its path ("descriptors[0].rate_limit.unit: ...").
type problem struct {
	line int
	msg  string
}

// buildDomain checks an envoy-format domain and builds its tree. It
// returns every problem found, each naming the field and its line.
func buildDomain(name string, line int, descs []envoyDescriptorYAML) (*Domain, []problem) {
	d := &Domain{name: name}
	var bad []problem
	if name == "" {
		bad = append(bad, problem{line, "domain: required"})
	}
	d.root.children = make(map[descKey]*descNode)
	d.buildLevel(&d.root, descs, "descriptors", name, &bad)
	sort.SliceStable(bad, func(i, j int) bool { return bad[i].line < bad[j].line })
	return d, bad
}

func (d *Domain) buildLevel(parent *descNode, descs []envoyDescriptorYAML, path, stat string, bad *[]problem) {
	for i, y := range descs {
		p := fmt.Sprintf("%s[%d]", path, i)
		at := func(line int, field, format string, args ...any) {
			*bad = append(*bad, problem{line, fmt.Sprintf("%s%s: %s", p, field, fmt.Sprintf(format, args...))})
		}
		for _, u := range y.probs {
			*bad = append(*bad, problem{u.line, u.text(p)})
		}
		if y.Key == "" {
			if !hasProblem(y.probs, "key") {
				at(y.line, ".key", "required")
			}
			continue
		}
		s := stat + "." + y.Key
		if y.Value != "" {
			s += "_" + y.Value
		}
		n := &descNode{children: make(map[descKey]*descNode)}
		if y.ShareThreshold && !strings.Contains(y.Value, "*") {
			at(y.lineOf("share_threshold"), ".share_threshold", "applies to a wildcard value (one holding a '*'), not %q", y.Value)
		}
		if strings.Contains(y.Value, "*") {
			for _, w := range parent.wildcards {
				if w.key == y.Key && w.pattern == y.Value {
					at(y.line, "", "duplicate of another descriptor with key %q and value %q at this level", y.Key, y.Value)
				}
			}
			parent.wildcards = append(parent.wildcards, wildcardChild{key: y.Key, pattern: y.Value, share: y.ShareThreshold, node: n})
		} else {
			k := descKey{y.Key, y.Value}
			if _, dup := parent.children[k]; dup {
				at(y.line, "", "duplicate of another descriptor with key %q and value %q at this level", y.Key, y.Value)
			}
			parent.children[k] = n
		}
		if rl := y.RateLimit; rl != nil {
			rp := p + ".rate_limit"
			ok := len(rl.probs) == 0
			for _, u := range rl.probs {
				*bad = append(*bad, problem{u.line, u.text(rp)})
			}
			lim := &EnvoyLimit{Stat: s, Name: rl.Name, Unlimited: rl.Unlimited, Shadow: y.ShadowMode, QuotaMode: y.QuotaMode}
			if md, err := metadataStruct(&y.Metadata); err != nil {
				at(y.lineOf("metadata"), ".metadata", "%v", err)
				ok = false
			} else {
				lim.Metadata = md
			}
			for j, r := range rl.Replaces {
				rep := fmt.Sprintf("%s.replaces[%d]", rp, j)
				for _, u := range r.probs {
					*bad = append(*bad, problem{u.line, u.text(rep)})
					ok = false
				}
				switch {
				case hasProblem(r.probs, "name"):
				case r.Name == "":
					at(r.line, fmt.Sprintf(".rate_limit.replaces[%d].name", j), "required")
					ok = false
				case r.Name == rl.Name:
					at(r.line, fmt.Sprintf(".rate_limit.replaces[%d].name", j), "%q is this limit's own name", r.Name)
					ok = false
				default:
					lim.Replaces = append(lim.Replaces, r.Name)
				}
			}
			algo, err := window.ParseAlgorithm(rl.Algorithm)
			algoOK := err == nil
			if err != nil && !hasProblem(rl.probs, "algorithm") {
				at(rl.lineOf("algorithm"), ".rate_limit.algorithm", "%s", algorithmProblem(rl.Algorithm))
				ok = false
			}
			if rl.Strict && err == nil && !algo.Trails() {
				at(rl.lineOf("strict"), ".rate_limit.strict", "applies to sliding_window only, not %s", algo)
				ok = false
			}
			if _, set := rl.lines["burst"]; set && err == nil && !hasProblem(rl.probs, "burst") {
				if p := burstProblem(algo, rl.Burst, rl.RequestsPerUnit); p != "" {
					at(rl.lineOf("burst"), ".rate_limit.burst", "%s", p)
					ok = false
				}
			}
			scope, err := ParseScope(rl.Scope)
			if err != nil && !hasProblem(rl.probs, "scope") {
				at(rl.lineOf("scope"), ".rate_limit.scope", "%v", err)
				ok = false
			}
			lim.Scope = scope
			u, known := envoyUnits[strings.ToUpper(rl.Unit)]
			switch {
			case hasProblem(rl.probs, "unit") || hasProblem(rl.probs, "requests_per_unit"):
				ok = false
			case rl.Unlimited && rl.Unit != "":
				at(rl.lineOf("unit"), ".rate_limit.unit", "must not be set when unlimited is true")
				ok = false
			case rl.Unlimited:
			case rl.Unit == "":
				at(rl.lineOf("unit"), ".rate_limit.unit", "required (second, minute, hour, day, week, month or year)")
				ok = false
			case !known:
				at(rl.lineOf("unit"), ".rate_limit.unit", "%q is not second, minute, hour, day, week, month or year", rl.Unit)
				ok = false
			case u.cal != 0 && rl.Strict && algoOK && algo.Trails():
				at(rl.lineOf("strict"), ".rate_limit.strict", "unit %s is a calendar window, counted as fixed_window: strict does not apply", rl.Unit)
				ok = false
			case u.cal != 0 && algoOK && rl.Algorithm != "" && algo != window.FixedWindow:
				at(rl.lineOf("algorithm"), ".rate_limit.algorithm", "unit %s is a calendar window, counted as fixed_window, not %s", rl.Unit, algo)
				ok = false
			case rl.RequestsPerUnit > window.MaxLimit:
				at(rl.lineOf("requests_per_unit"), ".rate_limit.requests_per_unit", "must be at most 2^53, got %d", rl.RequestsPerUnit)
				ok = false
			case u.cal != 0:
				lim.Unit = u.unit
				lim.Limit = window.Limit{Limit: rl.RequestsPerUnit, Algorithm: window.FixedWindow, Calendar: window.Calendar{Unit: u.cal}}
			default:
				lim.Unit = u.unit
				lim.Limit = window.Limit{Limit: rl.RequestsPerUnit, Window: u.window, Algorithm: algo, Strict: rl.Strict, Burst: rl.Burst}
			}
			if ok {
				n.limit = lim
				d.limits++
				if !lim.Unlimited && RegionLocal(algo, scope) {
					f := "algorithm"
					if _, set := rl.lines["scope"]; set {
						f = "scope"
					}
					d.warns = append(d.warns, problem{rl.lineOf(f), fmt.Sprintf("%s.rate_limit.%s: %s", p, f, regionLocalWarning(algo))})
				}
			}
		}
		d.buildLevel(n, y.Descriptors, p+".descriptors", s, bad)
	}
}

// domainNames returns rs's envoy domains, sorted.
func (rs *Set) domainNames() []string {
	if rs == nil {
		return nil
	}
	out := make([]string, 0, len(rs.domains))
	for n := range rs.domains {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Domain returns the envoy domain called name, or nil.
func (rs *Set) Domain(name string) *Domain {
	if rs == nil {
		return nil
	}
	return rs.domains[name]
}
