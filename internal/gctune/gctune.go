// Package gctune owns the node's garbage-collector pacing: while the live
// heap is small, it lets the heap grow by a fixed headroom between
// collections instead of by the live heap's size, so that a node with a
// few megabytes of live data does not collect dozens of times a second
// under load.
//
// Go's default (GOGC=100) starts a collection when the heap has grown by
// the live heap since the last one. A rate-limiter node keeps little live
// data and allocates fast (each request allocates a few kilobytes, most in
// grpc-go, net/http and the Redis client), so under load it collects many
// times a second. A live heap larger than the headroom is paced as by
// GOGC, so the headroom bounds the memory this costs; GOMEMLIMIT still
// caps the heap. docs/performance.md ("Garbage collection") has the
// figures.
package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// running is set while a Run that sets the process's GC percent runs.
var running atomic.Bool

// heapMinimum is the heap the runtime lets grow before the first
// collection at GOGC=100; it scales with the GC percent, so Percent keeps
// that floor within the headroom too.
const heapMinimum = 4 << 20

// Percent returns the GC percent that lets a heap of live bytes grow by
// headroom bytes before the next collection: headroom/live, at least base
// (GOGC) and at most what keeps the runtime's minimum heap, which scales
// with the percent, within the headroom.
func Percent(live, headroom uint64, base int) int {
	ceiling := int(min(float64(headroom)*100/heapMinimum, 1<<20))
	if ceiling <= base {
		return base
	}
	if live == 0 {
		return ceiling
	}
	return int(max(float64(base), min(float64(headroom)*100/float64(live), float64(ceiling))))
}

// Config configures Run. Zero fields mean their default.
type Config struct {
	// Headroom is how far the heap may grow between collections while the
	// live heap is smaller, in bytes. Required.
	Headroom uint64
	// Base is the GC percent when the live heap is at least Headroom.
	// Default 100, Go's.
	Base int
	// Cycles receives after each garbage collection, when Run sets the
	// percent again for the live heap that collection found: by default
	// from a finalizer armed again every cycle. (Polling on a timer
	// instead let a fast-growing heap pass the headroom several times
	// over: a collection applies the percent set for the live heap before
	// it.)
	Cycles <-chan struct{}
	// Live reads the live heap: the runtime's /gc/heap/live:bytes by
	// default.
	Live func() uint64
	// Set sets the GC percent and returns the previous one:
	// debug.SetGCPercent by default.
	Set func(int) int
}

// Run sets the GC percent for the live heap at start and after each
// garbage collection until ctx ends, then restores the percent it found.
// The GC percent is the process's: while one Run sets it (cfg.Set nil),
// another returns at once.
func Run(ctx context.Context, cfg Config) {
	if cfg.Set == nil {
		if !running.CompareAndSwap(false, true) {
			return
		}
		defer running.Store(false)
		cfg.Set = debug.SetGCPercent
	}
	if cfg.Base <= 0 {
		cfg.Base = 100
	}
	if cfg.Live == nil {
		cfg.Live = liveHeap()
	}
	if cfg.Cycles == nil {
		cycles, stop := gcCycles()
		defer stop()
		cfg.Cycles = cycles
	}
	last := Percent(cfg.Live(), cfg.Headroom, cfg.Base)
	orig := cfg.Set(last)
	defer cfg.Set(orig)
	for {
		select {
		case <-ctx.Done():
			return
		case <-cfg.Cycles:
		}
		if p := Percent(cfg.Live(), cfg.Headroom, cfg.Base); p != last {
			cfg.Set(p)
			last = p
		}
	}
}

// liveHeap returns a reader of the heap the last collection marked live.
func liveHeap() func() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	return func() uint64 {
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[0].Value.Uint64()
	}
}

// sentinel is what gcCycles's finalizer watches; its pointer field keeps
// it out of the tiny allocator, whose objects' finalizers may never run.
type sentinel struct {
	_ *byte
	_ [8]byte
}

// gcCycles returns a channel that receives after each garbage collection
// (at most one value waits), and a func that stops it at the next one.
func gcCycles() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	var stopped atomic.Bool
	var arm func()
	arm = func() {
		runtime.SetFinalizer(new(sentinel), func(*sentinel) {
			if stopped.Load() {
				return
			}
			select {
			case ch <- struct{}{}:
			default:
			}
			arm()
		})
	}
	arm()
	return ch, func() { stopped.Store(true) }
}
