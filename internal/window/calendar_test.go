package window

import (
	"testing"
	"time"
	_ "time/tzdata" // the IANA database Go ships, whatever the host has
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCalendarBuckets: buckets of unequal lengths, across daylight-saving
// changes and leap years, with the IANA database Go embeds.
func TestCalendarBuckets(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	london := mustLoc(t, "Europe/London")
	kolkata := mustLoc(t, "Asia/Kolkata")
	lordHowe := mustLoc(t, "Australia/Lord_Howe")
	santiago := mustLoc(t, "America/Santiago")
	for _, tc := range []struct {
		name       string
		cal        Calendar
		at         string // RFC 3339
		start, end string // RFC 3339
		length     time.Duration
	}{
		{"UTC minute", Calendar{Unit: CalendarMinute}, "2026-03-08T07:30:15Z", "2026-03-08T07:30:00Z", "2026-03-08T07:31:00Z", time.Minute},
		{"UTC day by default", Calendar{Unit: CalendarDay}, "2026-03-08T23:59:59.999Z", "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z", 24 * time.Hour},
		{"spring forward: a 23-hour day", Calendar{CalendarDay, ny}, "2026-03-08T12:00:00-04:00", "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00", 23 * time.Hour},
		{"fall back: a 25-hour day", Calendar{CalendarDay, ny}, "2026-11-01T23:00:00-05:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25 * time.Hour},
		{"the hour before spring forward", Calendar{CalendarHour, ny}, "2026-03-08T01:59:00-05:00", "2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", time.Hour},
		{"first 01:00 hour when clocks go back", Calendar{CalendarHour, london}, "2026-10-25T01:30:00+01:00", "2026-10-25T01:00:00+01:00", "2026-10-25T01:00:00Z", time.Hour},
		{"second 01:00 hour when clocks go back", Calendar{CalendarHour, london}, "2026-10-25T01:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z", time.Hour},
		{"hour half an hour off UTC", Calendar{CalendarHour, kolkata}, "2026-05-01T10:10:00Z", "2026-05-01T09:30:00Z", "2026-05-01T10:30:00Z", time.Hour},
		{"Lord Howe: a 30-minute DST shift, the hour before it", Calendar{CalendarHour, lordHowe}, "2026-10-04T01:45:00+10:30", "2026-10-04T01:00:00+10:30", "2026-10-04T02:30:00+11:00", time.Hour},
		{"Lord Howe: the half hour after it", Calendar{CalendarHour, lordHowe}, "2026-10-04T02:45:00+11:00", "2026-10-04T02:30:00+11:00", "2026-10-04T03:00:00+11:00", 30 * time.Minute},
		{"Santiago: midnight skipped, the day starts at 01:00", Calendar{CalendarDay, santiago}, "2026-09-06T12:00:00-03:00", "2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00", 23 * time.Hour},
		{"February of a leap year", Calendar{Unit: CalendarMonth}, "2028-02-29T23:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", 29 * 24 * time.Hour},
		{"February of a common year", Calendar{Unit: CalendarMonth}, "2027-02-28T23:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z", 28 * 24 * time.Hour},
		{"a month with a DST change", Calendar{CalendarMonth, ny}, "2026-03-31T23:59:00-04:00", "2026-03-01T00:00:00-05:00", "2026-04-01T00:00:00-04:00", 31*24*time.Hour - time.Hour},
		{"a leap year", Calendar{Unit: CalendarYear}, "2028-12-31T12:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z", 366 * 24 * time.Hour},
		{"a year in New York", Calendar{CalendarYear, ny}, "2026-01-01T00:00:00-05:00", "2026-01-01T00:00:00-05:00", "2027-01-01T00:00:00-05:00", 365 * 24 * time.Hour},
		{"an ISO week across the new year", Calendar{Unit: CalendarWeek}, "2027-01-01T10:00:00Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z", 7 * 24 * time.Hour},
		{"a week on its Sunday", Calendar{CalendarWeek, ny}, "2026-03-08T23:00:00-04:00", "2026-03-02T00:00:00-05:00", "2026-03-09T00:00:00-04:00", 7*24*time.Hour - time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at, _ := time.Parse(time.RFC3339Nano, tc.at)
			want0, _ := time.Parse(time.RFC3339, tc.start)
			want1, _ := time.Parse(time.RFC3339, tc.end)
			start, end := tc.cal.Bucket(at)
			if !start.Equal(want0) || !end.Equal(want1) {
				t.Errorf("Bucket(%s) = %s .. %s, want %s .. %s", tc.at, start.Format(time.RFC3339), end.Format(time.RFC3339), tc.start, tc.end)
			}
			if got := end.Sub(start); got != tc.length {
				t.Errorf("bucket length %v, want %v", got, tc.length)
			}
			// Every instant of the bucket is in it; the next bucket starts
			// at its end.
			for _, u := range []time.Time{start, end.Add(-time.Millisecond)} {
				if s, e := tc.cal.Bucket(u); !s.Equal(start) || !e.Equal(end) {
					t.Errorf("Bucket(%s) = %s .. %s, want the same bucket", u.Format(time.RFC3339Nano), s, e)
				}
			}
			if s, _ := tc.cal.Bucket(end); !s.Equal(end) {
				t.Errorf("the bucket after starts at %s, want %s", s, end)
			}
			if got, want := tc.cal.Index(at), start.UnixMilli(); got != want {
				t.Errorf("Index = %d, want %d", got, want)
			}
		})
	}
}

// TestCalendarContiguous: over two years in several zones, each unit's
// buckets tile time: each starts where the last ended, and holds its
// instants.
func TestCalendarContiguous(t *testing.T) {
	for _, name := range []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata", "Pacific/Chatham"} {
		loc := mustLoc(t, name)
		for u := CalendarHour; u <= CalendarYear; u++ {
			c := Calendar{u, loc}
			from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			_, end := c.Bucket(from)
			for end.Before(from.AddDate(2, 0, 0)) {
				s, e := c.Bucket(end)
				if !s.Equal(end) || !e.After(s) {
					t.Fatalf("%s %v: after a bucket ending %s comes %s .. %s", name, u, end, s, e)
				}
				if mid := s.Add(e.Sub(s) / 2); !func() bool { a, b := c.Bucket(mid); return a.Equal(s) && b.Equal(e) }() {
					t.Fatalf("%s %v: the middle of %s .. %s is not in it", name, u, s, e)
				}
				end = e
			}
		}
	}
}

