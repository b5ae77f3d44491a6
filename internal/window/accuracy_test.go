package window

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The accuracy scenarios of loadtest/accuracy, on the same arrival
// patterns: a limit of 1000 per 4 s offered 1x, 2x or 10x its rate,
// constant or Poisson, starting cold at phase 0.1 to 0.9 of a bucket; and
// on/off bursts. Accuracy is the exact count admitted in the trailing window
// (t-W, t] at every admission t, divided by the limit.

// accLimit is the limit of the accuracy scenarios.
var accLimit = Limit{Limit: 1000, Window: 4 * time.Second}

// coldStart returns arrivals at rate times the limit's rate from phase p of
// the bucket after start, for n windows: evenly spaced, or Poisson when r is
// set.
func coldStart(l Limit, start int64, phase, rate float64, n int, r *rand.Rand) []int64 {
	w := l.WindowMs()
	from := start + int64(phase*float64(w))
	gap := float64(w) / (rate * float64(l.Limit)) // ms between requests
	var out []int64
	end := from + int64(n)*w
	for t := float64(from); int64(t) < end; {
		out = append(out, int64(t))
		if r != nil {
			t += r.ExpFloat64() * gap
		} else {
			t += gap
		}
	}
	return out
}

// onOff returns bursts at peak times the limit's rate lasting from W/10 to
// W/2, each followed by a quiet gap from 0 to 2W, for n windows.
func onOff(l Limit, start int64, peak float64, n int, r *rand.Rand) []int64 {
	w := l.WindowMs()
	gap := float64(w) / (peak * float64(l.Limit))
	var out []int64
	end := start + int64(n)*w
	for t := float64(start + r.Int64N(w)); int64(t) < end; {
		stop := t + float64(w/10+r.Int64N(w*4/10))
		for ; t < stop && int64(t) < end; t += r.ExpFloat64() * gap {
			out = append(out, int64(t))
		}
		t += float64(r.Int64N(2 * w))
	}
	return out
}

// accStats are the trailing-window counts at every admission, as a share
// of the limit.
type accStats struct {
	p50, p999, max float64
	steadyMin      float64 // over admissions from 2W after the load began; 0 if none
}

// accuracy replays one-hit arrivals against s and returns the trailing-window
// statistics; steadyFrom is the first instant counted in steadyMin.
func accuracy(s Sliding, arrivals []int64, steadyFrom int64) accStats {
	st := newSlidingState(s)
	w := s.WindowMs()
	var admitted []int64
	var ratios []float64
	st2 := accStats{steadyMin: -1}
	lo := 0
	for _, t := range arrivals {
		if !st.decide(t, 1, true).Allowed {
			continue
		}
		admitted = append(admitted, t)
		for admitted[lo] <= t-w {
			lo++
		}
		x := float64(len(admitted)-lo) / float64(s.Limit.Limit)
		ratios = append(ratios, x)
		if t >= steadyFrom && (st2.steadyMin < 0 || x < st2.steadyMin) {
			st2.steadyMin = x
		}
	}
	slices.Sort(ratios)
	if len(ratios) > 0 {
		st2.p50 = ratios[len(ratios)/2]
		st2.p999 = ratios[len(ratios)*999/1000]
		st2.max = ratios[len(ratios)-1]
	}
	st2.steadyMin = max(st2.steadyMin, 0)
	return st2
}

// accuracyWorst runs every cold-start scenario (3 rates, constant and
// Poisson, 9 phases, 3 seeds) and the on/off bursts (5 seeds) and returns
// the worst max, the lowest steady minimum at 2x and 10x, and the lowest
// steady minimum at 1x.
func accuracyWorst(t *testing.T, s Sliding) (worstMax, saturatedMin, oneXMin float64) {
	t.Helper()
	l := s.Limit
	w := l.WindowMs()
	start := (1_700_000_000_000/w + 1) * w
	saturatedMin, oneXMin = 2, 2
	for _, rate := range []float64{1, 2, 10} {
		for _, poisson := range []bool{false, true} {
			for p := 1; p <= 9; p++ {
				phase := float64(p) / 10
				for seed := uint64(1); seed <= 3; seed++ {
					var r *rand.Rand
					if poisson {
						r = rand.New(rand.NewPCG(seed, uint64(p)))
					} else if seed > 1 {
						break
					}
					arr := coldStart(l, start, phase, rate, 6, r)
					a := accuracy(s, arr, arr[0]+2*w)
					worstMax = max(worstMax, a.max)
					if rate == 1 {
						oneXMin = min(oneXMin, a.steadyMin)
					} else {
						saturatedMin = min(saturatedMin, a.steadyMin)
					}
				}
			}
		}
	}
	for seed := uint64(1); seed <= 5; seed++ {
		r := rand.New(rand.NewPCG(seed, 1234))
		a := accuracy(s, onOff(l, start, 10, 40, r), 1<<62)
		worstMax = max(worstMax, a.max)
	}
	return worstMax, saturatedMin, oneXMin
}

// The measured bounds of each mode, as the package documentation states
// them (reproduce the full table with go run ./loadtest/accuracy).
func TestAccuracyModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		s      Sliding
		maxMax float64 // worst trailing window, at most
		minMax float64 // worst trailing window, at least (the figure is real)
		satMin float64 // steady minimum at 2x and 10x, at least
	}{
		// The seeds' counter: a cold burst at phase 0.9 admits ~1.9x.
		{"two-bucket", TwoBucket(accLimit), 2, 1.85, 0.95},
		{"default", DefaultSliding(accLimit), 1.05, 1, 0.95},
		{"strict", Sliding{Limit: accLimit, K: DefaultSubBuckets, Strict: true}, 1, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			worst, satMin, oneMin := accuracyWorst(t, tt.s)
			t.Logf("%s: worst trailing window %.3fx limit, steady min %.3fx (2x, 10x), %.3fx (1x)", tt.name, worst, satMin, oneMin)
			if worst > tt.maxMax || worst < tt.minMax {
				t.Errorf("worst trailing window %.3fx limit, want %.2f to %.2f", worst, tt.minMax, tt.maxMax)
			}
			if satMin < tt.satMin {
				t.Errorf("steady min %.3fx limit, want at least %.2f", satMin, tt.satMin)
			}
		})
	}
}

// The candidates the default was chosen from, for the record (go test -v
// -run AccuracyCandidates): weighted K = 4 to 20 and strict.
func TestAccuracyCandidates(t *testing.T) {
	t.Parallel()
	for _, strict := range []bool{false, true} {
		for _, k := range []int64{1, 2, 4, 8, 10, 16, 20} {
			s := Sliding{Limit: accLimit, K: k, Strict: strict}
			worst, satMin, oneMin := accuracyWorst(t, s)
			t.Logf("K=%2d strict=%-5v: worst %.3f, steady min %.3f (2x, 10x), %.3f (1x)", k, strict, worst, satMin, oneMin)
			if strict && worst > 1 {
				t.Errorf("strict K=%d admitted %.3fx the limit in a trailing window", k, worst)
			}
		}
	}
}
