package window

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // zones by name even on a host without the IANA database
)

// CalendarUnit is the length of a calendar window: its buckets are the
// calendar's minutes, hours, days, ISO weeks (from Monday), months or
// years in a time zone, so they are of unequal lengths (a day across a
// daylight-saving change is 23 or 25 hours, February 28 or 29 days).
type CalendarUnit uint8

// The calendar units. The zero value is no calendar: the window is a
// fixed duration.
const (
	CalendarMinute CalendarUnit = iota + 1
	CalendarHour
	CalendarDay
	CalendarWeek
	CalendarMonth
	CalendarYear
)

// String returns the unit's name as configuration spells it.
func (u CalendarUnit) String() string {
	switch u {
	case CalendarMinute:
		return "minute"
	case CalendarHour:
		return "hour"
	case CalendarDay:
		return "day"
	case CalendarWeek:
		return "week"
	case CalendarMonth:
		return "month"
	case CalendarYear:
		return "year"
	}
	return fmt.Sprintf("CalendarUnit(%d)", uint8(u))
}

// Longest returns the longest bucket of the unit in any zone: its
// length plus an hour of a clock change (a leap year's for a year), 0
// for no unit. Node and token ceilings on a window bound it.
func (u CalendarUnit) Longest() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case CalendarMinute:
		return time.Minute
	case CalendarHour:
		return time.Hour
	case CalendarDay:
		return day + time.Hour
	case CalendarWeek:
		return 7*day + time.Hour
	case CalendarMonth:
		return 31*day + time.Hour
	case CalendarYear:
		return 366*day + time.Hour
	}
	return 0
}

// ErrCalendarUnit is returned by ParseCalendarUnit for an unknown name.
var ErrCalendarUnit = errors.New("window: unknown calendar unit (want minute, hour, day, week, month or year)")

// ParseCalendarUnit parses a unit's name, in any case.
func ParseCalendarUnit(s string) (CalendarUnit, error) {
	for u := CalendarMinute; u <= CalendarYear; u++ {
		if strings.EqualFold(s, u.String()) {
			return u, nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrCalendarUnit, s)
}

// ErrTimeZone is returned by ParseCalendar for a zone it cannot load.
var ErrTimeZone = errors.New("window: unknown time zone (want an IANA name such as UTC or Europe/Berlin)")

// MaxTimeZoneName bounds a time zone's name (the IANA database's longest
// is 32 bytes).
const MaxTimeZoneName = 64

// ParseCalendar returns the calendar of the unit and the IANA time zone
// named, UTC when zone is empty. Zones load as time.LoadLocation loads
// them, from the copy of the IANA database Go embeds when the host has
// none; "Local", the host's own zone, is refused.
func ParseCalendar(unit, zone string) (Calendar, error) {
	u, err := ParseCalendarUnit(unit)
	if err != nil {
		return Calendar{}, err
	}
	if zone == "" || zone == "UTC" {
		return Calendar{Unit: u}, nil
	}
	if len(zone) > MaxTimeZoneName || zone == "Local" {
		return Calendar{}, fmt.Errorf("%w: %.64q", ErrTimeZone, zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return Calendar{}, fmt.Errorf("%w: %q", ErrTimeZone, zone)
	}
	return Calendar{Unit: u, Loc: loc}, nil
}

// Zone returns the name of c's time zone: "UTC" by default.
func (c Calendar) Zone() string { return c.loc().String() }

// Calendar is a calendar window: fixed windows aligned to the calendar
// of a time zone. The zero Loc means UTC. A Calendar is a small value,
// safe to copy and to use from many goroutines (*time.Location is).
type Calendar struct {
	Unit CalendarUnit
	Loc  *time.Location
}

// loc returns c's zone, UTC by default.
func (c Calendar) loc() *time.Location {
	if c.Loc == nil {
		return time.UTC
	}
	return c.Loc
}

// Bucket returns the calendar bucket that holds t: its first instant and
// the first instant of the next one (start <= t < end). Its identity,
// the same on every node whatever its own zone, is start's Unix
// milliseconds ([Calendar.Index]).
//
// Minutes and hours are cut on the zone's wall clock at t's offset (an
// hour in a zone half an hour off UTC starts at :30 UTC; the hour repeated
// when clocks go back is two buckets). Days, weeks, months and years start
// at midnight of their first date; a date whose midnight a clock change
// skips starts at the first instant of that date.
func (c Calendar) Bucket(t time.Time) (start, end time.Time) {
	loc := c.loc()
	t = t.In(loc)
	switch c.Unit {
	case CalendarMinute, CalendarHour:
		unit := int64(60)
		if c.Unit == CalendarHour {
			unit = 3600
		}
		// The wall clock's bucket at t's offset, cut where the offset
		// changes: a clock change ends a bucket early or starts one late.
		_, off := t.Zone()
		wall := t.Unix() + int64(off)
		s := wall - mod(wall, unit) - int64(off)
		start, end = time.Unix(s, 0), time.Unix(s+unit, 0)
		zs, ze := t.ZoneBounds()
		if !zs.IsZero() && zs.After(start) {
			start = zs
		}
		if !ze.IsZero() && ze.Before(end) {
			end = ze
		}
		return start.In(loc), end.In(loc)
	}
	y, m, d := t.Date()
	switch c.Unit {
	case CalendarDay:
		start, end = midnight(y, m, d, loc), midnight(y, m, d+1, loc)
	case CalendarWeek:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start, end = midnight(y, m, d-back, loc), midnight(y, m, d-back+7, loc)
	case CalendarMonth:
		start, end = midnight(y, m, 1, loc), midnight(y, m+1, 1, loc)
	case CalendarYear:
		start, end = midnight(y, 1, 1, loc), midnight(y+1, 1, 1, loc)
	default:
		panic(fmt.Sprintf("window: Calendar.Bucket with unit %v", c.Unit))
	}
	return start, end
}

// midnight returns the first instant of the date y-m-d in loc (dates
// normalised as time.Date does): its wall clock's midnight, or, when a
// clock change skips midnight, the change.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	if loc == time.UTC {
		// No clock changes: the wall clock's midnight, what the search
		// below finds, without it.
		return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	}
	noon := time.Date(y, m, d, 12, 0, 0, 0, loc)
	ty, tm, td := noon.Date()
	t := noon
	for range 4 { // a date spans at most a few clock changes
		_, off := t.Zone()
		wall := t.Unix() + int64(off)
		s := wall - mod(wall, 86400) - int64(off)
		zs, _ := t.ZoneBounds()
		if zs.IsZero() || s >= zs.Unix() {
			return time.Unix(s, 0).In(loc)
		}
		// The date began before t's offset did: look just before.
		p := zs.Add(-time.Second)
		if py, pm, pd := p.Date(); py != ty || pm != tm || pd != td {
			return zs.In(loc)
		}
		t = p
	}
	return t
}

