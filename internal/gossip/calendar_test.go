package gossip

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// monthUTC is a calendar window of UTC months.
var monthUTC = window.Limit{Limit: 100, Algorithm: window.FixedWindow, Calendar: window.Calendar{Unit: window.CalendarMonth}}

// calTot returns region a's total of key "k" in the calendar month that
// holds at, or the ahead-th month after it.
func calTot(at time.Time, ahead int) region.Total {
	y, m, _ := at.UTC().Date()
	w, b := monthUTC.BucketAt(time.Date(y, m+time.Month(ahead), 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	return region.Total{Key: "k", Window: w, Bucket: b, Region: "a", Count: 5}
}

// TestWireCalendar: a calendar bucket (minus its length, its start)
// crosses the wire exactly, in a version-6 frame; a frame without one is
// still version 5, byte for byte what a version-5 node reads. Every
// field of a calendar entry is checked.
func TestWireCalendar(t *testing.T) {
	feb := time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC)
	cal := region.Total{Key: "c", Window: -29 * 24 * time.Hour, Bucket: feb.UnixMilli(), Region: "eu", Count: 9}
	fixed := region.Total{Key: "f", Window: time.Minute, Bucket: 28_333_333, Region: "eu", Count: 3}
	for _, c := range []struct {
		name    string
		totals  []region.Total
		version byte
	}{
		{"fixed only", []region.Total{fixed}, 5},
		{"calendar", []region.Total{cal}, 6},
		{"both", []region.Total{fixed, cal, fixed}, 6},
	} {
		frames, err := Encode(KindReconcile, t0, testSender("eu"), c.totals, 1360)
		if err != nil || len(frames) != 1 {
			t.Fatalf("%s: Encode = %d frames, %v", c.name, len(frames), err)
		}
		if frames[0][0] != c.version {
			t.Errorf("%s: version %d, want %d", c.name, frames[0][0], c.version)
		}
		m, err := Decode(frames[0])
		if err != nil || !reflect.DeepEqual(m.Totals, c.totals) {
			t.Errorf("%s: Decode = %+v, %v, want %+v", c.name, m.Totals, err, c.totals)
		}
	}
	// A calendar total with a trail goes without it; bad buckets are left out.
	withTrail := cal
	withTrail.Trail = trailOf(time.Minute, 5)
	bad := []region.Total{
		{Key: "c", Window: -time.Millisecond * 1500, Bucket: feb.UnixMilli(), Region: "eu", Count: 1},
		{Key: "c", Window: -cal.Window, Bucket: feb.UnixMilli() + 1, Region: "eu", Count: 1},
		{Key: "c", Window: cal.Window, Bucket: -86_400_000, Region: "eu", Count: 1},
		{Key: "c", Window: -window.MaxCalendarBucket - time.Second, Bucket: feb.UnixMilli(), Region: "eu", Count: 1},
	}
	frames, _ := Encode(KindFlush, t0, testSender("eu"), append([]region.Total{withTrail}, bad...), 1360)
	if m, err := Decode(frames[0]); err != nil || !reflect.DeepEqual(m.Totals, []region.Total{cal}) {
		t.Errorf("Decode(a calendar total with a trail, and bad ones) = %+v, %v, want %+v alone", m.Totals, err, cal)
	}

	// Decode's checks, on the calendar frame's bytes: the entry is
	// key (2), window 0, length (5 bytes), bucket (6), region, count, marks.
	good, _ := Encode(KindFlush, t0, testSender("eu"), []region.Total{cal}, 1360)
	g := good[0]
	entry := len(g) - 16
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), g...)) }
	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"good", g, nil},
		{"calendar in version 5", mut(func(b []byte) []byte { b[0] = 5; return b }), ErrMalformed},
		{"length not whole seconds", mut(func(b []byte) []byte { b[entry+3]++; return b }), ErrMalformed},
		{"start not whole seconds", mut(func(b []byte) []byte { b[entry+8]++; return b }), ErrMalformed},
		{"marks", mut(func(b []byte) []byte { b[len(b)-1] = 1; return append(b, 5, 1) }), ErrMalformed},
	} {
		if _, err := Decode(c.in); !errors.Is(err, c.want) {
			t.Errorf("%s: Decode = %v, want %v", c.name, err, c.want)
		}
	}
}

