package main

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// schedule is one random run of the fault search: a pool, a key's limit,
// phases of load per region and network faults, on the virtual clock.
// Everything follows from Seed (see gen).
type schedule struct {
	Seed    uint64
	Regions int
	Nodes   int
	Delay   time.Duration
	Window  time.Duration
	Limit   uint64
	Strict  bool
	Windows int // the run's length, in windows
	Phases  []phase
	Faults  []fault
	// Restarts are store restarts (restart.go), in time order.
	Restarts []restart
	// Members are nodes joining and leaving (members.go), in time order.
	Members []memberChange
	// Fallbacks are nodes deciding from their in-memory fallbacks
	// (fallback.go), in time order.
	Fallbacks []fallback
	// Jitter is each message's delay past Delay: Jitter x an exponential
	// draw, at most 5 x Jitter (config.Jitter); 0: none.
	Jitter time.Duration
	// Margin is the guard's margin (config.Margin): not drawn, the
	// search's -margin.
	Margin time.Duration
}

// restart empties region Region's store AtMs from the run's start; node k
// of the region reads the store's new epoch Detect[k] ms later (it reads
// it every second, at a phase of its own) and repairs.
type restart struct {
	Region int
	AtMs   int64
	Detect []int64
}

func (r restart) String() string {
	d := make([]string, len(r.Detect))
	for i, x := range r.Detect {
		d[i] = fmt.Sprint(x)
	}
	return fmt.Sprintf("restart %d at %d ms (seen after %s ms)", r.Region, r.AtMs, strings.Join(d, ","))
}

// phase offers load from FromMs to ToMs (from the run's start): Rate[r] is
// region r's offered rate in multiples of the limit's rate (Limit per
// Window), Poisson or evenly spaced; Burst[r] releases Limit requests in
// region r at FromMs (100 per ms).
type phase struct {
	FromMs, ToMs int64
	Rate         []float64
	Burst        []bool
	Poisson      bool
}

// fault cuts the network from FromMs to ToMs: the pair (a, b) cannot talk
// when Group[a] != Group[b] (a split), or when the pair is in Links.
type fault struct {
	FromMs, ToMs int64
	Group        []int    // a split: each region's side; nil for cut links
	Links        [][2]int // cut links
}

func (f fault) cuts(a, b int) bool {
	if f.Group != nil {
		return f.Group[a] != f.Group[b]
	}
	for _, l := range f.Links {
		if (l[0] == a && l[1] == b) || (l[0] == b && l[1] == a) {
			return true
		}
	}
	return false
}

func (f fault) String() string {
	if f.Group != nil {
		groups := map[int][]string{}
		for r, g := range f.Group {
			groups[g] = append(groups[g], fmt.Sprint(r))
		}
		var sides []string
		for _, g := range slices.Sorted(maps.Keys(groups)) {
			sides = append(sides, strings.Join(groups[g], ","))
		}
		return fmt.Sprintf("split %s %d-%d ms", strings.Join(sides, "|"), f.FromMs, f.ToMs)
	}
	var ls []string
	for _, l := range f.Links {
		ls = append(ls, fmt.Sprintf("%d-%d", l[0], l[1]))
	}
	return fmt.Sprintf("cut %s %d-%d ms", strings.Join(ls, ","), f.FromMs, f.ToMs)
}

