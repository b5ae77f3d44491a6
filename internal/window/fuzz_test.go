package window

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"
)

// fuzzLimit maps arbitrary fuzz inputs onto a valid limit.
func fuzzLimit(limit, windowMs uint64, algo Algorithm) Limit {
	const maxMs = uint64(MaxWindow / time.Millisecond)
	return Limit{
		Limit:     1 + limit%MaxLimit,
		Window:    time.Duration(1000+windowMs%(maxMs-1000+1)) * time.Millisecond,
		Algorithm: algo,
	}
}

// fuzzNow maps an arbitrary instant into ±2^52 ms, where the µs of the
// token bucket and now+RetryAfter cannot overflow.
func fuzzNow(now int64) int64 { return now % (1 << 52) }

// checkInvariants checks the decision invariants of d, lim's answer to hits
// at now (lim not yet updated):
//   - allowed iff Estimate + hits <= limit (so never allowed above it);
//   - Remaining and Estimate-derived values within 0..limit;
//   - allowed => RetryAfter == 0; denied => RetryAfter > 0;
//   - RetryAfter is exact: the request is allowed at now+RetryAfter and
//     denied at every brute-forced instant before it (the first and last
//     64 ms and 64 spread between);
//   - ResetAfter and Remaining are exact (see exactRetry).
func checkInvariants(t *testing.T, lim limiter, l Limit, now int64, hits uint64, d Decision) {
	t.Helper()
	if got, want := d.Allowed, d.Estimate <= l.Limit && hits <= l.Limit-d.Estimate; got != want {
		t.Fatalf("%+v now %d hits %d: Allowed = %v with Estimate %d, want %v", l, now, hits, got, d.Estimate, want)
	}
	if d.Remaining > l.Limit {
		t.Fatalf("%+v: Remaining %d above the limit", l, d.Remaining)
	}
	if d.Limit != l.Limit {
		t.Fatalf("Limit = %d, want %d", d.Limit, l.Limit)
	}
	if d.Allowed && d.Remaining > l.Limit-hits {
		t.Fatalf("%+v: allowed %d hits, Remaining %d", l, hits, d.Remaining)
	}
	if d.ResetAfter < 0 || d.ResetAfter > 3*l.Window {
		t.Fatalf("%+v: ResetAfter %v out of 0..3W", l, d.ResetAfter)
	}
	if !d.Allowed && d.RetryAfter > d.ResetAfter+l.Window && d.RetryAfter != Never {
		t.Fatalf("%+v: RetryAfter %v far past ResetAfter %v", l, d.RetryAfter, d.ResetAfter)
	}
	if msg := exactRetry(lim, l, now, hits, d); msg != "" {
		t.Fatalf("%+v now %d hits %d: %s", l, now, hits, msg)
	}
	if d.Allowed {
		return
	}
	ra := ms(d.RetryAfter)
	var probes []int64
	for k := int64(0); k < 64 && k < ra; k++ {
		probes = append(probes, now+k, now+ra-1-k)
	}
	for k := int64(1); k < 64; k++ {
		probes = append(probes, now+ra*k/64)
	}
	for _, at := range probes {
		if at < now+ra && lim.decide(at, hits, false).Allowed {
			t.Fatalf("%+v now %d hits %d: allowed at +%d ms, before RetryAfter %v", l, now, hits, at-now, d.RetryAfter)
		}
	}
}

