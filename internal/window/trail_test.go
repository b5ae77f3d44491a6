package window

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// trailState is one key under the default sliding window, as a store keeps
// it: per region the trails of the previous and current bucket, as of
// bucket b. Region 0 is local (exact up to ExactMax); the others are
// remote regions whose hits arrive by remote(), coarse as replication
// carries them.
type trailState struct {
	l         Limit
	b         int64
	prev, cur []Trail
}

func newTrailState(l Limit, regions int) *trailState {
	return &trailState{l: l, b: -1 << 40, prev: make([]Trail, regions), cur: make([]Trail, regions)}
}

// at moves the state to the bucket of nowMs.
func (s *trailState) at(nowMs int64) {
	b := Bucket(nowMs, s.l.Window)
	switch {
	case b == s.b+1:
		s.prev, s.cur = s.cur, make([]Trail, len(s.cur))
	case b > s.b+1:
		s.prev, s.cur = make([]Trail, len(s.cur)), make([]Trail, len(s.cur))
	}
	s.b = b
}

func (s *trailState) decide(nowMs int64, hits uint64, commit bool) Decision {
	if commit {
		s.at(nowMs)
	} else if b := Bucket(nowMs, s.l.Window); b != s.b {
		c := s.clone()
		c.at(nowMs)
		return c.decide(nowMs, hits, false)
	}
	d := s.l.DecideTrails(nowMs, s.prev, s.cur, 0, hits)
	if commit && d.Allowed {
		s.cur[0].Add(d.ElapsedMs, s.l.WindowMs(), hits, s.l.Exact())
	}
	return d
}

// remote records hits of region r at nowMs, as its coarse trail.
func (s *trailState) remote(r int, nowMs int64, hits uint64) {
	s.at(nowMs)
	w := s.l.WindowMs()
	s.cur[r].Add(nowMs-s.b*w, w, hits, false)
}

func (s *trailState) clone() *trailState {
	c := &trailState{l: s.l, b: s.b}
	for _, t := range s.prev {
		c.prev = append(c.prev, slices.Clone(t))
	}
	for _, t := range s.cur {
		c.cur = append(c.cur, slices.Clone(t))
	}
	return c
}

// TestDecideTrailsContract checks every decision of random traffic from
// several regions, exact and coarse, against exactRetry: RetryAfter,
// ResetAfter and Remaining are exact to the millisecond.
func TestDecideTrailsContract(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	for run := range 60 {
		l := randomLimit(r, SlidingWindow)
		if run%3 == 0 {
			l.Limit = 1 + r.Uint64N(ExactMax)
		}
		regions := 1 + r.IntN(3)
		s := newTrailState(l, regions)
		w := l.WindowMs()
		now := int64(1_700_000_000_000)/w*w + r.Int64N(w)
		for i := range 200 {
			now += r.Int64N(w/10 + 1)
			if reg := r.IntN(regions + 1); reg > 0 && reg < regions {
				s.remote(reg, now, randomHits(r, l.Limit))
				continue
			}
			hits := randomHits(r, l.Limit)
			d := s.decide(now, hits, false)
			if msg := exactRetry(trailLimiter{s}, l, now, hits, d); msg != "" {
				t.Fatalf("run %d (%v, %d regions) step %d: %s", run, l, regions, i, msg)
			}
			s.decide(now, hits, true)
		}
	}
}

// trailLimiter adapts a trailState to exactRetry's limiter and clone.
type trailLimiter struct{ s *trailState }

func (x trailLimiter) decide(nowMs int64, hits uint64, commit bool) Decision {
	return x.s.decide(nowMs, hits, commit)
}

// TestDecideTrailsExactIsLog: up to ExactMax, one region decides exactly as
// a sliding log: the same verdict, estimate, remaining, retry and reset.
func TestDecideTrailsExactIsLog(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(21, 22))
	for run := range 40 {
		l := randomLimit(r, SlidingWindow)
		l.Limit = 1 + r.Uint64N(min(ExactMax, 50))
		if run%4 == 0 {
			l.Limit = ExactMax
		}
		s := newTrailState(l, 1)
		lg := Limit{Limit: l.Limit, Window: l.Window, Algorithm: SlidingLog}
		var log []LogEntry
		w := l.WindowMs()
		now := int64(1_700_000_000_000)/w*w + r.Int64N(w)
		for i := range 400 {
			switch r.IntN(4) {
			case 0:
				now += r.Int64N(w)
			case 1:
				now += r.Int64N(3)
			default:
				now += r.Int64N(w/int64(l.Limit)+1) + 1
			}
			hits := randomHits(r, l.Limit)
			got := s.decide(now, hits, true)
			want := lg.DecideLog(now, log, hits)
			if want.Allowed {
				log = append(log, LogEntry{AtMs: now, Hits: hits})
			}
			if got.Allowed != want.Allowed || got.Estimate != want.Estimate || got.Remaining != want.Remaining ||
				got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter {
				t.Fatalf("run %d (%v) step %d at %d, %d hits:\n got  %+v\n want %+v", run, l, i, now, hits, got, want)
			}
		}
	}
}

