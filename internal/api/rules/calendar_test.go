package rules_test

import (
	"strings"
	"testing"

	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestCalendarRules: a native rule with a calendar (and a time zone, UTC
// by default) and an envoy limit of unit month or year load as calendar
// windows counted as fixed windows; what cannot be one is refused with
// the field that says so.
func TestCalendarRules(t *testing.T) {
	rs, err := rules.Parse([]byte(`rules:
  - name: monthly
    limit: 10000
    calendar: month
  - name: daily-berlin
    limit: 100
    calendar: Day
    time_zone: Europe/Berlin
    algorithm: fixed_window
`))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := rs.Lookup("monthly")
	if want := (window.Limit{Limit: 10000, Algorithm: window.FixedWindow, Calendar: window.Calendar{Unit: window.CalendarMonth}}); m.Limit != want {
		t.Errorf("monthly = %+v, want %+v", m.Limit, want)
	}
	d, _ := rs.Lookup("daily-berlin")
	if d.Limit.Calendar.Unit != window.CalendarDay || d.Limit.Calendar.Zone() != "Europe/Berlin" || d.Limit.Algorithm != window.FixedWindow || d.Limit.Validate() != nil {
		t.Errorf("daily-berlin = %+v, want a valid fixed window of Berlin days", d.Limit)
	}

	_, err = rules.Parse([]byte(`rules:
  - name: a
    limit: 1
    calendar: fortnight
  - name: b
    limit: 1
    calendar: month
    window: 1h
  - name: c
    limit: 1
    calendar: month
    time_zone: Mars/Olympus_Mons
  - name: d
    limit: 1
    window: 1h
    time_zone: UTC
  - name: e
    limit: 1
    calendar: month
    algorithm: sliding_window
  - name: f
    limit: 1
    calendar: year
    time_zone: Local
`))
	want := strings.Join([]string{
		`line 4: rule 1 (a): calendar: "fortnight" is not minute, hour, day, week, month or year`,
		`line 7: rule 2 (b): calendar: a rule has a window or a calendar, not both`,
		`line 12: rule 3 (c): time_zone: "Mars/Olympus_Mons" is not an IANA time zone such as UTC or Europe/Berlin`,
		`line 16: rule 4 (d): time_zone: applies to a calendar window only`,
		`line 20: rule 5 (e): algorithm: a calendar window is counted as fixed_window, not sliding_window`,
		`line 24: rule 6 (f): time_zone: "Local" is not an IANA time zone such as UTC or Europe/Berlin`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Errorf("Parse error:\n%v\nwant:\n%s", err, want)
	}

	// envoyproxy/ratelimit's units month and year: calendar months and
	// years in UTC.
	rs, err = rules.Parse([]byte(`domain: saas
descriptors:
  - key: plan
    value: free
    rate_limit:
      unit: month
      requests_per_unit: 10000
  - key: plan
    value: pro
    rate_limit:
      unit: YEAR
      requests_per_unit: 1000000
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		value string
		unit  window.CalendarUnit
	}{{"free", window.CalendarMonth}, {"pro", window.CalendarYear}} {
		l := rs.Domain("saas").Match([]rules.Entry{{Key: "plan", Value: c.value}})
		if l == nil || l.Limit.Calendar.Unit != c.unit || l.Limit.Calendar.Zone() != "UTC" || l.Limit.Algorithm != window.FixedWindow || l.Limit.Validate() != nil {
			t.Errorf("plan=%s: %+v, want a valid UTC calendar %v", c.value, l, c.unit)
		}
	}
	_, err = rules.Parse([]byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: month, requests_per_unit: 1, algorithm: token_bucket}\n  - key: b\n    rate_limit: {unit: year, requests_per_unit: 1, strict: true}\n"))
	want = strings.Join([]string{
		`line 4: domain "d": descriptors[0].rate_limit.algorithm: unit month is a calendar window, counted as fixed_window, not token_bucket`,
		`line 6: domain "d": descriptors[1].rate_limit.strict: unit year is a calendar window, counted as fixed_window: strict does not apply`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Errorf("Parse error:\n%v\nwant:\n%s", err, want)
	}
}
