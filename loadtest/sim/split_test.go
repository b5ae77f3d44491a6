package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// sides returns the largest counts of region 0's admissions (the
// minority), of the other regions' (the majority) and of all of them (the
// pool) in the trailing windows (t-W, t] ending at any admission t from
// fromMs on; ts is sorted and by[i] is the region of admission i.
func sides(ts []int64, by []int, wm, fromMs int64) (minority, majority, pool int) {
	lo := 0
	var mi, ma int
	for i, t := range ts {
		if by[i] == 0 {
			mi++
		} else {
			ma++
		}
		for ts[lo] <= t-wm {
			if by[lo] == 0 {
				mi--
			} else {
				ma--
			}
			lo++
		}
		if t < fromMs || (i+1 < len(ts) && ts[i+1] == t) {
			continue // the window ends after every admission at t
		}
		minority, majority, pool = max(minority, mi), max(majority, ma), max(pool, mi+ma)
	}
	return minority, majority, pool
}

// split runs TestGuardPartition's load (internal/gossip) on the virtual
// clock: three regions 60 ms apart, region 0 cut off from the others from
// the start, limit 60 per second; from phase ms into the second second,
// region 0 offers a hit every 30 ms and the two others every 20 ms each,
// region r's first offset by r*offset ms, for 8 s. It returns the sides'
// largest trailing windows from two seconds after the load began.
func split(l window.Limit, phase, offset int64) (minority, majority, pool int) {
	cfg := config{Regions: 3, Delay: 60 * time.Millisecond, Flush: 20 * time.Millisecond,
		Suspicion: 500 * time.Millisecond, Guard: true, Limit: l}
	w := newWorld(cfg, epoch)
	w.cfg.Cut = func(a, b int, _ int64) bool { return (a == 0) != (b == 0) }
	start := epoch + 1000 + phase
	end := start + 8000
	for r, every := range []int64{30, 20, 20} {
		for t := start + int64(r)*offset; t < end; t += every {
			w.request(r, t, "k")
		}
	}
	w.run(end + l.WindowMs())
	return sides(w.admitted["k"], w.by["k"], l.WindowMs(), start+2*l.WindowMs())
}

// TestSplit: during a partition the pool admits at most (1 + 1/R) x the
// limit in any trailing window, the majority (two regions contending for
// the limit, each unable to see what the other admitted in the last
// horizon) at most the limit and the minority at most its share, L -
// ceil(L/R) = 20 of 60: exactly, over 160 runs (40 phases, 4
// offsets between the regions' requests), on the default counter and on
// the strict one. (Before the guard rounded the shares to sum to the
// headroom, admitted a horizon's probe only within its share and counted
// the others' shares of the headroom as read, the majority reached 63.)
func TestSplit(t *testing.T) {
	t.Parallel()
	for _, strict := range []bool{false, true} {
		l := window.Limit{Limit: 60, Window: time.Second, Strict: strict}
		hist := [3]map[int]int{{}, {}, {}}
		for phase := int64(0); phase < 40*37; phase += 37 {
			for _, off := range []int64{0, 3, 7, 11} {
				mi, ma, all := split(l, phase, off)
				hist[0][mi]++
				hist[1][ma]++
				hist[2][all]++
				if all > 80 || ma > 60 || mi > 20 {
					t.Errorf("strict %v, phase %d ms, offset %d ms: pool %d (want <= 80), majority %d (want <= 60), minority %d (want <= 20) in a trailing window",
						strict, phase, off, all, ma, mi)
				}
			}
		}
		t.Logf("strict %v, largest trailing window over 160 runs, count: runs: minority %s; majority %s; pool %s", strict, dist(hist[0]), dist(hist[1]), dist(hist[2]))
	}
}

func dist(h map[int]int) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Fprintf(&b, " %d:%d", k, h[k])
	}
	return b.String()
}