// TestTrailMerge: snapshots of one growing trail, merged in any order and
// any number of times, give the newest, coarse; a region's exact trail
// merged with a coarse echo of itself keeps its exact marks.
func TestTrailMerge(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(31, 32))
	for range 50 {
		w := int64(1000 + r.IntN(100000))
		var grow Trail
		var snaps []Trail
		at := int64(0)
		for at < w {
			grow.Add(at, w, 1+r.Uint64N(5), true)
			snaps = append(snaps, slices.Clone(grow.Coarse(w)))
			at += r.Int64N(w/20 + 1)
		}
		r.Shuffle(len(snaps), func(i, j int) { snaps[i], snaps[j] = snaps[j], snaps[i] })
		snaps = append(snaps, snaps[:len(snaps)/2]...)
		var m Trail
		for _, s := range snaps {
			m.Merge(s, w)
		}
		if want := grow.Coarse(w); !slices.Equal(m, want) {
			t.Fatalf("merged %v, want %v", m, want)
		}
		if !m.Valid(w) {
			t.Fatalf("merged trail %v not valid", m)
		}
		own := slices.Clone(grow)
		own.Merge(grow.Coarse(w), w)
		if !slices.Equal(own, grow) {
			t.Fatalf("exact trail merged with its echo = %v, want %v", own, grow)
		}
	}
}

// TestTrailMergeSpans: a region's trail recorded by writers of both
// granule sizes (coarse granules, and whole spans as a node of the
// earlier version records them), reported gathered into either
// (Trail.Coarse, Trail.Spans), merges in any order into a trail that holds
// exactly the region's hits and never lets one leave before it does; once
// the newest snapshot is reported coarse, into that snapshot.
func TestTrailMergeSpans(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(33, 34))
	for range 200 {
		w := int64(1000 + r.IntN(100000))
		var grow Trail
		var snaps []Trail
		at := int64(0)
		for at < w {
			hits := 1 + r.Uint64N(5)
			if n := len(grow); n > 0 && r.IntN(2) == 0 && MergeSpan(max(at, grow[n-1].At), w) == MergeSpan(grow[n-1].At, w) {
				grow[n-1].At, grow[n-1].Cum = max(at, grow[n-1].At), grow[n-1].Cum+hits // a writer that records in spans
			} else {
				grow.Add(at, w, hits, false)
			}
			snap := grow.Coarse(w)
			if r.IntN(2) == 0 {
				snap = grow.Spans(w)
			}
			if !snap.Valid(w) {
				t.Fatalf("report %v not valid", snap)
			}
			snaps = append(snaps, slices.Clone(snap))
			at += r.Int64N(w/100 + 1)
		}
		r.Shuffle(len(snaps), func(i, j int) { snaps[i], snaps[j] = snaps[j], snaps[i] })
		var m Trail
		for _, s := range snaps {
			m.Merge(s, w)
		}
		if got, want := m.Count(), grow.Count(); got != want {
			t.Fatalf("merged %d hits, want %d", got, want)
		}
		for e := int64(0); e < w; e += 1 + r.Int64N(w/300+1) {
			if got, want := m.After(e), grow.After(e); got < want {
				t.Fatalf("merged After(%d) = %d, want at least %d", e, got, want)
			}
		}
		m.Merge(grow.Coarse(w), w)
		if want := grow.Coarse(w); !slices.Equal(m, want) {
			t.Fatalf("merged with the newest report %v, want %v", m, want)
		}
		if len(m) > Granules || len(grow.Spans(w)) > MergeGranules {
			t.Fatalf("%d marks coarse, %d in spans", len(m), len(grow.Spans(w)))
		}
	}
}

// decisionLog runs arrivals through a one-region trailState and judges
// every decision against an exact sliding log of the node's own
// admissions: a denial is unjustified when the admitted hits in the
// trailing window plus this request fit the limit, an admission when they
// do not. It also tracks the worst trailing window at an admission.
type decisionLog struct {
	decisions, denials, badDeny, badAdmit int
	admitted                              uint64
	worst                                 uint64 // most hits in any trailing window, at an admission
}

func judge(l Limit, arr []arrival) decisionLog {
	return judgeOn(newTrailState(l, 1), l, arr)
}

// judgeOn is judge on any limiter of l.
func judgeOn(s limiter, l Limit, arr []arrival) decisionLog {
	var out decisionLog
	ex := &exactLog{w: l.WindowMs()}
	for _, a := range arr {
		d := s.decide(a.at, a.hits, true)
		fits := ex.count(a.at)+a.hits <= l.Limit
		out.decisions++
		switch {
		case d.Allowed:
			if !fits {
				out.badAdmit++
			}
			ex.add(a)
			out.admitted += a.hits
			out.worst = max(out.worst, ex.sum)
		default:
			out.denials++
			if fits {
				out.badDeny++
			}
		}
	}
	return out
}

