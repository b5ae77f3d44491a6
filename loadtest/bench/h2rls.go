package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// Values of -envoy-generator: what drives the Envoy RLS rows.
const (
	genH2   = "h2"   // H2RLSClient: gRPC framed by hand over HTTP/2
	genGRPC = "grpc" // go-control-plane's grpc-go client, as Envoy's Go peers call it
)

const rlsPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// H2RLSClient calls ShouldRateLimit as gRPC over plaintext HTTP/2 with
// the least work a client can do: each request's gRPC message is encoded
// once, its headers are one fixed HPACK block, frames go out through
// x/net's Framer, and the answer's overall code is read from the first
// bytes of its message. It keeps the server's flow control and
// concurrent-stream limit. Against the trivial grpc-go server it costs its
// core a fraction of what grpc-go's own client does, so the ceiling it
// measures is the server's, not the generator's.
type H2RLSClient struct {
	conns []*h2conn
	next  atomic.Uint32
	// msgs caches each workload's requests as length-prefixed gRPC
	// messages.
	mu   sync.Mutex
	msgs map[*Workload][][]byte
}

// NewH2RLSClient dials conns HTTP/2 connections to base (http://host:port).
func NewH2RLSClient(ctx context.Context, base string, conns int) (*H2RLSClient, error) {
	addr := strings.TrimPrefix(base, "http://")
	c := &H2RLSClient{msgs: map[*Workload][][]byte{}}
	for range max(conns, 1) {
		hc, err := dialH2(ctx, addr)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.conns = append(c.conns, hc)
	}
	return c, nil
}

func (c *H2RLSClient) messages(w *Workload) ([][]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.msgs[w]; ok {
		return m, nil
	}
	m := make([][]byte, len(w.envoy))
	for i, r := range w.envoy {
		b, err := proto.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		m[i] = binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b)))
		m[i] = append(m[i], b...)
	}
	c.msgs[w] = m
	return m, nil
}

// Do sends request i of w: OK counts as allowed, OVER_LIMIT as denied.
func (c *H2RLSClient) Do(ctx context.Context, w *Workload, i int, _ *bytes.Buffer) (int, int, error) {
	if w.envoy == nil {
		return 0, 0, errNotEnvoy
	}
	msgs, err := c.messages(w)
	if err != nil {
		return 0, 0, err
	}
	hc := c.conns[int(c.next.Add(1))%len(c.conns)]
	code, err := hc.call(ctx, msgs[i])
	if err != nil {
		return 0, 0, err
	}
	switch code {
	case 1: // OK
		return 1, 0, nil
	case 2: // OVER_LIMIT
		return 0, 1, nil
	default:
		return 0, 0, fmt.Errorf("overall code %d", code)
	}
}

// Close closes every connection.
func (c *H2RLSClient) Close() {
	for _, hc := range c.conns {
		hc.close(errors.New("client closed"))
	}
}

// h2conn is one HTTP/2 connection: calls write under wmu, one reader
// goroutine dispatches answers to them by stream.
type h2conn struct {
	nc      net.Conn
	bw      *bufio.Writer
	fr      *http2.Framer
	headers []byte        // the fixed HPACK block of every request
	slots   chan struct{} // one per stream the server lets us open

	wmu     sync.Mutex
	nextID  uint32
	sendWin int64 // connection-level send window
	winCond *sync.Cond
	closed  atomic.Bool
	writers atomic.Int32 // calls writing or waiting to

	smu     sync.Mutex
	streams map[uint32]*h2call
	err     error
	done    chan struct{}
}

type h2call struct {
	code   int // overall code from the message; -1 none yet
	status string
	gstat  string
	ch     chan struct{}
}

var callPool = sync.Pool{New: func() any { return &h2call{ch: make(chan struct{}, 1)} }}

func dialH2(ctx context.Context, addr string) (*h2conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	hc := &h2conn{nc: nc, bw: bufio.NewWriterSize(nc, 16<<10), nextID: 1, sendWin: 65535,
		streams: map[uint32]*h2call{}, done: make(chan struct{})}
	hc.winCond = sync.NewCond(&hc.wmu)
	hc.fr = http2.NewFramer(hc.bw, bufio.NewReaderSize(nc, 64<<10))
	hc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", rlsPath}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		// Never indexed: the block stays valid for every request,
		// whatever the server's table holds.
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true})
	}
	hc.headers = hb.Bytes()

	_, _ = hc.bw.WriteString(http2.ClientPreface)
	_ = hc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 24})
	_ = hc.fr.WriteWindowUpdate(0, 1<<30)
	if err := hc.bw.Flush(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("h2 preface: %w", err)
	}
	// The server's first frame is its SETTINGS: it says how many streams
	// we may open.
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := hc.fr.ReadFrame()
	_ = nc.SetReadDeadline(time.Time{})
	sf, ok := f.(*http2.SettingsFrame)
	if err != nil || !ok || sf.IsAck() {
		nc.Close()
		return nil, fmt.Errorf("h2 %s: want the server's SETTINGS first, got %v (%v)", addr, f, err)
	}
	streams := uint32(1000)
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); ok {
		streams = min(streams, v)
	}
	hc.slots = make(chan struct{}, max(streams, 1))
	hc.wmu.Lock()
	err = hc.fr.WriteSettingsAck()
	if err == nil {
		err = hc.bw.Flush()
	}
	hc.wmu.Unlock()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("h2 settings ack: %w", err)
	}
	go hc.readLoop()
	return hc, nil
}