// TestSimCalendarMonth: three regions over the in-memory network share a
// UTC month bucket at the end of a leap February. Flushes carry each
// region's count of the month to the others; hits that only
// reconciliation knows of reach every region once the month ends (on
// March 1, not 29 days of some fixed length later), and then every region
// holds the same vector for February, while March starts from nothing.
func TestSimCalendarMonth(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const oneWay = 30 * time.Millisecond
		end := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
		s := newSimAt(t, threeRegions, 1, oneWay, time.Until(end.Add(-10*time.Second)))
		defer s.close()
		// Let the start-up pass (members that come alive are sent the
		// open totals), as TestSimReconcile does.
		time.Sleep(time.Second)
		lim := window.Limit{Limit: 10, Algorithm: window.FixedWindow, Calendar: window.Calendar{Unit: window.CalendarMonth}}
		const key = "dave"
		w, b := lim.BucketAt(s.now().UnixMilli())
		if w != -29*24*time.Hour || b != time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC).UnixMilli() {
			t.Fatalf("bucket = %v %d, want a 29-day February", w, b)
		}
		for r, n := range map[string]int{"eu": 3, "us": 2, "ap": 1} {
			for range n {
				s.hit(s.nodes[r+"-0"], key, lim)
			}
		}
		waitFor(t, 5*time.Second, "every region holds every region's February count", func() bool {
			for _, at := range threeRegions {
				if s.count(at, "eu", key, w, b) != 3 || s.count(at, "us", key, w, b) != 2 || s.count(at, "ap", key, w, b) != 1 {
					return false
				}
			}
			return true
		})
		for _, r := range threeRegions {
			if d := s.peek(r, key, lim); d.Estimate != 6 || d.Remaining != 3 || d.ResetAfter != end.Sub(s.now()).Round(time.Millisecond) {
				t.Errorf("%s: estimate %d remaining %d reset after %v, want 6, 3 (after the peeked hit), %v", r, d.Estimate, d.Remaining, d.ResetAfter, end.Sub(s.now()))
			}
		}
		// Two more in eu that only reconciliation knows of.
		res := make([]region.Result, 1)
		for range 2 {
			if err := s.stores["eu"].Check(context.Background(), []region.Request{{Key: key, Limit: lim, Hits: 1, Now: s.now()}}, res); err != nil || !res[0].Allowed {
				t.Fatalf("eu's unflushed hit: %+v, %v", res[0].Decision, err)
			}
		}
		s.nodes["eu-0"].remember(s.now(), []region.Total{{Key: key, Window: w, Bucket: b, Region: "eu", Count: 1}})
		time.Sleep(end.Sub(s.now()) - time.Millisecond)
		if got := s.count("us", "eu", key, w, b); got != 3 {
			t.Fatalf("us holds eu's %d before February ended, want 3: something other than reconciliation sent it", got)
		}
		took := waitFor(t, 10*time.Second, "every region holds eu's final February count", func() bool {
			return s.count("us", "eu", key, w, b) == 5 && s.count("ap", "eu", key, w, b) == 5
		})
		bound := 2*testConfig().FlushInterval + 4*oneWay + 10*time.Millisecond
		if testConfig().Grace > 0 {
			bound = testConfig().Grace + testConfig().FlushInterval + 4*oneWay + 10*time.Millisecond
		}
		t.Logf("calendar reconcile: every region exact %v after February ended (bound %v)", took, bound)
		if took > bound {
			t.Errorf("reconciliation landed %v after February ended, want <= %v", took, bound)
		}
		want := map[string]uint64{"eu": 5, "us": 2, "ap": 1}
		for _, at := range threeRegions {
			for from, n := range want {
				if got := s.count(at, from, key, w, b); got != n {
					t.Errorf("%s holds %s's February count %d, want %d", at, from, got, n)
				}
			}
			if d := s.peek(at, key, lim); d.Estimate != 0 || d.Bucket != end.UnixMilli() {
				t.Errorf("%s in March: estimate %d bucket %d, want 0 %d", at, d.Estimate, d.Bucket, end.UnixMilli())
			}
		}
	})
}
