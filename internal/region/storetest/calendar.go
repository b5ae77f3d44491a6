package storetest

import (
	"testing"
	"time"
	_ "time/tzdata" // the IANA database Go ships, whatever the host has

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// testCalendar: a calendar window counts per calendar bucket, whatever
// its length: the end of February in a leap year, a day of 23 hours when
// clocks go forward and one of 25 when they go back. Each bucket is named
// (minus its length, its start) in Vectors and Merge, and a remote
// region's total counts in it.
func testCalendar(t *testing.T, s region.Store, key string) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	utc := func(s string) time.Time {
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	cases := []struct {
		name       string
		cal        window.Calendar
		start, end time.Time // the bucket's bounds
		at         time.Time // the decisions' instant, in the bucket
	}{
		{"leap February", window.Calendar{Unit: window.CalendarMonth},
			utc("2024-02-01T00:00:00Z"), utc("2024-03-01T00:00:00Z"), utc("2024-02-29T23:59:59.5Z")},
		{"spring forward", window.Calendar{Unit: window.CalendarDay, Loc: ny},
			utc("2024-03-10T05:00:00Z"), utc("2024-03-11T04:00:00Z"), utc("2024-03-10T05:30:00Z")},
		{"fall back", window.Calendar{Unit: window.CalendarDay, Loc: ny},
			utc("2024-11-03T04:00:00Z"), utc("2024-11-04T05:00:00Z"), utc("2024-11-03T05:30:00Z")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := key + "/" + c.name
			l := window.Limit{Limit: 4, Algorithm: window.FixedWindow, Calendar: c.cal}
			w, b := -c.end.Sub(c.start), c.start.UnixMilli()
			// Another region admitted 1 in this bucket and 3 in the one
			// before, which does not count.
			merge(t, s, region.Total{Key: key, Window: w, Bucket: b, Region: "far", Count: 1})
			pw, pb := l.BucketAt(b - 1)
			merge(t, s, region.Total{Key: key, Window: pw, Bucket: pb, Region: "far", Count: 3})
			for i := range 3 {
				r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: c.at})
				if !r.Allowed || r.Bucket != b || r.Remaining != uint64(2-i) {
					t.Fatalf("request %d: Allowed %v Bucket %d Remaining %d, want true %d %d", i, r.Allowed, r.Bucket, r.Remaining, b, 2-i)
				}
				if got, want := r.ResetAfter, c.end.Sub(c.at); got != want {
					t.Errorf("request %d: ResetAfter = %v, want %v", i, got, want)
				}
			}
			r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: c.at})
			if got, want := r.RetryAfter, c.end.Sub(c.at); r.Allowed || got != want {
				t.Errorf("fifth hit: Allowed %v RetryAfter %v, want false %v", r.Allowed, got, want)
			}
			if got := RegionCounts(t, s, key, w, b); got["here"] != 3 || got["far"] != 1 {
				t.Errorf("Vectors(%v, %d) = %v, want here:3 far:1", w, b, got)
			}
			if r := Check(t, s, region.Request{Key: key, Limit: l, Hits: 1, Now: c.end.Add(-time.Millisecond), Peek: true}); r.Allowed {
				t.Errorf("allowed at the bucket's last ms: %+v", r.Decision)
			}
			// The next bucket starts empty, at the real reset instant.
			r = Check(t, s, region.Request{Key: key, Limit: l, Hits: 4, Now: c.end})
			if !r.Allowed || r.Bucket != c.end.UnixMilli() {
				t.Errorf("full limit at the bucket's end: Allowed %v Bucket %d, want true %d", r.Allowed, r.Bucket, c.end.UnixMilli())
			}
		})
	}
}
