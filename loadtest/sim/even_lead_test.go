package main

import (
	"strings"
	"testing"
	"time"
)

// -even -lead starts the second and third regions' load later, and the
// first region's head start shows in the first window's admissions.
func TestPrintEvenLead(t *testing.T) {
	var b strings.Builder
	if err := printEven(&b, "100/1s", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "the second and third from 300ms after the first") || !strings.Contains(out, "per window [[") {
		t.Errorf("printEven output lacks the lead or the windows:\n%s", out)
	}
	sc := evenScenario(60*time.Millisecond, 100)
	sc.Window = time.Second
	sc.run = steadyLead(10, 12, 300*time.Millisecond, 0, 1, 2)
	w, _ := runWorld(sc, true)
	first := w.perWindow("k", 12)[0]
	if first[0] <= first[1] || first[0] <= first[2] {
		t.Errorf("first window's admissions %v: the region that started 300 ms earlier took no more", first)
	}
	if err := printEven(&b, "100/1s", -time.Second); err == nil {
		t.Error("a negative lead accepted")
	}
}
