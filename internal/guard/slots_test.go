package guard

import (
	"math/rand/v2"
	"testing"
	"time"
)

// layoutCase is the alive regions' parts of a layout: region i holds
// [b[i], b[i]+num[i]) of den.
type layoutCase struct {
	num, b []uint64
	den    uint64
}

func randomLayout(rng *rand.Rand, regions int) layoutCase {
	c := layoutCase{num: make([]uint64, regions), b: make([]uint64, regions)}
	for i := range regions {
		c.b[i] = c.den
		c.num[i] = 1 + rng.Uint64N(20000)
		c.den += c.num[i]
	}
	return c
}

// Regions that read different headrooms under the same layout take
// disjoint slots: together at most the largest headroom, and exactly the
// headroom when they read the same one. A region's slots only grow with
// the headroom. (The parts laid out anew for each headroom, as before,
// broke the first: three regions reading headrooms of 1, 2 and 3 could
// each take a hit of 3.)
func TestSlotsNested(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		c := randomLayout(rng, 2+rng.IntN(9))
		ph := rng.Float64()
		most := 1 + rng.Uint64N(6) // small headrooms are where parts laid out anew broke
		if rng.IntN(2) == 0 {
			most = 1 + rng.Uint64N(300)
		}
		var same, mixed, top uint64
		for i := range c.num {
			if got := slots(most, c.num[i], c.den, c.b[i], ph); got < slots(most-1, c.num[i], c.den, c.b[i], ph) {
				t.Fatalf("region %d of %+v: %d slots of %d, fewer than of %d", i, c, got, most, most-1)
			}
			same += slots(most, c.num[i], c.den, c.b[i], ph)
			h := 1 + rng.Uint64N(most)
			top = max(top, h)
			mixed += slots(h, c.num[i], c.den, c.b[i], ph)
		}
		if same != most {
			t.Fatalf("%+v at phase %.3f: the slots of %d sum to %d", c, ph, most, same)
		}
		if mixed > top {
			t.Fatalf("%+v at phase %.3f: regions reading headrooms of at most %d took %d", c, ph, top, mixed)
		}
	}
}

// Past slotsMax each region takes its share of the rest rounded down:
// the slots still only grow with the headroom and sum to at most it, less
// by under a hit per region.
func TestSlotsLarge(t *testing.T) {
	c := layoutCase{num: []uint64{3000, 5000, 2000}, b: []uint64{0, 3000, 8000}, den: 10000}
	for _, h := range []uint64{slotsMax, slotsMax + 1, 1 << 40, 1<<53 + 12345} {
		var sum uint64
		for i := range c.num {
			got := slots(h, c.num[i], c.den, c.b[i], 0.3)
			if want := h / 10000 * c.num[i]; got+2 < want || got > want+c.num[i] {
				t.Errorf("h %d, region %d: %d slots, want about %d", h, i, got, want)
			}
			if got < slots(h-1, c.num[i], c.den, c.b[i], 0.3) {
				t.Errorf("h %d, region %d: fewer slots than of %d", h, i, h-1)
			}
			sum += got
		}
		if sum > h || sum+uint64(len(c.num)) <= h {
			t.Errorf("h %d: slots sum to %d, want at most h and within a hit per region", h, sum)
		}
	}
}

// A horizon that starts within two horizons of a second's start takes
// the fewer of its slots under that second's phase and the one before:
// so it takes none that a region whose horizon began in the second before
// took, nor any that one beginning later in the second takes.
func TestLayoutAcrossSecond(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	hz := 80 * time.Millisecond
	sec := time.Unix(1_700_000_007, 0)
	before := layoutOf(sec.Add(-30*time.Millisecond), hz)
	across := layoutOf(sec.Add(50*time.Millisecond), hz)
	after := layoutOf(sec.Add(200*time.Millisecond), hz)
	if before.n != 1 || across.n != 2 || after.n != 1 || across.ph[1] != before.ph[0] || across.ph[0] != after.ph[0] {
		t.Fatalf("layouts: before %+v, across %+v, after %+v", before, across, after)
	}
	broke := false
	for range 2000 {
		c := randomLayout(rng, 2+rng.IntN(9))
		h := 1 + rng.Uint64N(20)
		for _, other := range []layout{before, after} {
			var sum, naive uint64
			for i := range c.num {
				l := across
				if rng.IntN(2) == 0 {
					l = other
				}
				sum += l.slots(h, c.num[i], c.den, c.b[i])
				naive += layout{ph: l.ph, n: 1}.slots(h, c.num[i], c.den, c.b[i])
			}
			if sum > h {
				t.Fatalf("%+v: %d slots of %d taken across the second", c, sum, h)
			}
			broke = broke || naive > h
		}
	}
	if !broke {
		t.Error("no case took more than the headroom with each horizon's own phase alone: the test shows nothing")
	}
}

// A region whose share is small still probes at one free hit when its
// part of the layout holds the first slot: regions of a small share were
// staggered, or probed only at a headroom of 1/share, and were starved
// under saturation.
func TestProbeAtFirstSlot(t *testing.T) {
	v := view([]string{"a", "b", "c"}, nil)
	w := weights{own: 0, sum: 2 * weight(10), before: 0}
	num, den, b := share(10, w, v, DefaultFloor)
	var at time.Time
	for s := range int64(1000) {
		start := t0.Add(time.Duration(s)*time.Second + 500*time.Millisecond)
		if slots(1, num, den, b, phase(start)) == 1 {
			at = start
			break
		}
	}
	if at.IsZero() {
		t.Fatal("a never holds the first slot")
	}
	cut, whole := probeCut(10, 10, 1, 0, w, v, DefaultFloor, layoutOf(at, 80*time.Millisecond))
	if !whole || cut != 0 {
		t.Errorf("probe at a's first slot: cut %d, whole %v; want 0, true (one free hit is a's)", cut, whole)
	}
}