// mod returns a mod b in [0, b).
func mod(a, b int64) int64 {
	r := a % b
	if r < 0 {
		r += b
	}
	return r
}

// Index returns the identity of the bucket that holds t: its start's Unix
// milliseconds.
func (c Calendar) Index(t time.Time) int64 {
	start, _ := c.Bucket(t)
	return start.UnixMilli()
}

// DecideCalendar decides a request for hits against a fixed window of
// limit hits per calendar bucket, given cur, the hits already counted in
// the bucket that holds now (summed over regions):
//
//	allow = cur + hits <= limit
//
// ResetAfter is the time until the bucket ends (the real reset instant,
// whatever the bucket's length); RetryAfter, when denied, is the same
// (Never when hits exceed the limit). Bucket is the bucket's index and
// ElapsedMs the time since it began.
func (c Calendar) DecideCalendar(now time.Time, limit, cur, hits uint64) Decision {
	start, end := c.Bucket(now)
	d := Decision{Limit: limit, Estimate: cur, SubWhole: cur, Bucket: start.UnixMilli(), ElapsedMs: now.Sub(start).Milliseconds()}
	until := end.Sub(now)
	if until < time.Millisecond {
		until = time.Millisecond
	}
	d.ResetAfter = ceilDuration(until)
	switch {
	case hits > limit:
		d.RetryAfter = Never
	case cur+hits <= limit && cur <= limit:
		d.Allowed = true
		cur += hits
	default:
		d.RetryAfter = d.ResetAfter
	}
	if cur < limit {
		d.Remaining = limit - cur
	}
	return d
}

// ceilDuration rounds d up to whole milliseconds.
func ceilDuration(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// MaxCalendarBucket bounds a calendar bucket's length: a leap year and
// the largest change of a zone's offset within it.
const MaxCalendarBucket = 367 * 24 * time.Hour

// BucketAt returns the bucket of l that holds nowMs, as the stores and
// replication name buckets: for a window of fixed length, w = l.Window and
// b = floor(nowMs / W); for a calendar window, w is minus the calendar
// bucket's length and b its start in Unix ms. A negative w thus names a
// calendar bucket whose bounds need no time zone ([BucketSpan]).
func (l Limit) BucketAt(nowMs int64) (w time.Duration, b int64) {
	if l.Calendar.Unit == 0 {
		return l.Window, Bucket(nowMs, l.Window)
	}
	start, end := l.Calendar.Bucket(time.UnixMilli(nowMs))
	return -end.Sub(start), start.UnixMilli()
}

// BucketWindow returns the w that [Limit.BucketAt] gives with b: l.Window
// for a window of fixed length, minus the length of the calendar bucket
// that starts at b for a calendar window.
func (l Limit) BucketWindow(b int64) time.Duration {
	if l.Calendar.Unit == 0 {
		return l.Window
	}
	w, _ := l.BucketAt(b)
	return w
}

// BucketSpan returns the first instant and the end (exclusive) of the
// bucket (w, b) in Unix ms: b*W to (b+1)*W for a fixed window (w > 0),
// b to b - w for a calendar bucket (w < 0, see [Limit.BucketAt]).
func BucketSpan(w time.Duration, b int64) (startMs, endMs int64) {
	wm := w.Milliseconds()
	if wm < 0 {
		return b, b - wm
	}
	return b * wm, (b + 1) * wm
}

// ValidCalendarBucket reports whether (w, b) may name a calendar bucket:
// a length of 1 s to MaxCalendarBucket and a start at or after the epoch,
// both in whole seconds, as [Calendar.Bucket] cuts them.
func ValidCalendarBucket(w time.Duration, b int64) bool {
	return w <= -time.Second && w >= -MaxCalendarBucket && w%time.Second == 0 && b >= 0 && b%1000 == 0
}
