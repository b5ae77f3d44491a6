package api

import (
	"bytes"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

// The request messages on the hot path (CheckRequest, PeekRequest and
// CheckBatchRequest) are decoded by hand when they have the plain shape
// clients send: known field names, strings without escapes or non-ASCII
// bytes, integers as plain digits (quoted or not), durations as
// "<digits>[.<digits>]s", algorithms by name. Anything else (unknown or
// repeated fields, nulls, escapes, exponents, ...) makes decodeFast report
// false and the caller uses protojson, which decides what it means or which
// error it is. FuzzFastJSONDecode holds every message decodeFast accepts to
// be the one protojson decodes from the same bytes.

// decodeFast decodes b into m, which must be freshly made; ok is false
// when m is not a message the fast path covers or b is not in the plain
// shape (m is then untouched).
func decodeFast(b []byte, m any) bool {
	ok, _ := decodeFastMax(b, m, -1)
	return ok
}

// decodeFastMax is decodeFast counting a CheckBatch's checks as it
// decodes them: over is true, and m untouched, at the first check past
// maxChecks (none when maxChecks is negative).
func decodeFastMax(b []byte, m any, maxChecks int) (ok, over bool) {
	switch m := m.(type) {
	case *ratelimitv1.CheckRequest:
		var f checkFields
		p := parser{b: b}
		if !p.whole(func() bool { return f.parse(&p) }) {
			return false, false
		}
		m.Key, m.Hits, m.Rule, m.Limit, m.OmitStats = f.key, f.hits, f.rule, f.limit(), f.omitStats
		return true, false
	case *ratelimitv1.PeekRequest:
		var f checkFields
		p := parser{b: b}
		if !p.whole(func() bool { return f.parse(&p) }) {
			return false, false
		}
		m.Key, m.Hits, m.Rule, m.Limit, m.OmitStats = f.key, f.hits, f.rule, f.limit(), f.omitStats
		return true, false
	case *ratelimitv1.CheckBatchRequest:
		var checks []*ratelimitv1.CheckRequest
		seen := false
		p := parser{b: b}
		ok := p.whole(func() bool {
			if seen || string(p.name()) != "checks" || !p.byte('[') {
				return false
			}
			seen = true
			if p.byte(']') {
				return true
			}
			for {
				if len(checks) == maxChecks {
					over = true
					return false
				}
				var f checkFields
				if !p.object(func() bool { return f.parse(&p) }) {
					return false
				}
				checks = append(checks, &ratelimitv1.CheckRequest{Key: f.key, Hits: f.hits, Rule: f.rule, Limit: f.limit(), OmitStats: f.omitStats})
				if p.byte(']') {
					return true
				}
				if !p.byte(',') {
					return false
				}
			}
		})
		if !ok {
			return false, over
		}
		m.Checks = checks
		return true, false
	}
	return false, false
}

// checkFields are the fields of a CheckRequest or PeekRequest.
type checkFields struct {
	key, rule       string
	hits            uint64
	omitStats       bool
	seen            uint8 // bit per field, to refuse repeats
	hasLimit        bool
	limitN          uint64
	hasWindow       bool
	windowSecs      int64
	windowNanos     int32
	algo            ratelimitv1.Algorithm
	scope           ratelimitv1.Scope
	strict          bool
	burst           uint64
	calendar        ratelimitv1.Calendar
	timeZone        string
	seenLimitFields uint8
}

func (f *checkFields) limit() *ratelimitv1.Limit {
	if !f.hasLimit {
		return nil
	}
	// The limit and its window in one allocation.
	m := new(struct {
		limit  ratelimitv1.Limit
		window durationpb.Duration
	})
	l := &m.limit
	l.Limit, l.Algorithm, l.Scope, l.Strict, l.Burst, l.Calendar, l.TimeZone = f.limitN, f.algo, f.scope, f.strict, f.burst, f.calendar, f.timeZone
	if f.hasWindow {
		m.window.Seconds, m.window.Nanos = f.windowSecs, f.windowNanos
		l.Window = &m.window
	}
	return l
}

// once marks bit in *seen and reports whether it was clear.
func once(seen *uint8, bit uint8) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// parse parses one member of a CheckRequest object. Each known member has
// a bit in f.seen; an unknown or repeated one is not ok.
func (f *checkFields) parse(p *parser) bool {
	var bit uint8
	var ok bool
	switch string(p.name()) {
	case "key":
		bit = 1
		f.key, ok = p.str()
	case "hits":
		bit = 2
		f.hits, ok = p.uint()
	case "rule":
		bit = 4
		f.rule, ok = p.str()
	case "limit":
		bit = 8
		f.hasLimit = true
		ok = p.object(func() bool { return f.parseLimit(p) })
	case "omitStats", "omit_stats":
		bit = 16
		f.omitStats, ok = p.boolean()
	}
	return ok && once(&f.seen, bit)
}

// parseLimit parses one member of a Limit object, as parse does with the
// bits of f.seenLimitFields.
func (f *checkFields) parseLimit(p *parser) bool {
	var bit uint8
	var ok bool
	switch string(p.name()) {
	case "limit":
		bit = 1
		f.limitN, ok = p.uint()
	case "window":
		bit = 2
		f.windowSecs, f.windowNanos, ok = p.duration()
		f.hasWindow = ok
	case "algorithm":
		bit = 4
		var v int32
		v, ok = p.enum(ratelimitv1.Algorithm_value)
		f.algo = ratelimitv1.Algorithm(v)
	case "scope":
		bit = 8
		var v int32
		v, ok = p.enum(ratelimitv1.Scope_value)
		f.scope = ratelimitv1.Scope(v)
	case "strict":
		bit = 16
		f.strict, ok = p.boolean()
	case "burst":
		bit = 32
		f.burst, ok = p.uint()
	case "calendar":
		bit = 64
		var v int32
		v, ok = p.enum(ratelimitv1.Calendar_value)
		f.calendar = ratelimitv1.Calendar(v)
	case "timeZone", "time_zone":
		bit = 128
		f.timeZone, ok = p.str()
	}
	return ok && once(&f.seenLimitFields, bit)
}

// boolean reads true or false.
func (p *parser) boolean() (bool, bool) {
	p.ws()
	switch {
	case bytes.HasPrefix(p.b[p.i:], []byte("true")):
		p.i += 4
		return true, true
	case bytes.HasPrefix(p.b[p.i:], []byte("false")):
		p.i += 5
		return false, true
	}
	return false, false
}

// parser reads plain JSON from b.
type parser struct {
	b []byte
	i int
}

// whole parses p's input as one object whose members member parses (from
// p), with nothing but whitespace after it. The members' parsers reach p
// through their closures: passed to a func value, p would escape to the
// heap.
func (p *parser) whole(member func() bool) bool {
	if !p.object(member) {
		return false
	}
	p.ws()
	return p.i == len(p.b)
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c after whitespace.
func (p *parser) byte(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *parser) colon() bool { return p.byte(':') }

// object parses {member, ...}, each member with member (which reads p).
func (p *parser) object(member func() bool) bool {
	if !p.byte('{') {
		return false
	}
	if p.byte('}') {
		return true
	}
	for {
		if !member() {
			return false
		}
		if p.byte('}') {
			return true
		}
		if !p.byte(',') {
			return false
		}
	}
}

// rawStr reads a string of printable ASCII without escapes and returns its
// contents, or nil.
func (p *parser) rawStr() []byte {
	if !p.byte('"') {
		return nil
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return p.b[start : p.i-1 : p.i-1]
		case c < ' ' || c == '\\' || c >= 0x7f:
			return nil
		}
		p.i++
	}
	return nil
}

// name reads an object member's key and the colon after it, and returns
// the key, or nil.
func (p *parser) name() []byte {
	k := p.rawStr()
	if k == nil || !p.colon() {
		return nil
	}
	return k
}

// enum reads a string naming a value of a proto enum (its generated
// <Enum>_value map); an unknown name is not ok.
func (p *parser) enum(names map[string]int32) (int32, bool) {
	s, ok := p.str()
	if !ok {
		return 0, false
	}
	v, ok := names[s]
	return v, ok
}

func (p *parser) str() (string, bool) {
	s := p.rawStr()
	if s == nil {
		return "", false
	}
	return string(s), true
}

// digits parses a decimal integer without sign, leading zeros or overflow.
func digits(s []byte) (uint64, bool) {
	if len(s) == 0 || len(s) > 20 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var n uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// uint reads a uint64 as plain digits, quoted or not.
func (p *parser) uint() (uint64, bool) {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '"' {
		s := p.rawStr()
		return digits(s)
	}
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	// A number must end here: a fraction or exponent is protojson's to judge.
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E', '-', '+':
			return 0, false
		}
	}
	return digits(p.b[start:p.i])
}

// duration reads "<secs>[.<frac>]s" with secs plain digits (at most 12)
// and 1 to 9 fraction digits.
func (p *parser) duration() (secs int64, nanos int32, ok bool) {
	s := p.rawStr()
	if len(s) < 2 || s[len(s)-1] != 's' {
		return 0, 0, false
	}
	s = s[:len(s)-1]
	whole, frac := s, []byte(nil)
	for i, c := range s {
		if c == '.' {
			whole, frac = s[:i], s[i+1:]
			if len(frac) == 0 || len(frac) > 9 {
				return 0, 0, false
			}
			break
		}
	}
	if len(whole) > 12 {
		return 0, 0, false
	}
	wholeSecs, ok := digits(whole)
	if !ok || wholeSecs >= 315_576_000_000 {
		return 0, 0, false
	}
	var fracNanos uint64
	for i := 0; i < 9; i++ {
		fracNanos *= 10
		if i < len(frac) {
			c := frac[i]
			if c < '0' || c > '9' {
				return 0, 0, false
			}
			fracNanos += uint64(c - '0')
		}
	}
	return int64(wholeSecs), int32(fracNanos), true
}