// gen returns the schedule of seed: 3 to 6 regions (10 in one of eight),
// 1 to 3 nodes each, 30 to 100 ms one-way, windows of 1 s or 10 s, limits
// from 1 to 300, six windows of one to four load phases, and up to two
// faults: a split into two or three sides, or one or more cut links, each
// held for half a window to two windows. One schedule in four also has one
// or two store restarts (a region's Redis restarting empty) at any
// instant, drawn from a stream of their own after the rest, so that
// every other part of a seed's schedule is the same as before restarts
// were drawn.
func gen(seed uint64) schedule {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	pick := func(xs ...int) int { return xs[rng.IntN(len(xs))] }
	s := schedule{Seed: seed, Regions: 3 + rng.IntN(4), Nodes: 1 + rng.IntN(3), Delay: time.Duration(pick(30, 60, 100)) * time.Millisecond,
		Window: time.Duration(pick(1, 10)) * time.Second, Limit: uint64(pick(1, 2, 3, 5, 10, 30, 100, 300)), Strict: rng.IntN(4) == 0, Windows: 6}
	if rng.IntN(8) == 0 {
		s.Regions = 10
	}
	wm := s.Window.Milliseconds()
	span := int64(s.Windows) * wm
	cuts := []int64{0, span}
	for range rng.IntN(4) {
		cuts = append(cuts, rng.Int64N(span))
	}
	slices.Sort(cuts)
	rates := []float64{0, 0, 0.1, 0.5, 1, 3, 10}
	for i := 0; i+1 < len(cuts); i++ {
		if cuts[i] == cuts[i+1] {
			continue
		}
		p := phase{FromMs: cuts[i], ToMs: cuts[i+1], Rate: make([]float64, s.Regions), Burst: make([]bool, s.Regions), Poisson: rng.IntN(2) == 0}
		for r := range s.Regions {
			p.Rate[r] = rates[rng.IntN(len(rates))]
			p.Burst[r] = rng.IntN(6) == 0
		}
		s.Phases = append(s.Phases, p)
	}
	for range rng.IntN(3) {
		from := rng.Int64N(span - wm)
		f := fault{FromMs: from, ToMs: min(span, from+wm/2+rng.Int64N(3*wm/2))}
		if rng.IntN(2) == 0 {
			sides := 2 + rng.IntN(2)
			f.Group = make([]int, s.Regions)
			for r := range f.Group {
				f.Group[r] = rng.IntN(sides)
			}
			f.Group[0], f.Group[1] = 0, 1 // at least two sides
		} else {
			for a := range s.Regions {
				for b := a + 1; b < s.Regions; b++ {
					if rng.IntN(s.Regions) == 0 {
						f.Links = append(f.Links, [2]int{a, b})
					}
				}
			}
			if len(f.Links) == 0 {
				f.Links = [][2]int{{0, 1}}
			}
		}
		s.Faults = append(s.Faults, f)
	}
	rr := rand.New(rand.NewPCG(seed, 0x4e57a47))
	if rr.IntN(4) == 0 {
		for range 1 + rr.IntN(2) {
			r := restart{Region: rr.IntN(s.Regions), AtMs: rr.Int64N(span)}
			for range s.Nodes {
				r.Detect = append(r.Detect, 1+rr.Int64N(1000))
			}
			s.Restarts = append(s.Restarts, r)
		}
		slices.SortStableFunc(s.Restarts, func(a, b restart) int { return cmp.Compare(a.AtMs, b.AtMs) })
	}
	genMembers(&s)
	genFallbacks(&s)
	// One schedule in four has jitter, from a stream of its own.
	if rj := rand.New(rand.NewPCG(seed, 0x717732)); rj.IntN(4) == 0 {
		s.Jitter = time.Duration([]int{5, 15, 40}[rj.IntN(3)]) * time.Millisecond
	}
	return s
}

// withoutJitter returns s without its jitter: the schedule its seed gave
// before jitter was drawn.
func (s schedule) withoutJitter() schedule {
	s.Jitter = 0
	return s
}

// withoutRestarts returns s without its store restarts: the schedule its
// seed gave before restarts were drawn.
func (s schedule) withoutRestarts() schedule {
	s.Restarts = nil
	return s
}

func (s schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d regions x %d nodes, %v one-way, limit %d per %v", s.Seed, s.Regions, s.Nodes, s.Delay, s.Limit, s.Window)
	if s.Strict {
		b.WriteString(" (strict)")
	}
	for _, p := range s.Phases {
		fmt.Fprintf(&b, "; %d-%d ms rates %v", p.FromMs, p.ToMs, p.Rate)
		if slices.Contains(p.Burst, true) {
			fmt.Fprintf(&b, " bursts %v", p.Burst)
		}
	}
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "; %v", f)
	}
	for _, r := range s.Restarts {
		fmt.Fprintf(&b, "; %v", r)
	}
	for _, m := range s.Members {
		fmt.Fprintf(&b, "; %v", m)
	}
	for _, f := range s.Fallbacks {
		fmt.Fprintf(&b, "; %v", f)
	}
	if s.Jitter > 0 {
		fmt.Fprintf(&b, "; jitter %v", s.Jitter)
	}
	return b.String()
}

// bounds are the global bound's limits, in hits, in a trailing window:
// Calm when the window overlaps no fault, Fault when it does.
type bounds struct{ Calm, Fault float64 }

// boundsOf is what rlcluster promises for s: at most max(1.05 L, L + 1)
// in any trailing window, and max((1 + 1/R) L, that) in one that overlaps
// a fault, whatever its shape. A store restart is no fault of the network:
// a window that overlaps one keeps its bound (no acknowledged hit may be
// lost by a restart or its repair).
func boundsOf(s schedule) bounds {
	l := float64(s.Limit)
	calm := max(1.05*l, l+1)
	return bounds{Calm: calm, Fault: max((1+1/float64(s.Regions))*l, calm)}
}