func FuzzDecideCounter(f *testing.F) {
	f.Add(uint64(500), uint64(60_000), uint64(400), uint64(250), int64(23*60_000+45_000), uint64(1), false)
	f.Add(uint64(100), uint64(60_000), uint64(90), uint64(50), int64(40_000), uint64(1), false)
	f.Add(uint64(7), uint64(60_000), uint64(5), uint64(4), int64(18_000), uint64(1), false)
	f.Add(uint64(7), uint64(60_000), uint64(5), uint64(4), int64(18_000), uint64(3), true)
	f.Add(uint64(MaxLimit), uint64(604_800_000), uint64(MaxLimit), uint64(MaxLimit-1), int64(1_700_000_000_000), uint64(MaxLimit/2), false)
	f.Add(uint64(1), uint64(1000), uint64(1), uint64(0), int64(-1), uint64(1), false)
	f.Add(uint64(3), uint64(1500), ^uint64(0), ^uint64(0), int64(999), uint64(2), true)
	f.Fuzz(func(t *testing.T, limit, windowMs, prev, cur uint64, now int64, hits uint64, fixed bool) {
		algo := SlidingWindow
		if fixed {
			algo = FixedWindow
		}
		l := fuzzLimit(limit, windowMs, algo)
		now = fuzzNow(now)
		hits = 1 + hits%l.Limit
		c := Counts{Prev: prev, Cur: cur}
		d := l.DecideCounter(now, c, hits)
		if got, want := d.Estimate, l.Estimate(now, c); got != want {
			t.Fatalf("Estimate = %d, Estimate() = %d", got, want)
		}
		if got, want := d.Bucket, Bucket(now, l.Window); got != want {
			t.Fatalf("Bucket = %d, want %d", got, want)
		}
		checkInvariants(t, &counterState{l: l, b: d.Bucket, c: c}, l, now, hits, d)
	})
}

func FuzzDecideGCRA(f *testing.F) {
	f.Add(uint64(7), uint64(60_000), int64(1_700_000_000_000), int64(0), uint64(1), false)
	f.Add(uint64(7), uint64(60_000), int64(1_700_000_000_000), int64(60_000_003), uint64(1), true)
	f.Add(uint64(3), uint64(10_000), int64(1_700_000_002_500), int64(7_500_001), uint64(1), true)
	f.Add(uint64(MaxLimit), uint64(1000), int64(1_700_000_000_000), int64(999_999), uint64(MaxLimit), true)
	f.Add(uint64(999), uint64(604_800_000), int64(-5), int64(-3), uint64(998), true)
	f.Fuzz(func(t *testing.T, limit, windowMs uint64, now, tatOff int64, hits uint64, hasState bool) {
		l := fuzzLimit(limit, windowMs, TokenBucket)
		// Instants after the epoch only: a TAT of 0 means "no state", so a
		// bucket whose TAT lands exactly on the epoch would read as full.
		now = fuzzNow(now)
		if now <= 0 {
			now = 1 - now
		}
		hits = 1 + hits%l.Limit
		var tat int64
		if hasState {
			// Any state a bucket can hold: from far behind now to cap ahead.
			tat = now*1000 + tatOff%(2*l.GCRACapacity())
		}
		d, next := l.DecideGCRA(now, tat, hits)
		switch {
		case !d.Allowed && next != tat:
			t.Fatalf("denied but the state changed %d -> %d", tat, next)
		case d.Allowed && next-now*1000 > l.GCRACapacity():
			t.Fatalf("new TAT %d µs ahead, capacity %d", next-now*1000, l.GCRACapacity())
		case d.Allowed && next != max(tat, now*1000)+l.GCRAIncrement(hits) && (tat != 0 || next != now*1000+l.GCRAIncrement(hits)):
			t.Fatalf("new TAT %d, want max(tat, now) + inc", next)
		}
		checkInvariants(t, &gcraState{l: l, tatUs: tat}, l, now, hits, d)
	})
}

