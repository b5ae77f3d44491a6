package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

// genH1 is H1Client: the Connect protocol over HTTP/1.1 written and read
// by hand.
const genH1 = "h1"

// H1Client speaks the Connect protocol, in JSON or protobuf, over up to
// conns HTTP/1.1 keep-alive connections that it writes and reads itself:
// each call writes one prepared request and reads its answer's status
// line, headers and body, with none of net/http's client machinery (a
// request and a response object, header maps, a goroutine pair per
// connection). It drives the open-loop Connect rows, where net/http's
// client kept its core over 80% busy at half the node's peak and the p99
// comparison was refused.
type H1Client struct {
	addr, host string
	binary     bool
	idle       chan *h1Conn // connections not in use; nil entries are dial slots
}

// h1Conn is one keep-alive connection.
type h1Conn struct {
	c        net.Conn
	br       *bufio.Reader
	deadline time.Time // the connection's deadline, as last set
}

// NewH1Client returns a client for the node at base (http://host:port)
// that sends protocol's encoding (protoBinary: protobuf, else JSON) over
// up to conns connections.
func NewH1Client(base, protocol string, conns int) (*H1Client, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("h1 client: want http://host:port, got %q", base)
	}
	c := &H1Client{addr: u.Host, host: u.Host, binary: protocol == protoBinary, idle: make(chan *h1Conn, max(conns, 1))}
	for range max(conns, 1) {
		c.idle <- nil
	}
	return c, nil
}

// Do sends request i of w on an idle connection, dialing one when the slot
// has none, and waits for its answer. A connection that fails is closed and
// its slot dials anew on its next use.
func (c *H1Client) Do(ctx context.Context, w *Workload, i int, buf *bytes.Buffer) (int, int, error) {
	if w.envoy != nil {
		return 0, 0, errEnvoyOnly
	}
	var hc *h1Conn
	select {
	case hc = <-c.idle:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	a, d, keep, err := c.do(ctx, &hc, w, i, buf)
	if !keep && hc != nil {
		_ = hc.c.Close()
		hc = nil
	}
	c.idle <- hc
	return a, d, err
}

func (c *H1Client) do(ctx context.Context, hcp **h1Conn, w *Workload, i int, buf *bytes.Buffer) (allowed, denied int, keep bool, err error) {
	if *hcp == nil {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return 0, 0, false, fmt.Errorf("dial: %w", err)
		}
		*hcp = &h1Conn{c: nc, br: bufio.NewReaderSize(nc, 16<<10)}
	}
	hc := *hcp
	path, ct, body := checkPath, "application/json", w.json[i]
	switch {
	case w.Path != "":
		path = w.Path
	case w.batch != nil:
		path = batchPath
	}
	if c.binary {
		ct, body = "application/proto", w.proto[i]
	}
	buf.Reset()
	buf.WriteString("POST ")
	buf.WriteString(path)
	buf.WriteString(" HTTP/1.1\r\nHost: ")
	buf.WriteString(c.host)
	buf.WriteString("\r\nContent-Type: ")
	buf.WriteString(ct)
	buf.WriteString("\r\nContent-Length: ")
	buf.WriteString(strconv.Itoa(len(body)))
	buf.WriteString("\r\n\r\n")
	buf.Write(body)
	if dl, _ := ctx.Deadline(); !dl.Equal(hc.deadline) {
		// A run's calls share one deadline: set once per connection.
		_ = hc.c.SetDeadline(dl)
		hc.deadline = dl
	}
	if _, err := hc.c.Write(buf.Bytes()); err != nil {
		return 0, 0, false, fmt.Errorf("write request: %w", err)
	}
	status, resp, keep, err := readH1Response(hc.br, buf)
	if err != nil {
		return 0, 0, false, err
	}
	if status != 200 {
		return 0, 0, keep, fmt.Errorf("status %d: %.200s", status, resp)
	}
	a, n, err := countAnswer(resp, c.binary, w.batch != nil, w.PerCall)
	if err != nil {
		return 0, 0, keep, err
	}
	return a, n - a, keep, nil
}

// errH1 is a malformed HTTP/1.1 response.
var errH1 = errors.New("malformed HTTP/1.1 response")

