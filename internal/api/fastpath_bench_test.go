package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/gen/ratelimit/v1/ratelimitv1connect"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// protojsonCodec is the codec without the hand-written encoder and
// decoder: protojson with EmitDefaultValues, compacted, as jsonCodec's
// output is.
type protojsonCodec struct{}

func (protojsonCodec) Name() string { return "json" }

func (protojsonCodec) Marshal(m any) ([]byte, error) {
	b, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(m.(proto.Message))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	err = json.Compact(&out, b)
	return out.Bytes(), err
}

func (protojsonCodec) Unmarshal(b []byte, m any) error {
	if len(b) == 0 {
		return errors.New("empty body")
	}
	return protojson.Unmarshal(b, m.(proto.Message))
}

// BenchmarkJSONServing measures one Connect JSON Check, the API's most
// common call, served three ways on the same server and store (10k keys,
// all allowed), in one run:
//
//	fastpath   serveFast with the hand-written decoder and encoder (what
//	           the API serves)
//	connect    Connect's handler with the same codec (hand-written
//	           decoder and encoder inside Connect's codec interface)
//	protojson  Connect's handler with protojson as its codec
//
// docs/performance.md gives its figures.
func BenchmarkJSONServing(b *testing.B) {
	newServer := func() *Server {
		s, err := NewHandler(Config{Store: region.NewMemory(region.MemoryConfig{}), Registerer: prometheus.NewRegistry(), Now: time.Now})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	s := newServer()
	_, connectHandler := ratelimitv1connect.NewRateLimitServiceHandler(s, append([]connect.HandlerOption{connect.WithReadMaxBytes(s.cfg.MaxRequestBytes)}, codecs(nil)...)...)
	_, protojsonHandler := ratelimitv1connect.NewRateLimitServiceHandler(s, connect.WithReadMaxBytes(s.cfg.MaxRequestBytes), connect.WithCodec(protojsonCodec{}))
	for _, v := range []struct {
		name string
		h    http.Handler
	}{
		{"fastpath", s},
		{"connect", connectHandler},
		{"protojson", protojsonHandler},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			serveChecks(b, v.h, "application/json", b.Loop, func(i uint64) []byte {
				return fmt.Appendf(nil, `{"key":"user%d","limit":{"limit":"1000000000","window":"60s"}}`, i%10000)
			})
		})
	}
}

// BenchmarkProtoServing measures one Connect protobuf Check (connect-go's
// default codec, and so the Go client's) served two ways on the same
// server and store (10k keys, all allowed), in one run: fastpath
// (serveFast, what the API serves) and connect (Connect's handler with the
// same codec). docs/performance.md gives its figures.
func BenchmarkProtoServing(b *testing.B) {
	s, err := NewHandler(Config{Store: region.NewMemory(region.MemoryConfig{}), Registerer: prometheus.NewRegistry(), Now: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	_, connectHandler := ratelimitv1connect.NewRateLimitServiceHandler(s, append([]connect.HandlerOption{connect.WithReadMaxBytes(s.cfg.MaxRequestBytes)}, codecs(&s.lim)...)...)
	bodies := make([][]byte, 10000)
	for i := range bodies {
		bodies[i] = []byte(pb(&ratelimitv1.CheckRequest{Key: fmt.Sprintf("user%d", i), Limit: &ratelimitv1.Limit{Limit: 1e9, Window: durationpb.New(time.Minute)}}))
	}
	for _, v := range []struct {
		name string
		h    http.Handler
	}{
		{"fastpath", s},
		{"connect", connectHandler},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			serveChecks(b, v.h, "application/proto", b.Loop, func(i uint64) []byte { return bodies[i%uint64(len(bodies))] })
		})
	}
}

// serveChecks has h serve a Check of content type ct while next reports
// true, the body of the i-th (from 1) made by body, and wants each
// answered 200 (b.Errorf and an early return otherwise: it may run on
// several goroutines).
func serveChecks(b *testing.B, h http.Handler, ct string, next func() bool, body func(i uint64) []byte) {
	w := &discardWriter{h: http.Header{}}
	rd := bytes.NewReader(nil)
	req, _ := http.NewRequest(http.MethodPost, pathCheck, rd)
	req.Header.Set("Content-Type", ct)
	for i := uint64(1); next(); i++ {
		p := body(i)
		rd.Reset(p)
		req.Body = readCloser{rd}
		req.ContentLength = int64(len(p))
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Errorf("status %d", w.status)
			return
		}
	}
}

// BenchmarkMarks converts a previous bucket's trail of 60 marks (a key
// hit once a second under a one-minute window) to the wire, at the start
// of the current bucket, when every mark still counts.
func BenchmarkMarks(b *testing.B) {
	var t window.Trail
	for at := int64(0); at < 60_000; at += 1000 {
		t.Add(at, 60_000, 1, true)
	}
	b.ReportAllocs()
	for b.Loop() {
		var m responseMsgs
		if len(m.marks(t, 0)) != 60 {
			b.Fatal("want 60 marks")
		}
	}
}
