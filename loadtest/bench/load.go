package main

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Load says how to drive a workload.
type Load struct {
	Conns    int           // concurrent requests (closed loop) or workers (open loop)
	Rate     float64       // open loop: requests per second; 0 means closed loop
	Warmup   time.Duration // unmeasured time before Duration
	Duration time.Duration // measured time
	// MaxRequests, when positive, bounds the requests sent over Warmup
	// and Duration together; the run ends early when they are sent.
	MaxRequests int64
}

// tally is what one worker measured.
type tally struct {
	lat                     []time.Duration
	requests, allowed, deny int64
	errors, unsent          int64
	firstErr                error
}

func (t *tally) record(lat time.Duration, a, d int, err error) {
	if err != nil {
		t.errors++
		if t.firstErr == nil {
			t.firstErr = err
		}
		return
	}
	t.requests++
	t.allowed += int64(a)
	t.deny += int64(d)
	t.lat = append(t.lat, lat)
}

// Outcome is the merged measurement of a run.
type Outcome struct {
	Requests, Allowed, Denied, Errors, Unsent int64
	Elapsed                                   time.Duration
	Latencies                                 Latencies
	FirstErr                                  error
}

func merge(ts []*tally, elapsed time.Duration, extra []time.Duration) Outcome {
	o := Outcome{Elapsed: elapsed}
	n := len(extra)
	for _, t := range ts {
		n += len(t.lat)
	}
	all := make([]time.Duration, 0, n)
	for _, t := range ts {
		o.Requests += t.requests
		o.Allowed += t.allowed
		o.Denied += t.deny
		o.Errors += t.errors
		o.Unsent += t.unsent
		if o.FirstErr == nil {
			o.FirstErr = t.firstErr
		}
		all = append(all, t.lat...)
	}
	all = append(all, extra...)
	o.Latencies = Summarise(all)
	return o
}

// startWorkers starts n workers on wg, each running work with a tally of
// its own (with room for expect latencies), and returns the tallies.
func startWorkers(wg *sync.WaitGroup, n, expect int, work func(t *tally)) []*tally {
	ts := make([]*tally, n)
	for k := range ts {
		t := &tally{lat: make([]time.Duration, 0, expect)}
		ts[k] = t
		wg.Go(func() { work(t) })
	}
	return ts
}

// Run drives w through c as l says and returns what it measured. It stops
// at the end of l.Warmup+l.Duration or when ctx is done, whichever is first;
// requests in flight at the end get a grace of a few seconds.
func Run(ctx context.Context, c Client, w *Workload, l Load) Outcome {
	if l.Rate > 0 {
		return runOpen(ctx, c, w, l)
	}
	return runClosed(ctx, c, w, l)
}

// runClosed keeps l.Conns requests in flight: each worker sends its next
// request when the previous answer arrives.
func runClosed(ctx context.Context, c Client, w *Workload, l Load) Outcome {
	start := time.Now()
	measureFrom := start.Add(l.Warmup)
	end := measureFrom.Add(l.Duration)
	rctx, cancel := context.WithDeadline(ctx, end.Add(5*time.Second))
	defer cancel()
	expect := int(float64(l.Duration/time.Second+1) * 2000)
	if l.MaxRequests > 0 {
		expect = min(expect, int(l.MaxRequests/int64(l.Conns))+16)
	}
	var sent atomic.Int64
	var wg sync.WaitGroup
	ts := startWorkers(&wg, l.Conns, expect, func(t *tally) {
		var buf bytes.Buffer
		for rctx.Err() == nil {
			i := w.random()
			t0 := time.Now()
			if !t0.Before(end) || (l.MaxRequests > 0 && sent.Add(1) > l.MaxRequests) {
				return
			}
			a, d, err := c.Do(rctx, w, i, &buf)
			if t0.Before(measureFrom) {
				continue
			}
			t.record(time.Since(t0), a, d, err)
		}
	})
	wg.Wait()
	elapsed := l.Duration
	if now := time.Now(); now.Before(end) { // stopped early by ctx or MaxRequests
		elapsed = max(now.Sub(measureFrom), time.Millisecond)
	}
	return merge(ts, elapsed, nil)
}

// runOpen sends requests at l.Rate per second, whatever the answers do: a
// dispatcher hands each request's due time to l.Conns workers, and latency
// is measured from the due time, so queueing behind slow answers counts.
// Requests still queued at the end are counted as Unsent and enter the
// latencies with their wait so far (a lower bound).
func runOpen(ctx context.Context, c Client, w *Workload, l Load) Outcome {
	start := time.Now()
	sched := Schedule{Start: start, Rate: l.Rate}
	measureFrom := start.Add(l.Warmup)
	end := measureFrom.Add(l.Duration)
	total := sched.Total(l.Warmup + l.Duration)
	if l.MaxRequests > 0 {
		total = min(total, l.MaxRequests)
	}
	rctx, cancel := context.WithDeadline(ctx, end.Add(5*time.Second))
	defer cancel()

	due := make(chan time.Time, l.Conns)
	var stopped atomic.Bool
	var finished time.Time // written before stopped is set
	expect := int(l.Rate*l.Duration.Seconds()/float64(l.Conns)) + 16
	var wg sync.WaitGroup
	ts := startWorkers(&wg, l.Conns, expect, func(t *tally) {
		var buf bytes.Buffer
		for at := range due {
			if stopped.Load() {
				// Queued but not sent before the end.
				t.unsent++
				if !at.Before(measureFrom) {
					t.lat = append(t.lat, finished.Sub(at))
				}
				continue
			}
			a, d, err := c.Do(rctx, w, w.random(), &buf)
			if at.Before(measureFrom) {
				continue
			}
			t.record(time.Since(at), a, d, err)
		}
	})

	// Dispatch: hand out every request that is due, then sleep until the
	// next one. A full channel blocks the dispatcher; due times keep their
	// schedule, so the wait shows up in the latencies.
	var sent int64
	endTimer := time.NewTimer(time.Until(end))
	defer endTimer.Stop()
dispatch:
	for sent < total {
		now := time.Now()
		if !now.Before(end) || ctx.Err() != nil {
			break
		}
		for n := min(sched.Due(now), total); sent < n; sent++ {
			select {
			case due <- sched.At(sent):
			case <-rctx.Done():
				break dispatch
			case <-endTimer.C:
				break dispatch
			}
		}
		if d := time.Until(sched.At(sent)); d > 0 {
			time.Sleep(d)
		}
	}
	finished = time.Now()
	// What was due but not sent before the end is unsent.
	missed := max(min(sched.Due(finished), total)-sent, 0)
	stopped.Store(true)
	close(due)
	wg.Wait()
	var unsentLat []time.Duration
	for i := sent; i < sent+missed; i++ {
		if at := sched.At(i); !at.Before(measureFrom) {
			unsentLat = append(unsentLat, finished.Sub(at))
		}
	}
	o := merge(ts, min(max(finished.Sub(measureFrom), time.Millisecond), l.Duration), unsentLat)
	o.Unsent += missed
	return o
}
