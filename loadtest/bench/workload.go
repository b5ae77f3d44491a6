package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
)

const (
	checkPath = "/ratelimit.v1.RateLimitService/Check"
	batchPath = "/ratelimit.v1.RateLimitService/CheckBatch"
)

// Workload is a set of prepared requests; a call picks one of them.
type Workload struct {
	Name    string
	PerCall int // decisions per request
	// Exactly one of single, batch and envoy is set.
	single []*ratelimitv1.CheckRequest
	batch  []*ratelimitv1.CheckBatchRequest
	envoy  []*rlsv3.RateLimitRequest
	json   [][]byte // single or batch as Connect JSON
	proto  [][]byte // and as protobuf
	// Path, when set, is where the JSON bodies go (a peer's API), not
	// the Connect method's.
	Path string
}

// Len is the number of prepared requests.
func (w *Workload) Len() int { return max(len(w.json), len(w.envoy)) }

// random returns the index of a request of w drawn uniformly.
func (w *Workload) random() int {
	if n := w.Len(); n > 1 {
		return rand.IntN(n)
	}
	return 0
}

// Workload parameters.
const (
	uniformKeys  = 10000
	highLimit    = 1_000_000_000 // nothing in a run reaches it
	hotLimit     = 100           // per minute: the hot key is denied after 100 hits
	batchSize    = 10
	batchPrepare = 1024
)

func limit(n uint64) *ratelimitv1.Limit {
	return &ratelimitv1.Limit{Limit: n, Window: durationpb.New(time.Minute)}
}

// NewUniform makes requests over 10k keys, all allowed. prefix keeps keys of
// different rows apart.
func NewUniform(prefix string) *Workload {
	w := &Workload{Name: "uniform10k", PerCall: 1}
	for i := range uniformKeys {
		w.single = append(w.single, &ratelimitv1.CheckRequest{
			Key: fmt.Sprintf("%s-u%d", prefix, i), Hits: 1, Limit: limit(highLimit)})
	}
	w.encode()
	return w
}

// NewHotKey makes one request for one key far over its limit.
func NewHotKey(prefix string) *Workload {
	w := &Workload{Name: "hotkey", PerCall: 1}
	w.single = []*ratelimitv1.CheckRequest{{Key: prefix + "-hot", Hits: 1, Limit: limit(hotLimit)}}
	w.encode()
	return w
}

// NewBatch makes CheckBatch requests of 10 keys drawn from 10k keys.
func NewBatch(prefix string, seed uint64) *Workload {
	w := &Workload{Name: "batch10", PerCall: batchSize}
	x := seed | 1
	for range batchPrepare {
		b := &ratelimitv1.CheckBatchRequest{}
		for range batchSize {
			x ^= x << 13 // xorshift64: deterministic, good enough to spread keys
			x ^= x >> 7
			x ^= x << 17
			b.Checks = append(b.Checks, &ratelimitv1.CheckRequest{
				Key: fmt.Sprintf("%s-u%d", prefix, x%uniformKeys), Hits: 1, Limit: limit(highLimit)})
		}
		w.batch = append(w.batch, b)
	}
	w.encode()
	return w
}

func (w *Workload) encode() {
	add := func(m proto.Message) {
		j, _ := protojson.Marshal(m) // cannot fail for these messages
		b, _ := proto.Marshal(m)
		w.json, w.proto = append(w.json, j), append(w.proto, b)
	}
	for _, m := range w.single {
		add(m)
	}
	for _, m := range w.batch {
		add(m)
	}
}

// bodies returns w's prepared request bodies in protocol's encoding
// (protoBinary: protobuf, else JSON) and their content type.
func (w *Workload) bodies(protocol string) ([][]byte, string) {
	if protocol == protoBinary {
		return w.proto, "application/proto"
	}
	return w.json, "application/json"
}

var errEnvoyOnly = errors.New("workload has only Envoy requests")

// Client sends one prepared request of a workload and reports the
// decisions: how many were allowed and denied.
type Client interface {
	Do(ctx context.Context, w *Workload, i int, buf *bytes.Buffer) (allowed, denied int, err error)
	Close()
}