// logAdmits returns the hits an exact sliding log admits of arr.
func logAdmits(l Limit, arr []arrival) uint64 {
	ex := &exactLog{w: l.WindowMs()}
	var n uint64
	for _, a := range arr {
		if ex.count(a.at)+a.hits <= l.Limit {
			ex.add(a)
			n += a.hits
		}
	}
	return n
}

// TestTrailAccuracy is the default counter's promise in one region, over
// limits from 1 to 100000 and windows from 1 s to 1 h: never above the
// limit in a trailing window, no unjustified admission, unjustified
// denials at most 0.1% of decisions under Poisson arrivals at 0.9x the
// limit's rate and none at 0.5x, and at 2x and 10x at least 0.98 of the
// hits an exact log admits.
func TestTrailAccuracy(t *testing.T) {
	t.Parallel()
	limits := []uint64{1, 10, 100, 1000, ExactMax, ExactMax + 1, 10000, 100000}
	windows := []time.Duration{time.Second, 10 * time.Second, time.Hour}
	for _, lim := range limits {
		for _, w := range windows {
			l := Limit{Limit: lim, Window: w}
			t.Run(fmt.Sprintf("%d per %v", lim, w), func(t *testing.T) {
				t.Parallel()
				windows := max(8, int(4000/lim))
				if lim >= 10000 {
					windows = 3
				}
				for _, rate := range []float64{0.5, 0.9, 2, 10} {
					r := rand.New(rand.NewPCG(lim, uint64(w)))
					start := (1_700_000_000_000/l.WindowMs() + 1) * l.WindowMs()
					arr := poisson(rate)(r, l, start, windows)
					got := judge(l, arr)
					if got.worst > lim || got.badAdmit > 0 {
						t.Errorf("%.1fx: worst trailing window %d of %d, %d unjustified admissions", rate, got.worst, lim, got.badAdmit)
					}
					share := float64(got.badDeny) / float64(got.decisions)
					switch {
					case rate == 0.5 && got.badDeny > 0:
						t.Errorf("0.5x: %d unjustified denials of %d decisions, want none", got.badDeny, got.decisions)
					case rate == 0.9 && share > 0.001:
						t.Errorf("0.9x: %.3f%% unjustified denials (%d of %d), want at most 0.1%%", 100*share, got.badDeny, got.decisions)
					case rate >= 2:
						if ratio := float64(got.admitted) / float64(logAdmits(l, arr)); ratio < 0.98 {
							t.Errorf("%.0fx: admitted %.4f of an exact log's hits, want at least 0.98", rate, ratio)
						}
					}
				}
			})
		}
	}
}

// TestTrailExtends: Extends says beforehand whether Add appends a mark
// (leaving the marks there were as they are) or changes the last one,
// exact and coarse, offsets stepping back included.
func TestTrailExtends(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const wMs = 60_000
	for _, exact := range []bool{true, false} {
		var tr Trail
		appended, changed := 0, 0
		at := int64(0)
		for range 5000 {
			switch rng.IntN(4) {
			case 0: // the same millisecond, or one a little back
				at = max(at-rng.Int64N(3), 0)
			default:
				at = min(at+rng.Int64N(2000), wMs-1)
			}
			before := slices.Clone(tr)
			ext := tr.Extends(at, wMs, exact)
			tr.Add(at, wMs, 1+rng.Uint64N(3), exact)
			if got := len(tr) > len(before); got != ext {
				t.Fatalf("exact %v: Extends(%d) = %v on %v, but Add made %v", exact, at, ext, before, tr)
			}
			if ext && !slices.Equal(tr[:len(before)], before) {
				t.Fatalf("exact %v: Add(%d) appended but changed the marks before: %v -> %v", exact, at, before, tr)
			}
			if ext {
				appended++
			} else {
				changed++
			}
			if at == wMs-1 {
				tr, at = nil, 0
			}
		}
		if appended == 0 || changed == 0 {
			t.Errorf("exact %v: %d appends and %d changes in place, want both", exact, appended, changed)
		}
	}
}

// TestTrailMergeSameReport: merging a report equal to the trail (a bucket
// that no longer changes, passed again on every decision) leaves the
// trail's slice as it is and allocates nothing.
func TestTrailMergeSameReport(t *testing.T) {
	const wMs = 60_000
	var tr Trail
	for at := int64(0); at < wMs; at += 700 {
		tr.Add(at, wMs, 2, true)
	}
	same := slices.Clone(tr)
	before := &tr[0]
	if n := testing.AllocsPerRun(100, func() { tr.Merge(same, wMs) }); n != 0 {
		t.Errorf("Merge of an equal report: %v allocations, want 0", n)
	}
	if &tr[0] != before || !slices.Equal(tr, same) {
		t.Errorf("Merge of an equal report changed the trail: %v", tr)
	}
}
