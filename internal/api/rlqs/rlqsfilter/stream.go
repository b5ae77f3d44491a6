package rlqsfilter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// ErrRunning is returned by [Filter.Run] while another Run of the same
// filter is running: a filter has one stream.
var ErrRunning = errors.New("rlqsfilter: Run is already running")

// Run keeps a StreamRateLimitQuotas stream open to client until ctx is
// done, then returns ctx.Err().
//
// On each stream it sends, as Envoy's filter does:
//   - when the stream opens, every tracked bucket's usage since its last
//     report, with the domain (the first message of a stream, and only
//     it, carries the domain; a stream with no bucket yet sends nothing
//     until its first bucket);
//   - at once, a new bucket's first request, and a bucket's usage up to
//     the instant an assignment replaced its previous one;
//   - every ReportingInterval from the stream's open, every bucket's usage
//     since its last report, zero usage included;
//
// and applies each response as it arrives.
//
// When the stream fails — the server ends it, a Send or Recv fails, or it
// cannot be opened — Run logs the error, waits Config.ReconnectBackoff
// (fixed; default ReportingInterval, which is when Envoy's filter retries:
// at its next report) and opens a new stream, until ctx is done. Buckets
// keep their assignments across the gap (they expire on their own TTLs),
// and their usage keeps counting: the new stream's first message carries
// everything since each bucket's last report. Usage already taken into a
// message that could not be sent is lost, as in Envoy.
func (f *Filter) Run(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient) error {
	if !f.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer f.running.Store(false)
	for {
		err := f.runStream(ctx, client)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f.log.Warn("rlqsfilter: stream ended; reopening", "err", err, "backoff", f.cfg.ReconnectBackoff)
		t := time.NewTimer(f.cfg.ReconnectBackoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// runStream runs one stream until it fails or ctx is done.
func (f *Filter) runStream(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.StreamRateLimitQuotas(sctx)
	if err != nil {
		return fmt.Errorf("rlqsfilter: open stream: %w", err)
	}

	// Responses are read on their own goroutine (grpc allows one Recv and
	// one Send concurrently); it is waited for before runStream returns,
	// so no response of an old stream is applied after it.
	var recvErr error
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr = err
				return
			}
			f.apply(resp)
		}
	}()
	defer func() {
		cancel()
		<-recvDone
	}()

	f.mu.Lock()
	f.stats.Streams++
	f.connected = true
	// Anything queued before is superseded: every bucket's usage goes in
	// the first message.
	f.outbox = nil
	first := f.takeReport(true, f.now())
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.connected = false
		f.outbox = nil // taken, not sent: lost with the stream
		f.mu.Unlock()
	}()

	domainSent := false
	send := func(m *rlqsv3.RateLimitQuotaUsageReports) error {
		if m == nil {
			return nil
		}
		if !domainSent {
			m.Domain = f.cfg.Domain
			domainSent = true
		}
		if err := stream.Send(m); err != nil {
			if errors.Is(err, io.EOF) {
				// The stream is over; Recv has (or will soon have) the
				// status that ended it.
				<-recvDone
				return streamEnded(recvErr)
			}
			return fmt.Errorf("rlqsfilter: send usage reports: %w", err)
		}
		f.mu.Lock()
		f.stats.Reports++
		f.mu.Unlock()
		return nil
	}
	tick := time.NewTicker(f.cfg.ReportingInterval)
	defer tick.Stop()
	if err := send(first); err != nil {
		return err
	}
	for {
		var all bool
		select {
		case <-ctx.Done():
			return fmt.Errorf("rlqsfilter: stream: %w", ctx.Err())
		case <-recvDone:
			return streamEnded(recvErr)
		case <-f.wake:
		case <-tick.C:
			all = true
		}
		f.mu.Lock()
		m := f.takeReport(all, f.now())
		f.mu.Unlock()
		if err := send(m); err != nil {
			return err
		}
	}
}

// streamEnded describes the error that ended a stream's Recv.
func streamEnded(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("rlqsfilter: stream closed by the server: %w", err)
	}
	return fmt.Errorf("rlqsfilter: receive responses: %w", err)
}