// outcome is a schedule's run: the worst trailing window over its bound.
type outcome struct {
	Worst    float64 // the largest count/bound over every admission (> 1: the bound is broken)
	Count    int     // that window's count
	AtMs     int64   // its end, from the run's start
	InFault  bool    // whether it overlapped a fault
	Admitted int
	// Under is the requests of traffic under the limit, FalseDenied
	// those of them denied, and FalseBy those by each cause (see
	// underLimit).
	Under, FalseDenied int
	FalseBy            [nCauses]int
	// Calm is the requests of phases offered at most the limit's rate in
	// all, with no burst, a window or more after the phase began, and
	// CalmDenied those of them denied: an exact sliding log denies them
	// only when the phase's random arrivals put more than the limit in a
	// window, which CalmLogDenied counts.
	Calm, CalmDenied, CalmLogDenied int
}

// runSchedule plays s with the guard on.
func runSchedule(s schedule) outcome {
	cfg := config{Regions: s.Regions, Nodes: s.Nodes, Delay: s.Delay, Flush: 20 * time.Millisecond, Suspicion: 500 * time.Millisecond,
		Guard: true, Limit: window.Limit{Limit: s.Limit, Window: s.Window, Strict: s.Strict}, Reconcile: len(s.Restarts) > 0,
		Jitter: s.Jitter, JitterSeed: s.Seed, Margin: s.Margin}
	start := epoch + s.Window.Milliseconds()/7
	w := newWorld(cfg, epoch)
	w.members(s.Members, start)
	w.fallbacks(s.Fallbacks, start)
	for _, r := range s.Restarts {
		w.restart(r.Region, start+r.AtMs, r.Detect)
	}
	w.cfg.Cut = func(a, b int, now int64) bool {
		for _, f := range s.Faults {
			if now >= start+f.FromMs && now < start+f.ToMs && f.cuts(a, b) {
				return true
			}
		}
		return false
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0xa11))
	wm := s.Window.Milliseconds()
	perMs := float64(s.Limit) / float64(wm) // the limit's rate, per ms
	req := func(r int, at int64) { w.request(r, at, "k") }
	for _, p := range s.Phases {
		for r := range s.Regions {
			if p.Burst[r] {
				for i := range s.Limit {
					w.requestBurst(r, start+p.FromMs+int64(i)/100, "k")
				}
			}
			rate := p.Rate[r] * perMs
			if rate <= 0 {
				continue
			}
			for t := float64(p.FromMs) + rng.Float64()/rate; t < float64(p.ToMs); {
				req(r, start+int64(t))
				if p.Poisson {
					t += rng.ExpFloat64() / rate
				} else {
					t += 1 / rate
				}
			}
		}
	}
	span := int64(s.Windows) * wm
	w.run(start + span + wm)
	b := boundsOf(s)
	out := outcome{}
	ts := w.admitted["k"]
	out.Admitted = len(ts)
	lo := 0
	for i, t := range ts {
		for ts[lo] <= t-wm {
			lo++
		}
		if i+1 < len(ts) && ts[i+1] == t {
			continue // the window ends after every admission at t
		}
		rel := t - start
		inFault := false
		for _, f := range s.Faults {
			if rel-wm < f.ToMs && rel >= f.FromMs {
				inFault = true
			}
		}
		bound := b.Calm
		if inFault {
			bound = b.Fault
		}
		if r := float64(i-lo+1) / bound; r > out.Worst {
			out = outcome{Worst: r, Count: i - lo + 1, AtMs: rel, InFault: inFault, Admitted: len(ts)}
		}
	}
	all := requests(ts, w.denied["k"], w.how["k"])
	out.Under, out.FalseDenied, out.FalseBy = underLimit(all, wm, s.Limit)
	out.Calm, out.CalmDenied, out.CalmLogDenied = calm(s, start, all)
	return out
}

// request is one request of a run, for the false-denial counts: when it
// arrived, whether it was denied, whether it was part of a burst, and what
// denied it.
type request struct {
	t             int64
	denied, burst bool
	by            cause
}

// requests merges a key's admissions (ts, in order) and denials (denied,
// in order; how[i] says how denied[i] was denied) into one list in
// arrival order.
func requests(ts, denied []int64, how []denial) []request {
	all := make([]request, 0, len(ts)+len(denied))
	for _, t := range ts {
		all = append(all, request{t: t})
	}
	for i, t := range denied {
		all = append(all, request{t: t, denied: true, burst: how[i].burst, by: how[i].by})
	}
	slices.SortStableFunc(all, func(a, b request) int { return cmp.Compare(a.t, b.t) })
	return all
}

// underLimit counts the requests of traffic under the limit, those with
// at most limit requests (admitted or denied) in the trailing window
// (t-wm, t] of the request, itself included, how many of them were
// denied (an exact sliding log admits every one), and how many by each
// cause. Denied requests of a
// burst are left out: the guard lets a burst from idle take only this
// region's share of the headroom in its first horizon (docs/design.md,
// "The burst guard").
func underLimit(all []request, wm int64, limit uint64) (under, falseDenied int, by [nCauses]int) {
	lo := 0
	for i, r := range all {
		for all[lo].t <= r.t-wm {
			lo++
		}
		if uint64(i-lo+1) <= limit && !(r.denied && r.burst) {
			under++
			if r.denied {
				falseDenied++
				by[r.by]++
			}
		}
	}
	return under, falseDenied, by
}