// TestCalendarUTCShortcut: in UTC, whose midnights are never skipped,
// days, weeks, months and years start where the general search finds
// them (run here under a zone of offset 0 that is not time.UTC, which
// the shortcut leaves to the search), as UTC times.
func TestCalendarUTCShortcut(t *testing.T) {
	zero := time.FixedZone("UTC", 0)
	at := time.Date(1999, 12, 25, 7, 0, 0, 0, time.UTC)
	for at.Year() < 2030 {
		for u := CalendarDay; u <= CalendarYear; u++ {
			s, e := Calendar{Unit: u}.Bucket(at)
			ws, we := Calendar{u, zero}.Bucket(at)
			if !s.Equal(ws) || !e.Equal(we) || s.Location() != time.UTC || e.Location() != time.UTC {
				t.Fatalf("%v at %s: %s .. %s, want %s .. %s in UTC", u, at, s, e, ws, we)
			}
		}
		at = at.Add(61*time.Hour + 17*time.Minute)
	}
}

// TestDecideCalendar: "10,000 calls per month, resetting on the 1st" in
// New York: allowed while the month's count fits, then denied until the
// month ends; reset_after is the real end of the month.
func TestDecideCalendar(t *testing.T) {
	c := Calendar{CalendarMonth, mustLoc(t, "America/New_York")}
	now := time.Date(2026, 2, 27, 12, 0, 0, 0, c.Loc)
	monthEnd := time.Date(2026, 3, 1, 0, 0, 0, 0, c.Loc)
	d := c.DecideCalendar(now, 10000, 9999, 1)
	if !d.Allowed || d.Remaining != 0 || d.ResetAfter != monthEnd.Sub(now) || d.RetryAfter != 0 {
		t.Errorf("last call of the month: %+v, want allowed, 0 remaining, reset after %v", d, monthEnd.Sub(now))
	}
	d = c.DecideCalendar(now, 10000, 10000, 1)
	if d.Allowed || d.RetryAfter != monthEnd.Sub(now) {
		t.Errorf("over the month's quota: %+v, want denied until %v", d, monthEnd)
	}
	if d := c.DecideCalendar(now, 10000, 0, 10001); d.Allowed || d.RetryAfter != Never {
		t.Errorf("more than the quota at once: %+v, want denied for ever", d)
	}
	if got, want := d.Bucket, time.Date(2026, 2, 1, 0, 0, 0, 0, c.Loc).UnixMilli(); got != want {
		t.Errorf("Bucket = %d, want February's start %d", got, want)
	}
}