func FuzzDecideLog(f *testing.F) {
	f.Add(uint64(5), uint64(1000), int64(4500), []byte{100, 1, 200, 2, 250, 2}, uint64(3))
	f.Add(uint64(3), uint64(10_000), int64(1_700_000_002_500), []byte{0, 1, 1, 2}, uint64(1))
	f.Add(uint64(1), uint64(1000), int64(0), []byte{}, uint64(1))
	f.Add(uint64(100), uint64(60_000), int64(1_700_000_000_000), []byte("a long log with many entries of various sizes"), uint64(40))
	f.Fuzz(func(t *testing.T, limit, windowMs uint64, now int64, raw []byte, hits uint64) {
		l := fuzzLimit(limit%200, windowMs, SlidingLog)
		now = fuzzNow(now)
		hits = 1 + hits%l.Limit
		// Two bytes per entry: how long ago (in W/128 steps, up to 2W ago,
		// a few in the future) and how many hits (0 to 15).
		var log []LogEntry
		for len(raw) >= 2 && len(log) < 256 {
			ago := (int64(raw[0]) - 8) * l.WindowMs() / 128
			log = append(log, LogEntry{AtMs: now - ago, Hits: uint64(raw[1] % 16)})
			raw = raw[2:]
		}
		slices.SortStableFunc(log, func(a, b LogEntry) int { return int(a.AtMs - b.AtMs) })
		var want uint64
		for _, e := range log {
			if e.AtMs > now-l.WindowMs() {
				want += e.Hits
			}
		}
		d := l.DecideLog(now, log, hits)
		if d.Estimate != want {
			t.Fatalf("Estimate = %d, want %d live hits", d.Estimate, want)
		}
		checkInvariants(t, &logState{l: l, log: log}, l, now, hits, d)
	})
}

// FuzzLimitFromBytes drives all three decisions from one byte string, for
// go test -fuzz to explore combinations of the fields at once.
func FuzzLimitFromBytes(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef0123456789"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 40 {
			return
		}
		u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[i*8:]) }
		for _, algo := range []Algorithm{SlidingWindow, FixedWindow} {
			l := fuzzLimit(u(0), u(1), algo)
			now := fuzzNow(int64(u(2)))
			hits := 1 + u(3)%l.Limit
			c := Counts{Prev: u(4) % (2 * l.Limit), Cur: u(3) % (l.Limit + 1)}
			checkInvariants(t, &counterState{l: l, b: Bucket(now, l.Window), c: c}, l, now, hits, l.DecideCounter(now, c, hits))
		}
		l := fuzzLimit(u(0), u(1), TokenBucket)
		now := fuzzNow(int64(u(2)))
		hits := 1 + u(3)%l.Limit
		tat := now*1000 + int64(u(4)%uint64(2*l.GCRACapacity()))
		d, _ := l.DecideGCRA(now, tat, hits)
		checkInvariants(t, &gcraState{l: l, tatUs: tat}, l, now, hits, d)
	})
}

// FuzzDecideTrails plays a sequence of requests and remote regions' hits,
// taken from the fuzzer's bytes, through the default sliding window and
// checks every decision's invariants (checkInvariants) and that the local
// region never admits more than the limit in a trailing window. Each step
// is 4 bytes: the time since the last step (ms, scaled to the window), a
// request's hits, and whether the step is a remote region's hits instead.
func FuzzDecideTrails(f *testing.F) {
	f.Add(uint64(100), uint64(10_000), []byte{0, 1, 0, 0, 10, 99, 0, 0, 200, 1, 1, 1})
	f.Add(uint64(5000), uint64(1_000), []byte{1, 200, 0, 2, 0, 50, 0, 0})
	f.Fuzz(func(t *testing.T, limit, windowMs uint64, steps []byte) {
		l := fuzzLimit(limit, windowMs, SlidingWindow)
		if l.Limit > 1<<20 {
			l.Limit = 1 + l.Limit%(1<<20)
		}
		s := newTrailState(l, 3)
		ex := &exactLog{w: l.WindowMs()}
		w := l.WindowMs()
		now := int64(1_700_000_000_000)/w*w + int64(windowMs%uint64(w))
		for i := 0; i+3 < len(steps) && i < 4*300; i += 4 {
			now += int64(binary.BigEndian.Uint16(steps[i:])) * w / 4096
			hits := 1 + uint64(steps[i+2])%l.Limit
			if steps[i+3]%4 == 3 {
				s.remote(1+int(steps[i+3]/4)%2, now, hits)
				continue
			}
			d := s.decide(now, hits, false)
			checkInvariants(t, trailLimiter{s}, l, now, hits, d)
			s.decide(now, hits, true)
			if d.Allowed {
				ex.add(arrival{now, hits})
				if c := ex.count(now); c > l.Limit {
					t.Fatalf("%v: %d hits admitted in the trailing window at %d", l, c, now)
				}
			}
		}
	})
}