// JSONClient speaks the Connect protocol with JSON over HTTP/1.1 keep-alive
// connections, up to conns of them.
type JSONClient struct {
	base string
	hc   *http.Client
	tr   *http.Transport
}

// NewJSONClient returns a client for the node at base (http://host:port).
func NewJSONClient(base string, conns int) *JSONClient {
	tr := http1Transport(conns)
	return &JSONClient{base: base, tr: tr, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// http1Transport keeps up to conns HTTP/1.1 connections, no more.
func http1Transport(conns int) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
	}
}

// Do sends request i of w.
func (c *JSONClient) Do(ctx context.Context, w *Workload, i int, buf *bytes.Buffer) (int, int, error) {
	if w.envoy != nil {
		return 0, 0, errEnvoyOnly
	}
	path := checkPath
	if w.batch != nil {
		path = batchPath
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(w.json[i]))
	if err != nil {
		return 0, 0, fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	buf.Reset()
	_, err = buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("status %d: %.200s", resp.StatusCode, buf.Bytes())
	}
	if w.batch != nil && bytes.Contains(buf.Bytes(), []byte(`"error"`)) {
		return 0, 0, fmt.Errorf("batch item rejected: %.200s", buf.Bytes())
	}
	a := CountAllowed(buf.Bytes())
	return a, w.PerCall - a, nil
}

// Close closes idle connections.
func (c *JSONClient) Close() { c.tr.CloseIdleConnections() }

// CountAllowed counts `"allowed": true` in a JSON document, whatever the
// whitespace around the colon (protojson varies it on purpose).
func CountAllowed(b []byte) int {
	key := []byte(`"allowed"`)
	n := 0
	for {
		i := bytes.Index(b, key)
		if i < 0 {
			return n
		}
		b = b[i+len(key):]
		j := 0
		for j < len(b) && (b[j] == ' ' || b[j] == ':' || b[j] == '\n' || b[j] == '\t' || b[j] == '\r') {
			j++
		}
		if bytes.HasPrefix(b[j:], []byte("true")) {
			n++
		}
	}
}

// GRPCClient speaks gRPC over h2c with the generated Connect client. HTTP/2
// multiplexes every concurrent call over one connection. Made by
// NewProtoClient, it speaks the Connect protocol with protobuf instead.
type GRPCClient struct {
	tr *http.Transport
	c  ratelimitv1connect.RateLimitServiceClient
}

// NewProtoClient returns a client for the node at base that speaks the
// Connect protocol with protobuf, connect-go's default and the node's Go
// client's, over up to conns HTTP/1.1 connections.
func NewProtoClient(base string, conns int) *GRPCClient {
	tr := http1Transport(conns)
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return &GRPCClient{tr: tr, c: ratelimitv1connect.NewRateLimitServiceClient(hc, base)}
}

// NewGRPCClient returns a gRPC client for the node at base.
func NewGRPCClient(base string) *GRPCClient {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		Protocols:   &p,
	}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return &GRPCClient{tr: tr, c: ratelimitv1connect.NewRateLimitServiceClient(hc, base, connect.WithGRPC())}
}

// Do sends request i of w.
func (c *GRPCClient) Do(ctx context.Context, w *Workload, i int, _ *bytes.Buffer) (int, int, error) {
	if w.envoy != nil {
		return 0, 0, errEnvoyOnly
	}
	if w.batch != nil {
		resp, err := c.c.CheckBatch(ctx, connect.NewRequest(w.batch[i]))
		if err != nil {
			return 0, 0, err
		}
		a := 0
		for _, r := range resp.Msg.GetResults() {
			if e := r.GetError(); e != nil {
				return 0, 0, fmt.Errorf("batch item rejected: %s: %s", e.GetCode(), e.GetMessage())
			}
			if r.GetResponse().GetAllowed() {
				a++
			}
		}
		return a, len(resp.Msg.GetResults()) - a, nil
	}
	resp, err := c.c.Check(ctx, connect.NewRequest(w.single[i]))
	if err != nil {
		return 0, 0, err
	}
	if resp.Msg.GetAllowed() {
		return 1, 0, nil
	}
	return 0, 1, nil
}

// Close closes idle connections.
func (c *GRPCClient) Close() { c.tr.CloseIdleConnections() }