// maxH1Body bounds an answer's body: the largest the bench asks for (a
// CheckBatch of ten with their marks) is a few kilobytes, and a server
// that sends more, or a length it does not send, fails the call rather
// than grow the client's buffer without end.
const maxH1Body = 4 << 20

// readH1Response reads one response from br: its status, its body (in
// buf, reset first; the body a Content-Length or chunked encoding
// delimits), and whether the connection may carry another request.
func readH1Response(br *bufio.Reader, buf *bytes.Buffer) (status int, body []byte, keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, nil, false, fmt.Errorf("read status line: %w", err)
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errH1, line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errH1, line)
	}
	keep = line[7] == '1'
	length, chunked := -1, false
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return 0, nil, false, fmt.Errorf("read header: %w", err)
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, nil, false, fmt.Errorf("%w: header %q", errH1, h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 || length > maxH1Body {
				return 0, nil, false, fmt.Errorf("%w: Content-Length %q", errH1, value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			keep = keep && !bytes.EqualFold(value, []byte("close"))
		}
	}
	buf.Reset()
	switch {
	case chunked:
		if err := readChunks(br, buf); err != nil {
			return 0, nil, false, err
		}
	case length >= 0:
		if _, err := io.CopyN(buf, br, int64(length)); err != nil {
			return 0, nil, false, fmt.Errorf("read body: %w", err)
		}
	default:
		// No length: the body runs to the connection's end.
		if _, err := buf.ReadFrom(io.LimitReader(br, maxH1Body+1)); err != nil {
			return 0, nil, false, fmt.Errorf("read body: %w", err)
		}
		if buf.Len() > maxH1Body {
			return 0, nil, false, fmt.Errorf("%w: body past %d bytes", errH1, maxH1Body)
		}
		keep = false
	}
	return status, buf.Bytes(), keep, nil
}

// readChunks reads a chunked body into buf, through its trailer.
func readChunks(br *bufio.Reader, buf *bytes.Buffer) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("read chunk size: %w", err)
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(size), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: chunk size %q", errH1, line)
		}
		if n > maxH1Body-int64(buf.Len()) {
			return fmt.Errorf("%w: chunked body past %d bytes", errH1, maxH1Body)
		}
		if n == 0 {
			for { // trailer, up to its blank line
				t, err := br.ReadSlice('\n')
				if err != nil {
					return fmt.Errorf("read trailer: %w", err)
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := io.CopyN(buf, br, n); err != nil {
			return fmt.Errorf("read chunk: %w", err)
		}
		if _, err := br.Discard(2); err != nil { // the chunk's CRLF
			return fmt.Errorf("read chunk: %w", err)
		}
	}
}

// countAnswer returns how many decisions answer b allowed, of how many:
// perCall for a JSON answer (as JSONClient counts them), one per result of
// a protobuf CheckBatch; a CheckBatch's failed items are an error.
func countAnswer(b []byte, binary, batch bool, perCall int) (allowed, n int, err error) {
	if !binary {
		if batch && bytes.Contains(b, []byte(`"error"`)) {
			return 0, 0, fmt.Errorf("batch item rejected: %.200s", b)
		}
		return CountAllowed(b), perCall, nil
	}
	if !batch {
		var r ratelimitv1.CheckResponse
		if err := proto.Unmarshal(b, &r); err != nil {
			return 0, 0, fmt.Errorf("decode answer: %w", err)
		}
		if r.GetAllowed() {
			return 1, 1, nil
		}
		return 0, 1, nil
	}
	var r ratelimitv1.CheckBatchResponse
	if err := proto.Unmarshal(b, &r); err != nil {
		return 0, 0, fmt.Errorf("decode answer: %w", err)
	}
	for _, x := range r.GetResults() {
		if e := x.GetError(); e != nil {
			return 0, 0, fmt.Errorf("batch item rejected: %s: %s", e.GetCode(), e.GetMessage())
		}
		if x.GetResponse().GetAllowed() {
			allowed++
		}
	}
	return allowed, len(r.GetResults()), nil
}

// Close closes the idle connections; it is called when no call is in
// flight.
func (c *H1Client) Close() {
	for {
		select {
		case hc := <-c.idle:
			if hc != nil {
				_ = hc.c.Close()
			}
		default:
			return
		}
	}
}
