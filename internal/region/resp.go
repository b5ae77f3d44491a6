package region

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A script's reply is read from its raw RESP bytes (redis.RawCmd) rather
// than from go-redis's parse of it, which boxes every integer and string
// of a nested reply in an interface: the counts of a reply are parsed
// straight into the decision's buckets.

// errMalformed is a reply that is not the RESP the scripts return.
var errMalformed = errors.New("malformed reply")

// respReader reads RESP values from raw reply bytes. Its first malformed
// value sets err; every read after it returns zero values.
type respReader struct {
	b   []byte
	err error
}

// header reads the line that starts the next value: its type byte and the
// rest of the line.
func (p *respReader) header() (byte, []byte) {
	i := bytes.IndexByte(p.b, '\n')
	if p.err != nil || i < 2 || p.b[i-1] != '\r' {
		p.fail()
		return 0, nil
	}
	t, line := p.b[0], p.b[1:i-1]
	p.b = p.b[i+1:]
	return t, line
}

func (p *respReader) fail() {
	if p.err == nil {
		p.err = errMalformed
	}
	p.b = nil
}

// length parses a header's length or integer.
func (p *respReader) length(line []byte) int64 {
	n, err := strconv.ParseInt(string(line), 10, 64)
	if err != nil {
		p.fail()
	}
	return n
}

// rest reads the rest of a value whose header was t and line: a bulk
// string's bytes (nil for a null one), or, for an aggregate, its elements.
func (p *respReader) rest(t byte, line []byte) []byte {
	switch t {
	case '$', '=', '!':
		n := p.length(line)
		if n < 0 {
			return nil
		}
		if n > int64(len(p.b))-2 || p.b[n] != '\r' || p.b[n+1] != '\n' {
			p.fail()
			return nil
		}
		s := p.b[:n]
		p.b = p.b[n+2:]
		return s
	case '*', '~', '>', '%', '|':
		n := p.length(line)
		if t == '%' || t == '|' {
			n *= 2
		}
		for ; n > 0 && p.err == nil; n-- {
			p.skip()
		}
		if t == '|' { // attributes precede the value they describe
			p.skip()
		}
	}
	return nil
}

// skip reads a value and drops it.
func (p *respReader) skip() {
	p.rest(p.header())
}

// raw reads a value and returns its bytes.
func (p *respReader) raw() []byte {
	b := p.b
	p.skip()
	return b[:len(b)-len(p.b)]
}

// int reads a value and returns it if it is an integer.
func (p *respReader) int() (int64, bool) {
	t, line := p.header()
	if t != ':' {
		p.rest(t, line)
		return 0, false
	}
	return p.length(line), p.err == nil
}

// str reads a value and returns it if it is a string.
func (p *respReader) str() ([]byte, bool) {
	t, line := p.header()
	switch t {
	case '$':
		s := p.rest(t, line)
		return s, s != nil
	case '+':
		return line, true
	}
	p.rest(t, line)
	return nil, false
}

// array reads the header of an array and returns its length; the
// elements follow. For any other value it reads the value and returns -1.
func (p *respReader) array() int {
	t, line := p.header()
	if t != '*' {
		p.rest(t, line)
		return -1
	}
	n := p.length(line)
	if n > int64(len(p.b)) { // each element takes at least a byte
		p.fail()
		return -1
	}
	return int(max(n, -1))
}

// rawReply returns the raw reply of cmd, made by Redis.evalsha with w, or
// its error: a connection's or an error reply (as a [redis.Error]).
func rawReply(cmd redis.Cmder, w *bytes.Buffer) ([]byte, error) {
	if err := cmd.Err(); err != nil {
		return nil, err
	}
	var v []byte
	switch cmd := cmd.(type) {
	case *redis.RawWriteToCmd:
		v = w.Bytes()
	case *redis.RawCmd:
		v = cmd.Val()
	case *redis.Cmd:
		v = appendRESP(nil, cmd.Val())
	}
	if len(v) > 0 && v[0] == '-' {
		return nil, scriptError(bytes.TrimSuffix(v[1:], []byte("\r\n")))
	}
	return v, nil
}

// appendRESP appends the RESP of v, a script's reply as go-redis parses it,
// to b.
func appendRESP(b []byte, v any) []byte {
	switch v := v.(type) {
	case int64:
		b = append(b, ':')
		b = strconv.AppendInt(b, v, 10)
	case string:
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, "\r\n"...)
		b = append(b, v...)
	case []any:
		b = append(b, '*')
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, "\r\n"...)
		for _, e := range v {
			b = appendRESP(b, e)
		}
		return b
	default: // nil, and the types no script returns
		b = append(b, "$-1"...)
	}
	return append(b, "\r\n"...)
}