// calm counts the requests of s's calm phases (see outcome.Calm), those
// of them denied, and those an exact sliding log over the same requests
// would deny.
func calm(s schedule, start int64, all []request) (n, den, logDen int) {
	wm := s.Window.Milliseconds()
	in := func(t int64) bool {
		rel := t - start
		for _, p := range s.Phases {
			if rel < p.FromMs || rel >= p.ToMs {
				continue
			}
			sum := 0.0
			for r, x := range p.Rate {
				sum += x
				if p.Burst[r] {
					return false
				}
			}
			return sum <= 1 && rel >= p.FromMs+wm
		}
		return false
	}
	var log []int64 // the exact log's admissions
	lo := 0
	for _, r := range all {
		for lo < len(log) && log[lo] <= r.t-wm {
			lo++
		}
		ok := uint64(len(log)-lo) < s.Limit
		if ok {
			log = append(log, r.t)
		}
		if in(r.t) {
			n++
			if r.denied {
				den++
			}
			if !ok {
				logDen++
			}
		}
	}
	return n, den, logDen
}

// class names the kind of schedule s is, for the search's table: its
// faults (a store restart, whatever else it has; else none, one region cut
// off alone, another split, cut links), its window, and whether its limit
// is small (below regions x nodes).
func class(s schedule) string {
	fk := "no fault"
	for _, f := range s.Faults {
		k := "cut links"
		if f.Group != nil {
			k = "other split"
			sizes := map[int]int{}
			for _, g := range f.Group {
				sizes[g]++
			}
			if len(sizes) == 2 {
				for _, n := range sizes {
					if n == 1 {
						k = "one region alone"
					}
				}
			}
		}
		if fk == "no fault" || k == "cut links" || (k == "other split" && fk == "one region alone") {
			fk = k
		}
	}
	if s.Jitter > 0 && fk == "no fault" {
		fk = "jitter"
	}
	if len(s.Members) > 0 {
		fk = "membership"
	}
	if len(s.Fallbacks) > 0 {
		fk = "fallback"
	}
	if len(s.Restarts) > 0 {
		fk = "restart"
	}
	size := "limit >= regions x nodes"
	if s.Limit < uint64(s.Regions*s.Nodes) {
		size = "small limit"
	}
	return fmt.Sprintf("%s, %v windows, %s", fk, s.Window, size)
}

// overBound is a schedule that went over its bound: its count in the
// worst trailing window over the bound.
type overBound struct {
	Seed  uint64
	Class string
	Worst float64
}

// classRow is one class's line of the search's table.
type classRow struct {
	Class        string
	Runs, Broken int
	Worst        float64
	Seed         uint64
	// Under, FalseDenied, FalseBy and the Calm counts sum the class's
	// schedules' (see outcome).
	Under, FalseDenied              int
	FalseBy                         [nCauses]int
	Calm, CalmDenied, CalmLogDenied int
}

// searchTable runs the schedules of seeds from..from+n-1 that prep
// accepts (after it changed them as it would) on procs goroutines and returns one row per class, in name
// order, and the schedules that went over their bound, in seed order,
// with how far.
func searchTable(from uint64, n, procs int, prep func(*schedule) bool) ([]classRow, []overBound) {
	outs := make([]outcome, n)
	kept := make([]bool, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(procs, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if s := gen(from + uint64(i)); prep(&s) {
					kept[i] = true
					outs[i] = runSchedule(s)
				}
			}
		}()
	}
	wg.Wait()
	rows := map[string]*classRow{}
	var over []overBound
	for i, o := range outs {
		if !kept[i] {
			continue
		}
		seed := from + uint64(i)
		c := class(gen(seed))
		r := rows[c]
		if r == nil {
			r = &classRow{Class: c}
			rows[c] = r
		}
		r.Runs++
		r.Under += o.Under
		r.FalseDenied += o.FalseDenied
		for c, n := range o.FalseBy {
			r.FalseBy[c] += n
		}
		r.Calm += o.Calm
		r.CalmDenied += o.CalmDenied
		r.CalmLogDenied += o.CalmLogDenied
		if o.Worst > 1+1e-9 {
			r.Broken++
			over = append(over, overBound{Seed: seed, Class: c, Worst: o.Worst})
		}
		if o.Worst > r.Worst {
			r.Worst, r.Seed = o.Worst, seed
		}
	}
	var out []classRow
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range rows {
			if !yield(k) {
				return
			}
		}
	}) {
		out = append(out, *rows[k])
	}
	return out, over
}
