package region

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// The Failover's circuit breaker: timeouts on the primary, the count of
// consecutive failures that opens the breaker, the probes that close it,
// and readiness.

// Ping reports whether the node is ready to decide:
//
//   - PolicyClosed: only while the primary answers (a closed node denies
//     everything otherwise);
//   - PolicyLocal: while the primary answers, and during an outage of a
//     primary that answered since start (the fallback then holds the
//     counts this node last saw, and every node of the region shares the
//     outage: taking them all out of service would stop the region), but
//     not while the primary has not answered once since start: such a node
//     has no counts to decide from and may well be misconfigured, so a load
//     balancer should prefer its peers;
//   - PolicyOpen: always; the node admits everything while the primary is
//     down, at start or later, so readiness would change nothing.
//
// While the breaker is closed, Ping probes the primary (within Timeout) and
// counts a failure toward the breaker, so that an idle node notices an
// outage too; see Status for the mode.
func (f *Failover) Ping(ctx context.Context) error {
	if !f.open.Load() {
		if err := f.probe(ctx); err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("region: ping: %w", cerr)
			}
			f.failed(err)
			if f.cfg.Policy == PolicyClosed || f.neverReached() {
				return fmt.Errorf("region: ping: %w: %w", ErrUnavailable, err)
			}
			return nil
		}
		f.fails.Store(0)
		return nil
	}
	if f.cfg.Policy == PolicyClosed {
		return fmt.Errorf("%w: %s", ErrUnavailable, f.Status())
	}
	if f.neverReached() {
		return fmt.Errorf("%w: not reached since start: %s", ErrUnavailable, f.Status())
	}
	return nil
}

// neverReached reports whether readiness waits for the primary's first
// answer since start (PolicyLocal and PolicyClosed).
func (f *Failover) neverReached() bool {
	return f.unreached.Load() && f.cfg.Policy != PolicyOpen
}

// callPrimary runs primary.Check within Timeout: a primary that bounds
// its own calls (Redis: one timer per round trip) does so, others get a
// context with that deadline. It writes res only on success that the
// caller may trust.
func (f *Failover) callPrimary(ctx context.Context, reqs []Request, res []Result) error {
	var err error
	if f.bounded {
		err = f.primary.Check(ctx, reqs, res)
	} else {
		tctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
		err = f.primary.Check(tctx, reqs, res)
		cancel()
		if err != nil && ctx.Err() == nil && tctx.Err() != nil {
			err = fmt.Errorf("%w after %v", ErrTimeout, f.cfg.Timeout)
		}
	}
	if err == nil && f.unreached.Load() {
		f.unreached.Store(false)
	}
	return err
}

// count counts a failure of the primary.
func (f *Failover) count(err error) {
	f.failures.Add(1)
	if errors.Is(err, ErrTimeout) {
		f.timeouts.Add(1)
	}
}

// failed records a failure of the primary and opens the breaker at
// Threshold consecutive failures.
func (f *Failover) failed(err error) {
	f.count(err)
	n := f.fails.Add(1)
	if n >= int64(f.cfg.Threshold) {
		f.trip(err, "store: primary unavailable, deciding under the failure policy", "failures", n)
	}
}

// startDown opens the breaker of a Failover whose primary did not answer
// at start: decisions follow the policy from the first, and the probes
// connect in the background.
func (f *Failover) startDown(err error) {
	f.unreached.Store(true)
	f.count(err)
	f.trip(err, "store: primary unreachable at start, deciding under the failure policy and retrying in the background")
}

// trip opens the breaker, unless it is open already, and starts the probes;
// it logs msg with attrs once per opening.
func (f *Failover) trip(err error, msg string, attrs ...any) {
	f.mu.Lock()
	f.lastErr = err.Error()
	opened := false
	if !f.open.Load() {
		f.open.Store(true)
		f.since = f.cfg.Now()
		f.transitions++
		opened = true
	}
	f.mu.Unlock()
	if !opened {
		return
	}
	f.log.Warn(msg, append(attrs, "err", err, "probe_in", f.cfg.ProbeMin)...)
	f.probes.Add(1)
	go func() {
		defer f.probes.Done()
		f.probeLoop()
	}()
}

// probeLoop probes the primary with backoff until it answers, then closes
// the breaker and writes the fallback's counts back.
func (f *Failover) probeLoop() {
	delay := f.cfg.ProbeMin
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		f.mu.Lock()
		f.probing = true
		f.mu.Unlock()
		err := f.probe(context.Background())
		f.mu.Lock()
		f.probing = false
		if err != nil {
			f.lastErr = err.Error()
			f.mu.Unlock()
			f.count(err)
			delay = min(2*delay, f.cfg.ProbeMax)
			f.log.Debug("store: probe failed", "err", err, "next_in", delay)
			t.Reset(delay)
			continue
		}
		outage := f.cfg.Now().Sub(f.since)
		f.since = f.cfg.Now()
		f.lastErr = ""
		f.transitions++
		f.fails.Store(0)
		f.open.Store(false)
		f.mu.Unlock()
		f.log.Info("store: primary answers again, deciding with it", "outage", outage.Round(time.Millisecond))
		f.writeBackRetrying()
		return
	}
}

// probe asks the primary for a Peek decision, within Timeout.
func (f *Failover) probe(ctx context.Context) error {
	q := []Request{{Key: "rlcluster:probe", Limit: window.Limit{Limit: 1, Window: time.Second}, Hits: 1, Now: f.cfg.Now(), Peek: true}}
	return f.callPrimary(ctx, q, make([]Result, 1))
}
