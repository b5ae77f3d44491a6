package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestTrailing(t *testing.T) {
	// Window 1 s. Two regions; two admissions at 1000 ms share an instant.
	adm := []Admission{
		{at(1000), 1}, {at(0), 0}, {at(500), 0}, {at(1000), 0}, {at(1999), 1}, {at(2000), 0},
	}
	got := trailing(adm, time.Second, 2)
	want := []Window{
		{At: at(0), Count: 1, PerRegion: []int{1, 0}},
		{At: at(500), Count: 2, PerRegion: []int{2, 0}},
		// (0, 1000]: the admission at 0 has left; both at 1000 are in.
		{At: at(1000), Count: 3, PerRegion: []int{2, 1}},
		{At: at(1999), Count: 3, PerRegion: []int{1, 2}},
		// (1000, 2000]: those at 1000 have left.
		{At: at(2000), Count: 2, PerRegion: []int{1, 1}},
	}
	if len(got) != len(want) {
		t.Fatalf("trailing() = %d windows %v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if !got[i].At.Equal(want[i].At) || got[i].Count != want[i].Count || !slices.Equal(got[i].PerRegion, want[i].PerRegion) {
			t.Errorf("window %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestSummarize(t *testing.T) {
	var adm []Admission
	for ms := 0; ms < 3000; ms += 100 { // 10 per second in region 0
		adm = append(adm, Admission{at(ms), 0})
	}
	for ms := 2000; ms < 2500; ms += 50 { // 10 more in region 1 at 2.0-2.45 s
		adm = append(adm, Admission{at(ms), 1})
	}
	ws := trailing(adm, time.Second, 2)
	st := summarize(Phase{"late", at(1000), at(3000)}, ws, adm, 10, 2)
	if got, want := st.Max, 2.0; got != want {
		t.Errorf("Max = %v, want %v", got, want)
	}
	if got, want := st.Min, 1.0; got != want {
		t.Errorf("Min = %v, want %v", got, want)
	}
	if got, want := st.Worst.PerRegion, []int{10, 10}; !slices.Equal(got, want) {
		t.Errorf("Worst.PerRegion = %v, want %v", got, want)
	}
	if got, want := st.Admitted, []int{20, 10}; !slices.Equal(got, want) {
		t.Errorf("Admitted = %v, want %v", got, want)
	}
	if empty := summarize(Phase{"none", at(5000), at(6000)}, ws, adm, 10, 2); empty.Windows != 0 || empty.Max != 0 {
		t.Errorf("summarize of an empty phase = %+v, want no windows", empty)
	}
}

func TestAgreement(t *testing.T) {
	names := []string{"us", "ap"}
	view := func(b int64, us, ap uint64) View {
		m := map[string]uint64{}
		if us > 0 {
			m["us"] = us
		}
		if ap > 0 {
			m["ap"] = ap
		}
		return View{OK: true, Bucket: b, Previous: m}
	}
	rounds := []Round{
		{at(0), at(5), []View{view(8, 900, 300), view(8, 600, 300)}},     // cut: us lacks... ap lacks us's tail
		{at(100), at(105), []View{view(8, 900, 300), view(8, 900, 300)}}, // agreed, but before since
		{at(200), at(205), []View{view(8, 900, 300), {}}},                // ap did not answer
		{at(300), at(306), []View{view(8, 900, 300), view(8, 900, 300)}},
		{at(400), at(405), []View{view(9, 50, 10), view(9, 50, 10)}},
	}
	a := agreement(rounds, 7, names, at(150), 200*time.Millisecond)
	if got, want := a.After, 156*time.Millisecond; got != want {
		t.Errorf("agreement After = %v, want %v", got, want)
	}
	if got, want := a.Before, 50*time.Millisecond; got != want {
		t.Errorf("agreement Before = %v, want %v", got, want)
	}
	if !strings.Contains(a.String(), "agreed 156ms") {
		t.Errorf("String() = %q, want it to say agreed 156ms", a.String())
	}
	if a := agreement(rounds, 7, []string{"us", "eu"}, at(150), time.Second); a.After != -1 {
		t.Errorf("agreement without eu's count = %v, want none (-1)", a.After)
	}
	if !disagreedBefore(rounds, 7, names, at(0), at(150)) {
		t.Error("disagreedBefore(first round) = false, want true")
	}
	if disagreedBefore(rounds, 7, names, at(50), at(150)) {
		t.Error("disagreedBefore(an agreeing round) = true, want false")
	}
}

func TestCutTime(t *testing.T) {
	w := 10 * time.Second
	for _, tc := range []struct {
		from  time.Duration // after a bucket boundary
		phase float64
		want  time.Duration
	}{
		{0, 0.2, 2 * time.Second},
		{2 * time.Second, 0.2, 2 * time.Second},
		{3 * time.Second, 0.2, 12 * time.Second},
		{3 * time.Second, 0, 10 * time.Second},
	} {
		if got := cutTime(t0.Add(tc.from), w, tc.phase); !got.Equal(t0.Add(tc.want)) {
			t.Errorf("cutTime(+%v, %v) = +%v, want +%v", tc.from, tc.phase, got.Sub(t0), tc.want)
		}
	}
}
