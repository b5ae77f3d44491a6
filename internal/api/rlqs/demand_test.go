package rlqs

import (
	"math"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// TestRefusalsCapped: the refusals a node tells the guard of a key are
// at most ten times the limit's capacity a bucket, whatever its clients
// report,
// and the count starts again with the next bucket; a key no stream holds
// tells nothing.
func TestRefusalsCapped(t *testing.T) {
	d := newDemands()
	lim := window.Limit{Limit: 100, Window: 10 * time.Second}
	at := time.UnixMilli(1_000_000_000_000) // a bucket's start
	if got := d.refusals("k", lim, at, 50); got != 0 {
		t.Errorf("a key no stream holds: %d told, want 0", got)
	}
	d.set("k", &bucket{}, 1)
	for _, tc := range []struct {
		after        time.Duration
		denied, want uint64
	}{
		{0, 800, 800},
		{time.Second, 500, 200},
		{2 * time.Second, 1 << 40, 0},
		{lim.Window, 30, 30}, // the next bucket
	} {
		if got := d.refusals("k", lim, at.Add(tc.after), tc.denied); got != tc.want {
			t.Errorf("%v in: %d denied told as %d, want %d", tc.after, tc.denied, got, tc.want)
		}
	}
}

// TestLevel: the level divides a key's part by max-min fairness: buckets
// under an equal part get their demand, the others what is left in equal
// parts, and no level binds while the demand fits.
func TestLevel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rates    []float64
		capacity float64
		want     float64
	}{
		{"all over", []float64{10, 12, 50}, 30, 10},
		{"one under", []float64{4, 20, 50}, 30, 13},
		{"two under", []float64{4, 6, 50}, 30, 20},
		{"fits", []float64{4, 6, 10}, 30, math.Inf(1)},
		{"exactly", []float64{10, 10, 10}, 30, 10},
	} {
		d := newDemands()
		bs := make([]*bucket, len(tc.rates))
		for i, r := range tc.rates {
			bs[i] = &bucket{}
			d.set("k", bs[i], r)
		}
		if got := d.level("k", tc.capacity); math.Abs(got-tc.want) > 1e-9 && got != tc.want {
			t.Errorf("%s: level %v, want %v", tc.name, got, tc.want)
		}
		d.set("k", bs[0], tc.rates[0]) // unchanged: the level holds
		d.leave("k", bs[len(bs)-1])
		if got, want := d.level("k", tc.capacity), levelOf(tc.rates[:len(tc.rates)-1], tc.capacity); got != want {
			t.Errorf("%s, the last bucket gone: level %v, want %v", tc.name, got, want)
		}
	}
	if got := newDemands().level("none", 10); !math.IsInf(got, 1) {
		t.Errorf("a key nobody holds: level %v, want +Inf", got)
	}
}

// levelOf is the level by its definition: the largest l with the sum of
// min(rate, l) at most capacity, found by bisection.
func levelOf(rates []float64, capacity float64) float64 {
	sum := func(l float64) (s float64) {
		for _, r := range rates {
			s += min(r, l)
		}
		return s
	}
	hi := 0.0
	for _, r := range rates {
		hi = max(hi, r)
	}
	if sum(hi) <= capacity {
		return math.Inf(1)
	}
	lo := 0.0
	for range 200 {
		if m := (lo + hi) / 2; sum(m) <= capacity {
			lo = m
		} else {
			hi = m
		}
	}
	return lo
}
