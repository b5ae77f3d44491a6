package gossip

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestSimSteadyUnderLoss: three regions of one node, 10 or 60 ms apart,
// 2% of packets lost, one key offered 10x a limit of 1000 per 10 s evenly
// for 40 s. From 20 s on (two windows), the trailing window at each
// admission holds a median of at least 0.97 of the limit and never less
// than 0.95 or more than 1.05, and the regions' admissions are within 10%
// of each other: lost heartbeats (which make a region late for the guard,
// see guard.View.Heartbeat) and lost totals cost little of the limit.
func TestSimSteadyUnderLoss(t *testing.T) {
	t.Parallel()
	for _, oneWay := range []time.Duration{10 * time.Millisecond, 60 * time.Millisecond} {
		t.Run(fmt.Sprint(oneWay), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { steadyUnderLoss(t, oneWay) })
		})
	}
}

func steadyUnderLoss(t *testing.T, oneWay time.Duration) {
	s := newSim(t, threeRegions, 1, oneWay)
	defer s.close()
	s.fn.SetLoss(0.02)
	time.Sleep(time.Second)
	lim := window.Limit{Limit: 1000, Window: 10 * time.Second}
	guards := map[string]*guard.Guard{}
	for _, r := range threeRegions {
		guards[r] = guard.New(guard.Config{})
		s.nodes[r+"-0"].ExchangeDemand(guards[r]) // as rlnode does
	}
	var at []time.Time
	per := map[string]int{}
	start := time.Now()
	steady := start.Add(2 * lim.Window)
	for i := 0; time.Since(start) < 4*lim.Window; i++ {
		r := threeRegions[i%3]
		if s.simGuardHit(s.nodes[r+"-0"], guards[r], "k", lim) {
			at = append(at, time.Now())
			if time.Now().After(steady) {
				per[r]++
			}
		}
		time.Sleep(time.Millisecond) // 1000 a second: 10x the limit's rate
	}
	var ratios []float64
	lo := 0
	for i, a := range at {
		for !at[lo].After(a.Add(-lim.Window)) {
			lo++
		}
		if a.After(steady) {
			ratios = append(ratios, float64(i-lo+1)/float64(lim.Limit))
		}
	}
	if len(ratios) == 0 {
		t.Fatal("nothing admitted in the steady state")
	}
	slices.Sort(ratios)
	med, lowest, highest := ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1]
	counts := []int{per["ap"], per["eu"], per["us"]}
	spread := float64(slices.Max(counts))/float64(max(slices.Min(counts), 1)) - 1
	t.Logf("%v one-way, 2%% loss: trailing window at admissions: median %.3f, min %.3f, max %.3f; per region %v (spread %.3f)",
		oneWay, med, lowest, highest, per, spread)
	if med < 0.97 {
		t.Errorf("median %.3f of the limit, want at least 0.97", med)
	}
	if lowest < 0.95 {
		t.Errorf("steady minimum %.3f of the limit, want at least 0.95", lowest)
	}
	if highest > 1.05 {
		t.Errorf("maximum %.3f of the limit, want at most 1.05", highest)
	}
	if spread > 0.10 {
		t.Errorf("per-region admissions %v apart by %.3f, want within 10%%", per, spread)
	}
}
