package main

import (
	"testing"
	"time"
)

// TestUnderLimit: a request is traffic under the limit when at most the
// limit of requests, admitted or denied, fall in its trailing window; a
// denied one of them is a false denial, unless it was part of a burst,
// and it counts under what denied it.
func TestUnderLimit(t *testing.T) {
	all := requests(
		[]int64{0, 2},      // admitted
		[]int64{1, 20, 21}, // denied
		[]denial{{by: byShare}, {burst: true, by: byStore}, {by: byCut}}, // 20 was part of a burst
	)
	under, falseDenied, by := underLimit(all, 10, 2)
	// 0 (1 in its window), 1 (2, denied), 21 (2 with 20, denied); not 2
	// (3 in its window) nor the burst's 20.
	if under != 3 || falseDenied != 2 {
		t.Errorf("underLimit = %d under the limit, %d falsely denied; want 3 and 2", under, falseDenied)
	}
	if want := [nCauses]int{byShare: 1, byCut: 1}; by != want {
		t.Errorf("false denials by cause = %v, want %v (%v)", by, want, causeNames)
	}
}

// TestCalm: only requests of phases offered at most the limit's rate, a
// window after the phase began, count; the exact log denies those that
// find the limit already taken in their window.
func TestCalm(t *testing.T) {
	s := schedule{Window: 10 * time.Millisecond, Limit: 1, Phases: []phase{
		{FromMs: 0, ToMs: 100, Rate: []float64{0.5}, Burst: []bool{false}},
		{FromMs: 100, ToMs: 200, Rate: []float64{3}, Burst: []bool{false}},
	}}
	all := requests([]int64{5, 12}, []int64{15, 30, 150}, make([]denial, 3))
	// 5 is within a window of the phase's start; 150 is in a phase at 3x.
	// Of 12, 15 and 30, this run denied 15 and 30; the exact log denies
	// only 12 (5 is still in its window) and admits 15 and 30.
	n, den, logDen := calm(s, 0, all)
	if n != 3 || den != 2 || logDen != 1 {
		t.Errorf("calm = %d requests, %d denied, %d denied by the exact log; want 3, 2 and 1", n, den, logDen)
	}
}
