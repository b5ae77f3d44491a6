package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// The goals on a small configuration: three regions 60 ms apart, limit
// 100 per 10 s (and per 1 s for a single region). The guard keeps a
// simultaneous burst within 1.10 x the limit (3 x without it), leaves a
// single active region at least 0.95 of the limit in steady state, and
// holds a partition within 1 + 1/R of the limit (plus, on the default
// counter, that counter's own error across regions).
func TestGoals(t *testing.T) {
	t.Parallel()
	d := 60 * time.Millisecond
	rows := table(new(bytes.Buffer), []scenario{
		{Name: "burst", Regions: 3, Delay: d, Window: 10 * time.Second, Limit: 100, run: burst},
		{Name: "burst", Regions: 10, Delay: 100 * time.Millisecond, Window: 10 * time.Second, Limit: 100, run: burst},
		{Name: "single", Regions: 3, Delay: d, Window: 10 * time.Second, Limit: 100, run: steady(10, 5, 0)},
		{Name: "partition", Regions: 3, Delay: d, Window: 10 * time.Second, Limit: 100, run: partition},
		{Name: "single", Regions: 3, Delay: d, Window: time.Second, Limit: 100, run: steady(10, 5, 0)},
		{Name: "all", Regions: 3, Delay: d, Window: 10 * time.Second, Limit: 100, run: steady(10, 5, 0, 1, 2)},
	})
	burst3, burst10, single, part, single1s, all := rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]
	if got, want := burst3.Off.Max, 3.0; got != want {
		t.Errorf("burst without guard: max %v, want %v (the test must see the problem)", got, want)
	}
	if got := burst3.On.Max; got > 1.10 {
		t.Errorf("burst, 3 regions, guard: max %v, want <= 1.10", got)
	}
	if got := burst10.On.Max; got > 1.10 {
		t.Errorf("burst, 10 regions, guard: max %v, want <= 1.10", got)
	}
	if got := single.On.SteadyMin; !(got >= 0.95) {
		t.Errorf("single region 10x, guard: steady min %v, want >= 0.95", got)
	}
	// On a 1 s window the trail counter frees a bunch of admissions when
	// its marks leave: the guard must keep up with it.
	if got := single1s.On.SteadyMin; !(got >= 0.95) {
		t.Errorf("single region 10x, 1 s window, guard: steady min %v, want >= 0.95", got)
	}
	if got, alone := single1s.On.Max, single1s.Off.Max; got > alone {
		t.Errorf("single region 10x, 1 s window: max %v with the guard, more than %v without", got, alone)
	}
	if got, alone := single.On.Max, single.Off.Max; got > alone {
		t.Errorf("single region 10x: max %v with the guard, more than %v without", got, alone)
	}
	// During a split the pool admits at most 1 + 1/R of the limit: the
	// majority its limit (its two regions take off each other's shares
	// of the previous horizon until they arrive, and round their shares
	// to sum to the headroom) and the minority its share (L - (R-1)
	// ceil(L/R) = 32 here), including when the split heals: a region
	// heard again stays silent until its resent totals can have arrived.
	if got, want := part.On.Max, 1+1.0/3; got > want {
		t.Errorf("partition, guard: max %v, want <= %v", got, want)
	}
	if got := all.On.Max; got > 1.05 {
		t.Errorf("every region at 10x, guard: max %v, want <= 1.05", got)
	}
	// A busy key's weights are fresh with every store result: its nodes
	// read its counts only before their first requests.
	if got := all.On.GuardReads; got > 3 {
		t.Errorf("every region at 10x on one key: the guard read its counts %d times, want at most once per node (3)", got)
	}
	if part.Off.Max < 1.9 {
		t.Errorf("partition without guard: max %v, want the unguarded error (>= 1.9) to show", part.Off.Max)
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	rows := table(&b, scenarios(200, 2000)[:1])
	if len(rows) != 1 || !strings.Contains(b.String(), "| burst | 3 | 60ms | 100/10s | 3.000 |") {
		t.Errorf("table:\n%s", b.String())
	}
}

// An idle region is heard as rlnode hears one: every heartbeat (100 ms by
// default), not every flush tick; a busy one every flush tick. The guard's
// views (ages, late regions, quiet keys) depend on it.
func TestHeartbeats(t *testing.T) {
	t.Parallel()
	cfg := config{Regions: 3, Delay: 60 * time.Millisecond, Flush: 20 * time.Millisecond, Suspicion: 500 * time.Millisecond, Guard: true,
		Limit: window.Limit{Limit: 100000, Window: 10 * time.Second}}
	start := int64(1_700_000_000_000)
	w := newWorld(cfg, start)
	for ms := int64(0); ms < 3000; ms += 5 {
		w.request(0, start+ms, "k") // region 0 admits every 5 ms, 1 and 2 idle
	}
	var busy, idle time.Duration
	for ms := int64(500); ms < 3000; ms++ {
		w.run(start + ms)
		ages := w.viewOf(1, 0).Ages
		busy, idle = max(busy, ages["r00"]), max(idle, ages["r02"])
	}
	if busy > cfg.Flush {
		t.Errorf("a busy region went unheard for %v, want at most a flush interval (%v)", busy, cfg.Flush)
	}
	if hb := w.heartbeat(); idle < hb-cfg.Flush || idle > hb {
		t.Errorf("an idle region went unheard for up to %v, want about a heartbeat (%v)", idle, hb)
	}
}

// With jitter, messages take the one-way delay and up to five times the
// jitter more, and the horizon allows for half the largest of the last
// round trips measured, as rlnode's does: more than the least delay,
// within the most.
func TestJitterHorizon(t *testing.T) {
	t.Parallel()
	for _, j := range []time.Duration{0, 15 * time.Millisecond} {
		cfg := config{Regions: 3, Delay: 60 * time.Millisecond, Flush: 20 * time.Millisecond, Suspicion: 500 * time.Millisecond, Guard: true,
			Limit: window.Limit{Limit: 100, Window: 10 * time.Second}, Jitter: j, JitterSeed: 7}
		start := int64(1_700_000_000_000)
		w := newWorld(cfg, start)
		lo, hi := time.Hour, time.Duration(0)
		for ms := int64(0); ms < 60_000; ms += 100 {
			w.run(start + ms)
			ow := w.viewOf(0, 0).Horizon - cfg.Flush
			lo, hi = min(lo, ow), max(hi, ow)
		}
		switch {
		case j == 0 && (lo != cfg.Delay || hi != cfg.Delay):
			t.Errorf("no jitter: one-way %v to %v, want %v", lo, hi, cfg.Delay)
		case j > 0 && (lo <= cfg.Delay || hi > cfg.Delay+5*j):
			t.Errorf("jitter %v: one-way %v to %v, want above %v and at most %v", j, lo, hi, cfg.Delay, cfg.Delay+5*j)
		}
	}
}