// call sends one gRPC message as one stream and waits for its answer's
// overall code.
func (hc *h2conn) call(ctx context.Context, msg []byte) (int, error) {
	select {
	case hc.slots <- struct{}{}:
	case <-hc.done:
		return 0, hc.failure()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-hc.slots }()
	cl := callPool.Get().(*h2call)
	cl.code, cl.status, cl.gstat = -1, "", ""

	// Calls queued behind this one flush for it: under load one write
	// carries many requests.
	hc.writers.Add(1)
	hc.wmu.Lock()
	for hc.sendWin < int64(len(msg)) && !hc.closed.Load() {
		hc.winCond.Wait()
	}
	id := hc.nextID
	hc.nextID += 2
	hc.smu.Lock()
	err := hc.err
	hc.streams[id] = cl
	hc.smu.Unlock()
	if err == nil {
		hc.sendWin -= int64(len(msg))
		err = hc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hc.headers, EndHeaders: true})
		if err == nil {
			err = hc.fr.WriteData(id, true, msg)
		}
	}
	if hc.writers.Add(-1) == 0 && err == nil {
		err = hc.bw.Flush()
	}
	hc.wmu.Unlock()
	if err != nil {
		hc.close(err)
	}
	select {
	case <-cl.ch:
	case <-ctx.Done():
		hc.smu.Lock()
		_, pending := hc.streams[id]
		delete(hc.streams, id)
		hc.smu.Unlock()
		if pending {
			return 0, ctx.Err() // the call is dropped, never pooled
		}
		<-cl.ch
	}
	code, status, gstat := cl.code, cl.status, cl.gstat
	callPool.Put(cl)
	switch {
	case status == "" && gstat == "":
		return 0, hc.failure()
	case status != "200":
		return 0, fmt.Errorf("HTTP status %q", status)
	case gstat != "0":
		return 0, fmt.Errorf("grpc-status %q", gstat)
	case code < 0:
		return 0, errors.New("no message in the answer")
	}
	return code, nil
}

func (hc *h2conn) failure() error {
	hc.smu.Lock()
	defer hc.smu.Unlock()
	if hc.err == nil {
		return errors.New("stream reset")
	}
	return hc.err
}

// finish hands stream id's call its answer.
func (hc *h2conn) finish(id uint32) {
	hc.smu.Lock()
	cl := hc.streams[id]
	delete(hc.streams, id)
	hc.smu.Unlock()
	if cl != nil {
		cl.ch <- struct{}{}
	}
}

func (hc *h2conn) stream(id uint32) *h2call {
	hc.smu.Lock()
	defer hc.smu.Unlock()
	return hc.streams[id]
}

func (hc *h2conn) readLoop() {
	var unacked uint32
	for {
		f, err := hc.fr.ReadFrame()
		if err != nil {
			hc.close(fmt.Errorf("h2 read: %w", err))
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if cl := hc.stream(f.StreamID); cl != nil {
				if s := f.PseudoValue("status"); s != "" {
					cl.status = s
				}
				if g := f.RegularFields(); len(g) > 0 {
					for _, hf := range g {
						if hf.Name == "grpc-status" {
							cl.gstat = hf.Value
						}
					}
				}
			}
			if f.StreamEnded() {
				hc.finish(f.StreamID)
			}
		case *http2.DataFrame:
			d := f.Data()
			if cl := hc.stream(f.StreamID); cl != nil && cl.code < 0 && len(d) >= 5 {
				// RateLimitResponse's overall_code is field 1, a varint,
				// written first; absent means UNKNOWN (0).
				cl.code = 0
				if len(d) >= 7 && d[5] == 0x08 {
					cl.code = int(d[6])
				}
			}
			if unacked += uint32(len(d)); unacked >= 1<<20 {
				hc.wmu.Lock()
				_ = hc.fr.WriteWindowUpdate(0, unacked)
				_ = hc.bw.Flush()
				hc.wmu.Unlock()
				unacked = 0
			}
			if f.StreamEnded() {
				hc.finish(f.StreamID)
			}
		case *http2.RSTStreamFrame:
			hc.finish(f.StreamID)
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				hc.wmu.Lock()
				hc.sendWin += int64(f.Increment)
				hc.winCond.Broadcast()
				hc.wmu.Unlock()
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				hc.wmu.Lock()
				_ = hc.fr.WriteSettingsAck()
				_ = hc.bw.Flush()
				hc.wmu.Unlock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				hc.wmu.Lock()
				_ = hc.fr.WritePing(true, f.Data)
				_ = hc.bw.Flush()
				hc.wmu.Unlock()
			}
		case *http2.GoAwayFrame:
			hc.close(fmt.Errorf("h2 GOAWAY %v", f.ErrCode))
			return
		}
	}
}

// close fails the connection and every call waiting on it.
func (hc *h2conn) close(err error) {
	hc.smu.Lock()
	if hc.err != nil {
		hc.smu.Unlock()
		return
	}
	hc.err = err
	hc.closed.Store(true)
	calls := hc.streams
	hc.streams = map[uint32]*h2call{}
	close(hc.done)
	hc.smu.Unlock()
	_ = hc.nc.Close()
	for _, cl := range calls {
		cl.ch <- struct{}{}
	}
	hc.wmu.Lock()
	hc.winCond.Broadcast()
	hc.wmu.Unlock()
}
