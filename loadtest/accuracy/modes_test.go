package main

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
	"github.com/rlcluster/rlcluster/loadtest/accuracy/sliding"
)

// The bounds of each mode that internal/window's package documentation
// states, on its scenarios: a limit of 1000 per 4 s offered 1x, 2x or 10x
// its rate, constant or Poisson, starting cold at phase 0.1 to 0.9 of a
// bucket; and on/off bursts. Accuracy is the exact count admitted in the
// trailing window (t-W, t] at every admission t, divided by the limit.

// modesLimit is the limit of the documented figures.
var modesLimit = window.Limit{Limit: 1000, Window: 4 * time.Second}

// modeFigures are the worst figures of a mode over the documented scenarios.
type modeFigures struct {
	max        float64 // worst trailing window, every scenario
	constMin   float64 // lowest steady minimum, constant arrivals at 2x and 10x
	poissonMin float64 // lowest steady minimum, Poisson arrivals at 2x and 10x
}

// replay returns the verdict on arrivals decided by c,
// counting the steady state from steadyFrom.
func replay(c counter, l window.Limit, arrivals []arrival, steadyFrom int64) verdict {
	return judge(simulate(c, arrivals), l.Limit, l.WindowMs(), steadyFrom)
}

// maxRatio returns the worst trailing window of a verdict.
func maxRatio(v verdict) float64 {
	var m float64
	for _, x := range v.ratios {
		m = max(m, x)
	}
	return m
}

// modesStart is where the scenarios' first bucket starts.
func modesStart(l window.Limit) int64 {
	w := l.WindowMs()
	return (1_700_000_000_000/w + 1) * w
}

// worstFigures runs every cold start (1x, 2x and 10x; constant, and Poisson
// with 2 seeds; phases 0.1 to 0.9 of the bucket, and the same shifted by
// half a sub-bucket, where a burst splits a sub-bucket in two) and the
// on/off bursts (5 seeds) under the sub-bucket counter c, and returns the
// worst figures.
func worstFigures(c counter) modeFigures {
	l := c.sub.Limit
	w := l.WindowMs()
	start := modesStart(l)
	f := modeFigures{constMin: 2, poissonMin: 2}
	for _, rate := range []float64{1, 2, 10} {
		for _, poisson := range []bool{false, true} {
			for p := 1; p <= 9; p++ {
				for _, shift := range []float64{0, 0.5 / float64(max(c.sub.K, 1))} {
					phase := float64(p)/10 + shift
					for seed := uint64(1); seed <= 2; seed++ {
						var r *rand.Rand
						if poisson {
							r = rand.New(rand.NewPCG(seed, uint64(p)))
						} else if seed > 1 {
							break
						}
						arr := coldStart(l, start, phase, rate, 1, 6, r)
						st := replay(c, l, arr, arr[0].at+2*w)
						f.max = max(f.max, maxRatio(st))
						switch {
						case rate == 1:
						case poisson:
							f.poissonMin = min(f.poissonMin, st.steadyMin)
						default:
							f.constMin = min(f.constMin, st.steadyMin)
						}
					}
				}
			}
		}
	}
	for seed := uint64(1); seed <= 5; seed++ {
		r := rand.New(rand.NewPCG(seed, 1234))
		st := replay(c, l, onOff(l, start, 10, 1, 40, r), 1<<62)
		f.max = max(f.max, maxRatio(st))
	}
	return f
}

// exactLogMin is the exact sliding log's lowest steady minimum under the
// Poisson cold starts at 2x and 10x that worstFigures runs (the starts
// shifted by half a sub-bucket too, as for the two-bucket counter),
// computed once. The log is the judge's own (exactWindow), a queue with a
// running sum; TestMeasurementCanFail holds window's DecideLog to it
// decision for decision.
var exactLogMin = sync.OnceValue(func() float64 {
	l := modesLimit
	w := l.WindowMs()
	m := 2.0
	for _, rate := range []float64{2, 10} {
		for p := 1; p <= 9; p++ {
			for _, shift := range []float64{0, 0.5} {
				for seed := uint64(1); seed <= 2; seed++ {
					arr := coldStart(l, modesStart(l), float64(p)/10+shift, rate, 1, 6, rand.New(rand.NewPCG(seed, uint64(p))))
					log := &exactWindow{w: w}
					ds := make([]decision, len(arr))
					for i, a := range arr {
						ok := log.count(a.at)+a.hits <= l.Limit
						if ok {
							log.add(a)
						}
						ds[i] = decision{a.at, a.hits, ok}
					}
					m = min(m, judge(ds, l.Limit, w, arr[0].at+2*w).steadyMin)
				}
			}
		}
	}
	return m
})

// TestDocumentedModeBounds holds the measured bounds of the sub-bucket
// comparison counter (sliding.Counter, K=1 and K=100, weighted and strict).
func TestDocumentedModeBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		s              sliding.Counter
		maxLo, maxHi   float64 // worst trailing window, within
		constMin       float64 // steady minimum, constant 2x and 10x, at least
		poissonVsExact float64 // steady minimum, Poisson 2x and 10x, at least this times the exact log's
	}{
		// The seeds' counter: a cold burst at phase 0.9 admits ~1.9x, and
		// after a cold start at 2x it swings for several windows.
		{"K=1 (two-bucket)", sliding.TwoBucket(modesLimit), 1.85, 2, 0.85, 0.9},
		{"K=100", sliding.Default(modesLimit), 1, 1.05, 0.98, 0.98},
		{"K=100 strict", sliding.Counter{Limit: modesLimit, K: sliding.DefaultSubBuckets, Strict: true}, 1, 1, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := worstFigures(counter{mode: modeSubBuckets, sub: tt.s})
			logMin := exactLogMin()
			t.Logf("%s (K=%d): worst trailing window %.3fx limit; steady min %.3fx (constant), %.3fx (Poisson; exact log %.3fx)", tt.name, tt.s.K, f.max, f.constMin, f.poissonMin, logMin)
			if f.max > tt.maxHi || f.max < tt.maxLo {
				t.Errorf("worst trailing window %.3fx limit, want %.2f to %.2f", f.max, tt.maxLo, tt.maxHi)
			}
			if f.constMin < tt.constMin {
				t.Errorf("steady min (constant) %.3fx limit, want at least %.2f", f.constMin, tt.constMin)
			}
			if f.poissonMin < tt.poissonVsExact*logMin {
				t.Errorf("steady min (Poisson) %.3fx limit, want at least %.2f times the exact log's %.3f", f.poissonMin, tt.poissonVsExact, logMin)
			}
		})
	}
}