// TestCalendarLimit: a Limit with a Calendar validates only as a fixed
// window without a length, names its buckets (minus the length, the
// start) as the stores and replication do, and decides as
// DecideCalendar through DecideCounter.
func TestCalendarLimit(t *testing.T) {
	month := Limit{Limit: 10, Algorithm: FixedWindow, Calendar: Calendar{Unit: CalendarMonth}}
	if err := month.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", month, err)
	}
	for _, bad := range []Limit{
		{Limit: 10, Algorithm: SlidingWindow, Calendar: month.Calendar},
		{Limit: 10, Algorithm: FixedWindow, Window: time.Hour, Calendar: month.Calendar},
		{Limit: 10, Algorithm: FixedWindow, Calendar: Calendar{Unit: CalendarYear + 1}},
		{Limit: 0, Algorithm: FixedWindow, Calendar: month.Calendar},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
	at := time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC) // a leap year
	start := time.Date(2028, 2, 1, 0, 0, 0, 0, time.UTC)
	end := time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)
	w, b := month.BucketAt(at.UnixMilli())
	if w != -29*24*time.Hour || b != start.UnixMilli() {
		t.Fatalf("BucketAt = %v, %d, want %v, %d", w, b, -29*24*time.Hour, start.UnixMilli())
	}
	if got := month.BucketWindow(b); got != w {
		t.Errorf("BucketWindow(%d) = %v, want %v", b, got, w)
	}
	if s, e := BucketSpan(w, b); s != start.UnixMilli() || e != end.UnixMilli() {
		t.Errorf("BucketSpan = %d, %d, want %d, %d", s, e, start.UnixMilli(), end.UnixMilli())
	}
	if !ValidCalendarBucket(w, b) || ValidCalendarBucket(w, b+1) || ValidCalendarBucket(time.Hour, b) {
		t.Error("ValidCalendarBucket accepts a bad bucket or refuses a good one")
	}
	fixed := Limit{Limit: 10, Window: time.Minute, Algorithm: FixedWindow}
	if w, b := fixed.BucketAt(at.UnixMilli()); w != time.Minute || b != at.UnixMilli()/60000 {
		t.Errorf("fixed BucketAt = %v, %d", w, b)
	}
	d := month.DecideCounter(at.UnixMilli(), Counts{Cur: 9, Prev: 100}, 1)
	if !d.Allowed || d.Remaining != 0 || d.Bucket != b || d.ResetAfter != end.Sub(at) {
		t.Errorf("DecideCounter = %+v, want allowed, 0 remaining, bucket %d, reset after %v", d, b, end.Sub(at))
	}
	if d := month.DecideCounter(at.UnixMilli(), Counts{Cur: 10}, 1); d.Allowed || d.RetryAfter != end.Sub(at) {
		t.Errorf("DecideCounter at the limit = %+v, want denied until %v", d, end.Sub(at))
	}
}
