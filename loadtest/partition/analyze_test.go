package main

import (
	"maps"
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
	view := func(ms int, b int64, us, ap uint64) View {
		m := map[string]uint64{}
		if us > 0 {
			m["us"] = us
		}
		if ap > 0 {
			m["ap"] = ap
		}
		return View{Read: at(ms), Bucket: b, Previous: m}
	}
	// Bucket 7 closed; the cut lasts until 150 ms. us lacks ap's last
	// hits until its read at 230; ap lacks us's until 180.
	views := [][]View{
		{view(0, 8, 900, 250), view(100, 8, 900, 250), view(200, 8, 900, 250), view(230, 8, 900, 300), view(400, 9, 50, 10)},
		{view(10, 8, 600, 300), view(180, 8, 900, 300), view(300, 8, 900, 300)},
	}
	a := agreement(views, 7, names, at(150), 100*time.Millisecond, at(0), at(150))
	if got, want := a.After(), 80*time.Millisecond; got != want {
		t.Errorf("After() = %v, want %v (us's first read of the final counts)", got, want)
	}
	if got, want := a.NotBefore, at(200); !got.Equal(want) {
		t.Errorf("NotBefore = %v, want %v", got.Sub(t0), want.Sub(t0))
	}
	if !a.Diverged {
		t.Error("Diverged = false, want true: both regions held other counts during the cut")
	}
	if got, want := a.Counts, map[string]uint64{"us": 900, "ap": 300}; !maps.Equal(got, want) {
		t.Errorf("Counts = %v, want %v", got, want)
	}
	if !strings.Contains(a.String(), "agreed 80ms") {
		t.Errorf("String() = %q, want it to say agreed 80ms", a.String())
	}
	if a := agreement(views, 7, names, at(150), time.Second, at(500), at(600)); a.Diverged {
		t.Error("Diverged outside every read = true, want false")
	}
	if a := agreement(views, 7, []string{"us", "eu"}, at(150), time.Second, at(0), at(150)); a.After() != -1 {
		t.Errorf("agreement without eu's count: After() = %v, want -1", a.After())
	}
	// ap's last read still lacks us's last hits: no agreement.
	views[1] = views[1][:1]
	if a := agreement(views, 7, names, at(150), time.Second, at(0), at(150)); a.After() != -1 {
		t.Errorf("agreement with differing last reads: After() = %v, want -1", a.After())
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

func TestRunAt(t *testing.T) {
	var out strings.Builder
	at := time.Now().Add(300 * time.Millisecond)
	// Armed: the command waits for the line, and reports its own bounds.
	ch, err := runAt(t.Context(), `read -r x && [ "$x" = go ] && echo "applied at 1000" && echo "done at 2000"`, at, 200*time.Millisecond, &out)
	if err != nil {
		t.Fatalf("runAt(armed) = %v; output %q", err, out.String())
	}
	if !ch.Applied.Equal(time.Unix(0, 1000)) || !ch.Done.Equal(time.Unix(0, 2000)) {
		t.Errorf("runAt(armed) = %v..%v, want the command's own 1000..2000 ns", ch.Applied.UnixNano(), ch.Done.UnixNano())
	}
	// Not armed, no lines: bounded by the start (not before at) and the exit.
	at = time.Now().Add(100 * time.Millisecond)
	ch, err = runAt(t.Context(), "true", at, 0, &out)
	if err != nil {
		t.Fatalf("runAt(true) = %v", err)
	}
	if ch.Applied.Before(at) || ch.Done.Before(ch.Applied) {
		t.Errorf("runAt(true) = %v..%v, want from at (%v) on", ch.Applied, ch.Done, at)
	}
	if _, err := runAt(t.Context(), "exit 3", time.Now(), 0, &out); err == nil {
		t.Error("runAt(exit 3) = nil error, want the failure")
	}
}
