package decision

import (
	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
	"github.com/rlcluster/rlcluster/internal/window"
)

// inlineCalendar converts and checks an inline calendar limit, whose
// limit l holds: a fixed window of calendar buckets.
func (d *Decider) inlineCalendar(field string, lim *ratelimitv1.Limit, l window.Limit) (window.Limit, error) {
	c := lim.GetCalendar()
	unit := window.CalendarUnit(c) // the enums number the units alike
	switch {
	case c == ratelimitv1.Calendar_CALENDAR_UNSPECIFIED:
		return l, Invalid("%slimit.time_zone: applies to a calendar limit only (set calendar)", field)
	case unit < window.CalendarMinute || unit > window.CalendarYear:
		return l, Invalid("%slimit.calendar: unknown calendar %d", field, int32(c))
	case lim.GetWindow() != nil:
		return l, Invalid("%slimit.window: must be unset with a calendar", field)
	case lim.GetAlgorithm() != ratelimitv1.Algorithm_ALGORITHM_UNSPECIFIED && lim.GetAlgorithm() != ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW:
		return l, Invalid("%slimit.algorithm: a calendar limit is counted as ALGORITHM_FIXED_WINDOW", field)
	case lim.GetStrict() || lim.GetBurst() != 0:
		return l, Invalid("%slimit: strict and burst do not apply to a calendar limit", field)
	}
	if m := d.cfg.MaxWindow; m < window.MaxWindow && unit.Longest() > m {
		return l, Invalid("%slimit.calendar: a %s is longer than the maximum window of %v", field, unit, m)
	}
	cal, err := window.ParseCalendar(unit.String(), lim.GetTimeZone())
	if err != nil {
		return l, Invalid("%slimit.time_zone: %q is not an IANA time zone such as UTC or Europe/Berlin", field, truncate(lim.GetTimeZone(), 64))
	}
	l.Algorithm, l.Calendar = window.FixedWindow, cal
	return l, nil
}
