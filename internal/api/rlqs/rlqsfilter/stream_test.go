package rlqsfilter

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fakeClient is an in-memory RateLimitQuotaServiceClient for tests inside
// a synctest bubble, where real sockets do not work: each stream it opens
// is handed to the test on streams.
type fakeClient struct {
	streams   chan *fakeStream
	failOpens atomic.Int32 // this many opens fail first
}

func newFakeClient() *fakeClient { return &fakeClient{streams: make(chan *fakeStream)} }

func (c *fakeClient) StreamRateLimitQuotas(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse], error) {
	if c.failOpens.Add(-1) >= 0 {
		return nil, status.Error(codes.Unavailable, "fake: connection refused")
	}
	s := &fakeStream{
		ctx:     ctx,
		reports: make(chan *rlqsv3.RateLimitQuotaUsageReports, 64),
		resps:   make(chan *rlqsv3.RateLimitQuotaResponse, 8),
		end:     make(chan struct{}),
	}
	select {
	case c.streams <- s:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fakeStream is the client end of one fake stream; the test plays the
// server through its channels.
type fakeStream struct {
	grpc.ClientStream // not used by the filter
	ctx               context.Context
	reports           chan *rlqsv3.RateLimitQuotaUsageReports
	resps             chan *rlqsv3.RateLimitQuotaResponse
	end               chan struct{} // closed: the server ended the stream with endErr
	endErr            error
}

func (s *fakeStream) Send(m *rlqsv3.RateLimitQuotaUsageReports) error {
	select {
	case <-s.end:
		return io.EOF
	default:
	}
	s.reports <- proto.Clone(m).(*rlqsv3.RateLimitQuotaUsageReports)
	return nil
}

func (s *fakeStream) Recv() (*rlqsv3.RateLimitQuotaResponse, error) {
	select {
	case r := <-s.resps:
		return r, nil
	case <-s.end:
		return nil, s.endErr
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

// next returns the report the filter has sent by now, once every
// goroutine of the bubble is blocked.
func (s *fakeStream) next(t *testing.T) *rlqsv3.RateLimitQuotaUsageReports {
	t.Helper()
	synctest.Wait()
	select {
	case m := <-s.reports:
		return m
	default:
		t.Fatal("no report sent")
		return nil
	}
}

// none fails if the filter has sent a report.
func (s *fakeStream) none(t *testing.T) {
	t.Helper()
	synctest.Wait()
	select {
	case m := <-s.reports:
		t.Fatalf("unexpected report: %v", uses(m))
	default:
	}
}

func (s *fakeStream) respond(actions ...*rlqsv3.RateLimitQuotaResponse_BucketAction) {
	s.resps <- response(actions...)
	synctest.Wait()
}

// run starts f.Run inside the bubble; the returned stop cancels it and
// checks that it returns the context's error.
func run(t *testing.T, f *Filter, c rlqsv3.RateLimitQuotaServiceClient) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, c) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	}
}

func TestReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{Domain: "dom", ReportingInterval: time.Second})
		c := newFakeClient()
		stop := run(t, f, c)
		defer stop()
		s := <-c.streams
		s.none(t) // no bucket, nothing to report

		// A new bucket is reported at once, with its first request; the
		// first message of the stream carries the domain.
		time.Sleep(300 * time.Millisecond)
		f.Allow(idA)
		checkReport(t, s.next(t), "dom", u(idA, 0, 1, 0))
		f.Allow(idA)
		f.Allow(idA)
		s.none(t) // a known bucket waits for the interval

		// A second new bucket, its own immediate report, no domain.
		time.Sleep(200 * time.Millisecond)
		f.Allow(idB)
		checkReport(t, s.next(t), "", u(idB, 0, 1, 0))

		// At the first tick (1s after the stream opened) every bucket,
		// sorted by id, with the usage and time since its last report.
		time.Sleep(500 * time.Millisecond)
		checkReport(t, s.next(t), "", u(idA, 700*time.Millisecond, 2, 0), u(idB, 500*time.Millisecond, 0, 0))

		// Counts start over after each report; idle buckets are reported
		// with zero usage.
		f.Allow(idB)
		time.Sleep(time.Second)
		checkReport(t, s.next(t), "", u(idA, time.Second, 0, 0), u(idB, time.Second, 1, 0))
		time.Sleep(time.Second)
		checkReport(t, s.next(t), "", u(idA, time.Second, 0, 0), u(idB, time.Second, 0, 0))
		if st := f.Stats(); st.Streams != 1 || st.Reports != 5 {
			t.Errorf("Streams, Reports = %d, %d; want 1, 5", st.Streams, st.Reports)
		}
	})
}

func TestReplacedAssignmentReportsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{Domain: "dom", ReportingInterval: time.Hour})
		c := newFakeClient()
		stop := run(t, f, c)
		defer stop()
		s := <-c.streams
		f.Allow(idA)
		checkReport(t, s.next(t), "dom", u(idA, 0, 1, 0))

		f.Allow(idA)
		time.Sleep(time.Second)
		// The first assignment ends the no-assignment behaviour: the usage
		// until then is reported at once.
		s.respond(assign(idA, DenyAll(), time.Minute))
		checkReport(t, s.next(t), "", u(idA, time.Second, 1, 0))

		f.Allow(idA)
		time.Sleep(time.Second)
		// The same strategy only extends: no report.
		s.respond(assign(idA, DenyAll(), time.Minute))
		s.none(t)
		// A different one replaces: a report, of the usage under the
		// replaced assignment.
		time.Sleep(time.Second)
		s.respond(assign(idA, AllowAll(), time.Minute))
		checkReport(t, s.next(t), "", u(idA, 2*time.Second, 0, 1))
		if !f.Allow(idA) {
			t.Fatal("the replacing ALLOW_ALL was not applied")
		}
	})
}

func TestAbandonStopsReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{Domain: "dom", ReportingInterval: time.Second})
		c := newFakeClient()
		stop := run(t, f, c)
		defer stop()
		s := <-c.streams
		f.Allow(idA)
		checkReport(t, s.next(t), "dom", u(idA, 0, 1, 0))
		f.Allow(idB)
		checkReport(t, s.next(t), "", u(idB, 0, 1, 0))
		time.Sleep(500 * time.Millisecond)
		f.Allow(idA)
		s.respond(abandon(idA))
		time.Sleep(500 * time.Millisecond)
		// idA's usage is erased with it; only idB is reported.
		checkReport(t, s.next(t), "", u(idB, time.Second, 0, 0))
		// Its next request subscribes to it again.
		time.Sleep(100 * time.Millisecond)
		f.Allow(idA)
		checkReport(t, s.next(t), "", u(idA, 0, 1, 0))
	})
}

func TestReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		f := mustNew(t, Config{Domain: "dom", ReportingInterval: time.Hour, ReconnectBackoff: 2 * time.Second})
		c := newFakeClient()
		stop := run(t, f, c)
		defer stop()
		s := <-c.streams
		f.Allow(idA)
		checkReport(t, s.next(t), "dom", u(idA, 0, 1, 0))
		s.respond(assign(idA, DenyAll(), time.Minute))
		s.next(t) // the first assignment's report
		f.Allow(idA)
		f.Allow(idB) // reported on this stream at once

		s.endErr = status.Error(codes.Unavailable, "server going away")
		close(s.end)
		synctest.Wait()
		f.Allow(idA) // counted while no stream is open
		f.Allow(idB)
		time.Sleep(2*time.Second - time.Nanosecond)
		synctest.Wait()
		select {
		case <-c.streams:
			t.Fatal("reopened before the backoff")
		default:
		}
		// The open fails once: another backoff.
		c.failOpens.Store(1)
		time.Sleep(time.Nanosecond)
		s2 := <-c.streams
		if got, want := time.Since(start), 2*time.Second+2*time.Second; got != want {
			t.Errorf("second stream opened %v into the test, want %v (two backoffs)", got, want)
		}
		// The new stream's first message: the domain again and every
		// bucket, with everything since its last report.
		checkReport(t, s2.next(t), "dom", u(idA, 4*time.Second, 0, 2), u(idB, 4*time.Second, 1, 0))
		if st := state(t, f, idA); st.Phase != PhaseActive || st.Strategy != DenyAll() {
			t.Errorf("after reconnect state = %+v, want the assignment kept", st)
		}
		if st := f.Stats(); st.Streams != 2 {
			t.Errorf("Streams = %d, want 2", st.Streams)
		}
	})
}

func TestRunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mustNew(t, Config{ReportingInterval: time.Second})
		c := newFakeClient()
		stop := run(t, f, c)
		defer stop()
		<-c.streams
		if err := f.Run(t.Context(), c); !errors.Is(err, ErrRunning) {
			t.Errorf("a second Run returned %v, want ErrRunning", err)
		}
	})
}

// rlqsServer is a real RLQS server for the loopback test: each stream is
// handed to the test, which reads its reports and scripts its responses.
type rlqsServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	streams chan *serverStream
}

type serverStream struct {
	reports chan *rlqsv3.RateLimitQuotaUsageReports
	send    chan *rlqsv3.RateLimitQuotaResponse
	end     chan struct{} // closed: the handler returns, ending the stream
}

func (s *rlqsServer) StreamRateLimitQuotas(stream grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	ctx := stream.Context()
	ss := &serverStream{
		reports: make(chan *rlqsv3.RateLimitQuotaUsageReports, 64),
		send:    make(chan *rlqsv3.RateLimitQuotaResponse),
		end:     make(chan struct{}),
	}
	select {
	case s.streams <- ss:
	case <-ctx.Done():
		return ctx.Err()
	}
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case ss.reports <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case r := <-ss.send:
			if err := stream.Send(r); err != nil {
				return err
			}
		case <-ss.end:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// within bounds each wait of the loopback test, which runs in real time.
const within = 10 * time.Second

func recvWithin[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(within):
		t.Fatalf("no %s within %v", what, within)
		var zero T
		return zero
	}
}

// TestGRPCLoopback runs the filter against a grpc-go server over
// loopback: reports, an assignment, the server closing the stream and the
// filter reopening it.
func TestGRPCLoopback(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &rlqsServer{streams: make(chan *serverStream)}
	gs := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }() // returns when stopped
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// An hour's interval: the periodic reports stay out of the way, every
	// message here is one the test caused.
	f := mustNew(t, Config{Domain: "dom", ReportingInterval: time.Hour, ReconnectBackoff: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, rlqsv3.NewRateLimitQuotaServiceClient(conn)) }()
	defer func() {
		cancel()
		if err := recvWithin(t, done, "Run return"); !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	}()

	ss := recvWithin(t, srv.streams, "stream")
	f.Allow(idA)
	m := recvWithin(t, ss.reports, "first report")
	if m.GetDomain() != "dom" || len(uses(m)) != 1 || uses(m)[0].id != canonicalKey(idA) || uses(m)[0].allowed != 1 {
		t.Fatalf("first report = %v (domain %q), want idA with 1 allowed and domain dom", uses(m), m.GetDomain())
	}

	ss.send <- response(assign(idA, DenyAll(), noTTL))
	// The assignment's report is queued while the assignment is applied,
	// so once it arrives the assignment is in force.
	m = recvWithin(t, ss.reports, "assignment report")
	if m.GetDomain() != "" || len(uses(m)) != 1 || uses(m)[0].allowed != 0 {
		t.Fatalf("assignment report = %v (domain %q), want idA with no usage and no domain", uses(m), m.GetDomain())
	}
	if allowN(f, idA, 2) != 0 {
		t.Fatal("DENY_ALL assignment not applied")
	}

	close(ss.end) // the server ends the stream (status OK)
	ss2 := recvWithin(t, srv.streams, "reopened stream")
	m = recvWithin(t, ss2.reports, "reopened stream's first report")
	if m.GetDomain() != "dom" || len(uses(m)) != 1 || uses(m)[0].denied != 2 {
		t.Fatalf("reopened stream's first report = %v (domain %q), want idA with 2 denied and domain dom", uses(m), m.GetDomain())
	}
	if f.Allow(idA) {
		t.Fatal("assignment lost across the reconnect")
	}
	// The new stream works: a new bucket is reported on it.
	f.Allow(idB)
	m = recvWithin(t, ss2.reports, "new bucket on the reopened stream")
	if got := uses(m); len(got) != 1 || got[0].id != canonicalKey(idB) || m.GetDomain() != "" {
		t.Fatalf("report = %v (domain %q), want idB alone, no domain", got, m.GetDomain())
	}
}
