package region

import (
	"context"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"
)

// readAll reads one value of p back into the shape go-redis parses it to:
// int64, string, nil or []any.
func readAll(p *respReader) any {
	r := *p
	if n := r.array(); n >= 0 && r.err == nil {
		*p = r
		out := make([]any, n)
		for i := range out {
			out[i] = readAll(p)
		}
		return out
	}
	r = *p
	if n, ok := r.int(); ok {
		*p = r
		return n
	}
	r = *p
	if s, ok := r.str(); ok {
		*p = r
		return string(s)
	}
	p.skip()
	return nil
}

func TestRespReaderRoundTrip(t *testing.T) {
	for _, v := range []any{
		int64(0), int64(-7), int64(1) << 62, "", "local", "a\r\nb", nil,
		[]any{}, []any{int64(1), "x", nil, []any{"local", "3", "local:t", "\x01\x02\r\n"}},
	} {
		b := appendRESP(nil, v)
		p := respReader{b: b}
		if got := readAll(&p); !reflect.DeepEqual(got, v) || p.err != nil || len(p.b) != 0 {
			t.Errorf("read %q = %#v (err %v, %d bytes left), want %#v", b, got, p.err, len(p.b), v)
		}
	}
}

func TestRespReaderSkipsOtherTypes(t *testing.T) {
	// RESP3 values no script returns are read past, not misread.
	b := []byte("*6\r\n_\r\n#f\r\n,1.5\r\n%1\r\n+k\r\n:1\r\n~1\r\n$1\r\nx\r\n:9\r\n")
	p := respReader{b: b}
	if got, want := p.array(), 6; got != want {
		t.Fatalf("array() = %d, want %d", got, want)
	}
	for range 5 {
		if _, ok := p.int(); ok {
			t.Errorf("int() ok on a value that is not an integer")
		}
	}
	if n, ok := p.int(); !ok || n != 9 || p.err != nil {
		t.Errorf("int() = %d, %v (err %v), want 9, true", n, ok, p.err)
	}
}

func TestRespReaderMalformed(t *testing.T) {
	for _, b := range []string{
		"", ":1", ":x\r\n", "$5\r\nab\r\n", "$2\r\nabcd\r\n", "*3\r\n:1\r\n", "*99999999999\r\n", "\r\n",
	} {
		p := respReader{b: []byte(b)}
		p.skip()
		p.skip()
		if p.err == nil {
			t.Errorf("reading %q: no error", b)
		}
	}
}

// An array longer than its reply can hold is malformed, and array()
// returns -1 for it, so that no caller sizes a slice by it.
func TestRespReaderArrayTooLong(t *testing.T) {
	p := respReader{b: []byte("*99999999999\r\n:1\r\n")}
	if n := p.array(); n != -1 || p.err == nil {
		t.Errorf("array() = %d (err %v), want -1 and an error", n, p.err)
	}
}

func FuzzRespReader(f *testing.F) {
	f.Add([]byte("*6\r\n:1\r\n:5\r\n:1700000000000\r\n*2\r\n$5\r\nlocal\r\n$1\r\n3\r\n$5\r\nlocal\r\n$2\r\n12\r\n"))
	f.Add([]byte("*2\r\n$2\r\n10\r\n$3\r\nerr\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := respReader{b: b}
		v := readAll(&p)
		if p.err != nil {
			return
		}
		// What reads well reads the same once written again.
		q := respReader{b: appendRESP(nil, v)}
		if got := readAll(&q); !reflect.DeepEqual(got, v) || q.err != nil {
			t.Errorf("read %q = %#v, written and read again %#v (err %v)", b, v, got, q.err)
		}
	})
}

func TestRawReply(t *testing.T) {
	ctx := context.Background()
	want := "*3\r\n:1\r\n$1\r\nx\r\n$-1\r\n"
	raw := redis.NewRawCmd(ctx)
	raw.SetVal([]byte(want))
	parsed := redis.NewCmd(ctx) // a Redis Cluster's
	parsed.SetVal([]any{int64(1), "x", nil})
	for _, cmd := range []redis.Cmder{raw, parsed} {
		if v, err := rawReply(cmd, nil); string(v) != want || err != nil {
			t.Errorf("rawReply(%T) = %q, %v, want %q, nil", cmd, v, err, want)
		}
	}
	// An error reply is an error, as go-redis's own parse makes it.
	noscript := redis.NewRawCmd(ctx)
	noscript.SetVal([]byte("-NOSCRIPT No matching script.\r\n"))
	_, err := rawReply(noscript, nil)
	if !redis.HasErrorPrefix(err, "NOSCRIPT") || classify(err) != faultReply {
		t.Errorf("rawReply(NOSCRIPT reply) error = %v, want a NOSCRIPT reply", err)
	}
}
