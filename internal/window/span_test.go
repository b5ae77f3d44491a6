package window

import (
	"math/rand/v2"
	"testing"
	"time"
)

// spanKey is a one-key, several-region span counter driven in tests: the
// states of the previous and current bucket per region.
type spanKey struct {
	l         Limit
	b         int64
	prev, cur []Halves
	local     int
}

func newSpanKey(l Limit, regions int) *spanKey {
	return &spanKey{l: l, b: -1 << 40, prev: make([]Halves, regions), cur: make([]Halves, regions)}
}

// at brings the key to the bucket of nowMs.
func (k *spanKey) at(nowMs int64) {
	b := Bucket(nowMs, k.l.Window)
	switch {
	case b == k.b+1:
		copy(k.prev, k.cur)
		clear(k.cur)
	case b > k.b+1:
		clear(k.prev)
		clear(k.cur)
	}
	k.b = b
}

func (k *spanKey) decide(nowMs int64, hits uint64, peek bool) Decision {
	k.at(nowMs)
	d := k.l.DecideSpans(nowMs, k.prev, k.cur, k.local, hits)
	if d.Allowed && !peek {
		w := k.l.WindowMs()
		k.cur[k.local].Add(nowMs-k.b*w, w, hits)
	}
	return d
}

// clone returns an independent copy.
func (k *spanKey) clone() *spanKey {
	c := *k
	c.prev = append([]Halves(nil), k.prev...)
	c.cur = append([]Halves(nil), k.cur...)
	return &c
}

// The estimate of a decision recomputed from its terms, and RetryAfter and
// ResetAfter checked against a brute-force search one millisecond at a
// time, over random traffic from several regions, weighted and strict.
func TestDecideSpansExact(t *testing.T) {
	t.Parallel()
	for _, strict := range []bool{false, true} {
		r := rand.New(rand.NewPCG(7, 9))
		l := Limit{Limit: 40, Window: 1001 * time.Millisecond, Strict: strict}
		k := newSpanKey(l, 3)
		now := int64(1_700_000_000_000)
		for i := range 3000 {
			now += r.Int64N(60)
			k.local = r.IntN(3)
			hits := 1 + r.Uint64N(5)
			k.at(now)
			before := k.clone()
			d := k.decide(now, hits, false)
			// The estimate from the terms alone.
			est := d.SubWhole
			for _, tm := range l.SpanTerms(d.ElapsedMs, before.prev) {
				est += tm.Value()
			}
			if est != d.Estimate {
				t.Fatalf("strict %v step %d: estimate %d, terms give %d", strict, i, d.Estimate, est)
			}
			if d.Allowed != (d.Estimate+hits <= l.Limit) {
				t.Fatalf("step %d: allowed %v with estimate %d + %d", i, d.Allowed, d.Estimate, hits)
			}
			if i%7 != 0 {
				continue
			}
			// Brute force: the first ms at which the request (or the full
			// limit, for reset) fits with no other traffic.
			first := func(need uint64, from *spanKey) time.Duration {
				for dt := int64(0); dt <= 3*l.WindowMs(); dt++ {
					c := from.clone()
					if c.decide(now+dt, need, true).Allowed {
						return time.Duration(dt) * time.Millisecond
					}
				}
				return Never
			}
			if !d.Allowed {
				if got, want := d.RetryAfter, first(hits, before); got != want {
					t.Fatalf("strict %v step %d: RetryAfter %v, want %v", strict, i, got, want)
				}
			}
			if got, want := d.ResetAfter, first(l.Limit, k); got != want {
				t.Fatalf("strict %v step %d: ResetAfter %v, want %v", strict, i, got, want)
			}
			if got, want := d.Remaining, l.Limit-min(l.Limit, d.Estimate+map[bool]uint64{true: hits}[d.Allowed]); got != want {
				t.Fatalf("step %d: Remaining %d, want %d", i, got, want)
			}
		}
	}
}

// A burst that starts late in a bucket is weighted over its own span: at
// 90% of the bucket 10 hits fill a limit of 10, and the next bucket admits
// nothing until the burst's hits begin to leave the trailing window.
func TestDecideSpansLateBurst(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 10, Window: 10 * time.Second}
	k := newSpanKey(l, 1)
	for i := range int64(10) {
		if d := k.decide(9000+i*100, 1, false); !d.Allowed {
			t.Fatalf("hit %d denied", i)
		}
	}
	// Next bucket at 50%: the two-bucket formula would admit 5 more.
	d := k.decide(15000, 1, false)
	if d.Allowed || d.Estimate != 10 {
		t.Errorf("at 15 s: allowed %v, estimate %d; want denied at 10", d.Allowed, d.Estimate)
	}
	// The span is 9000..9900 (901 ms): at e = 9000 of the next bucket
	// floor(10 * 900 / 901) = 9 remain, so one more fits, 4 s later.
	if got, want := d.RetryAfter, 4*time.Second; got != want {
		t.Errorf("RetryAfter = %v, want %v", got, want)
	}
	if two := (Limit{Limit: 10, Window: 10 * time.Second}).DecideCounter(15000, Counts{Prev: 10}, 1); !two.Allowed {
		t.Errorf("the two-bucket counter denies at 15 s; this test expects it to admit")
	}
}

// Merging halves is idempotent, commutative and associative, and never
// goes back: any order of any subset of a region's reports, with
// duplicates, merges to its latest report.
func TestHalvesMerge(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		var truth Halves
		var reports []Halves
		w := int64(1000)
		for range 1 + r.IntN(20) {
			e := r.Int64N(w)
			truth.Add(e, w, 1+r.Uint64N(3))
			reports = append(reports, truth)
		}
		// Shuffle, duplicate some, drop some but keep the last.
		last := reports[len(reports)-1]
		var in []Halves
		for _, x := range reports {
			for range r.IntN(3) {
				in = append(in, x)
			}
		}
		in = append(in, last)
		r.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
		var got Halves
		for _, x := range in {
			got.Merge(x)
		}
		if got != truth {
			t.Fatalf("merged %+v, want %+v", got, truth)
		}
	}
}
