package window

import (
	"fmt"
	"testing"
	"time"
)

// sink keeps the compiler from discarding the decisions.
var sink Decision

func BenchmarkDecideCounter(b *testing.B) {
	benchCounter(b, Limit{Limit: 500, Window: time.Minute}, Counts{Prev: 400, Cur: 250}, 1_700_000_000_000)
}

func BenchmarkDecideCounterDenied(b *testing.B) {
	benchCounter(b, Limit{Limit: 7, Window: time.Minute}, Counts{Prev: 5, Cur: 4}, 1_700_000_018_000)
}

// benchCounter decides one hit with counts c under l, at instants that
// cycle through about a second from now.
func benchCounter(b *testing.B, l Limit, c Counts, now int64) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sink = l.DecideCounter(now+int64(i&1023), c, 1)
	}
}

func BenchmarkDecideCounterParallel(b *testing.B) {
	b.ReportAllocs()
	l := Limit{Limit: 500, Window: time.Minute}
	c := Counts{Prev: 400, Cur: 250}
	b.RunParallel(func(pb *testing.PB) {
		var d Decision
		now := int64(1_700_000_000_000)
		for pb.Next() {
			now++
			d = l.DecideCounter(now, c, 1)
		}
		_ = d
	})
}

func BenchmarkDecideGCRA(b *testing.B) {
	benchGCRA(b, 30_000_000)
}

func BenchmarkDecideGCRADenied(b *testing.B) {
	benchGCRA(b, 60_000_000)
}

// benchGCRA decides one hit under a limit of 7 per minute whose theoretical
// arrival time is ahead µs from now, at instants that cycle through about a
// second.
func benchGCRA(b *testing.B, ahead int64) {
	b.ReportAllocs()
	l := Limit{Limit: 7, Window: time.Minute, Algorithm: TokenBucket}
	now := int64(1_700_000_000_000)
	tat := now*1000 + ahead
	for i := 0; b.Loop(); i++ {
		sink, _ = l.DecideGCRA(now+int64(i&1023), tat, 1)
	}
}

func BenchmarkDecideLog(b *testing.B) {
	b.ReportAllocs()
	l := Limit{Limit: 10, Window: time.Second, Algorithm: SlidingLog}
	now := int64(1_700_000_000_000)
	log := make([]LogEntry, 12)
	for i := range log {
		log[i] = LogEntry{AtMs: now - 1500 + int64(i)*100, Hits: 1}
	}
	for i := 0; b.Loop(); i++ {
		sink = l.DecideLog(now+int64(i&63), log, 1)
	}
}

// BenchmarkDecideModes compares the cost of one decision of the default
// sliding window, with a coarse trail (a limit above ExactMax) and an
// exact one, and the two-bucket counter, on a key with three regions'
// counts in both buckets, 40% into the bucket, allowed. The exact trails
// hold the local region's hits of a key near its limit, a mark per hit.
func BenchmarkDecideModes(b *testing.B) {
	start := int64(1_700_000_040_000) / 60000 * 60000
	for _, lim := range []uint64{1 << 20, ExactMax} {
		l := Limit{Limit: lim, Window: time.Minute}
		w := l.WindowMs()
		var prev, cur [3]Trail
		for r := range prev {
			n := int64(600)
			if r > 0 {
				n = 200
			}
			for i := int64(0); i < n; i++ {
				prev[r].Add(i*w/n, w, 1, r == 0 && l.Exact())
				if i < n*2/5 {
					cur[r].Add(i*w/n, w, 1, r == 0 && l.Exact())
				}
			}
		}
		counts := Counts{}
		for r := range prev {
			counts.Prev += prev[r].Count()
			counts.Cur += cur[r].Count()
		}
		b.Run(fmt.Sprintf("limit=%d/two-bucket", lim), func(b *testing.B) {
			b.ReportAllocs()
			l := l
			l.Algorithm = SlidingWindowTwoBucket
			for i := 0; b.Loop(); i++ {
				sink = l.DecideCounter(start+24000+int64(i&1023), counts, 1)
			}
		})
		b.Run(fmt.Sprintf("limit=%d/default", lim), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				sink = l.DecideTrails(start+24000+int64(i&1023), prev[:], cur[:], 0, 1)
			}
		})
	}
}

// BenchmarkBucketAtCalendar finds the UTC calendar year that holds an
// instant, as a node does for the buckets of a key's reset instant, at
// instants that cycle through about a second.
func BenchmarkBucketAtCalendar(b *testing.B) {
	b.ReportAllocs()
	l := Limit{Limit: MaxLimit, Algorithm: FixedWindow, Calendar: Calendar{Unit: CalendarYear}}
	now := int64(1_700_000_000_000)
	var n int64
	for i := 0; b.Loop(); i++ {
		_, bk := l.BucketAt(now + int64(i&1023))
		n += bk
	}
	_ = n
}

// BenchmarkTrailCoarse gathers exact trails of 26 and 200 marks, a mark
// per 240 ms of a one-minute bucket (about one per coarse granule, as a
// key hit four times a second), into coarse granules, as the memory store
// does for every admission's replication trail.
func BenchmarkTrailCoarse(b *testing.B) {
	for _, marks := range []int64{26, 200} {
		b.Run(fmt.Sprint(marks), func(b *testing.B) {
			var t Trail
			for i := range marks {
				t.Add(i*240, 60_000, 1, true)
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n += len(t.Coarse(60_000))
			}
			_ = n
		})
	}
}
