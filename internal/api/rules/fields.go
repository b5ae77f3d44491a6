package rules

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// field is one key of a YAML mapping and where its value goes.
type field struct {
	name string
	ptr  any
}

// fieldProblem is a problem with one field of a mapping: field is "" for
// a problem with the mapping itself (an unknown key, not a mapping).
type fieldProblem struct {
	line  int
	field string
	msg   string
}

// text says the problem, its field named after path (path "" for a
// native rule's fields, "descriptors[0].rate_limit" for an envoy one).
func (p fieldProblem) text(path string) string {
	switch {
	case p.field == "" && path == "":
		return p.msg
	case p.field == "":
		return path + ": " + p.msg
	case path == "":
		return p.field + ": " + p.msg
	}
	return path + "." + p.field + ": " + p.msg
}

func hasProblem(ps []fieldProblem, f string) bool {
	for _, p := range ps {
		if p.field == f {
			return true
		}
	}
	return false
}

// decodeFields decodes mapping n's values into fields one by one, so that
// a value of the wrong type is told by its field's name and line rather
// than as a Go type, and a key that is not a field is an unknown field.
// lines, when not nil, receives the line of each field present.
func decodeFields(n *yaml.Node, lines map[string]int, fields ...field) []fieldProblem {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	if len(names) == 1 {
		want = names[0]
	}
	if n.Kind != yaml.MappingNode {
		return []fieldProblem{{line: n.Line, msg: "must be a mapping of " + want}}
	}
	var out []fieldProblem
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var f *field
		for j := range fields {
			if fields[j].name == k.Value {
				f = &fields[j]
			}
		}
		if f == nil {
			out = append(out, fieldProblem{line: k.Line, msg: fmt.Sprintf("unknown field %q (want %s)", k.Value, want)})
			continue
		}
		if lines != nil {
			lines[f.name] = v.Line
		}
		if err := v.Decode(f.ptr); err != nil {
			out = append(out, fieldProblem{line: v.Line, field: f.name, msg: wantType(f.ptr, v)})
		}
	}
	return out
}

// wantType says what a field of ptr's type wants, given value v.
func wantType(ptr any, v *yaml.Node) string {
	got := "a list"
	switch {
	case v.Kind == yaml.MappingNode:
		got = "a mapping"
	case v.Kind == yaml.ScalarNode:
		got = strconv.Quote(v.Value)
	}
	switch ptr.(type) {
	case *uint64:
		return "must be a whole number, got " + got
	case *bool:
		return "must be true or false, got " + got
	case *string:
		return "must be a single value, got " + got
	case *[]envoyDescriptorYAML:
		return "must be a list of descriptors, got " + got
	case *[]envoyReplaceYAML:
		return "must be a list of {name: ...}, got " + got
	case **envoyRateLimitYAML:
		return "must be a mapping (unit, requests_per_unit, ...), got " + got
	}
	return "has the wrong type: " + got
}
