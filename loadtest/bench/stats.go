package main

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest sample such that at least p percent of
// the samples are less than or equal to it. It returns 0 for no samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}

// Latencies summarises a set of request latencies.
type Latencies struct {
	P50, P95, P99, Max time.Duration
}

// Summarise sorts samples in place and returns their percentiles.
func Summarise(samples []time.Duration) Latencies {
	slices.Sort(samples)
	if len(samples) == 0 {
		return Latencies{}
	}
	return Latencies{
		P50: Percentile(samples, 50),
		P95: Percentile(samples, 95),
		P99: Percentile(samples, 99),
		Max: samples[len(samples)-1],
	}
}

// Schedule is an open-loop arrival schedule: request i is due at
// Start + i/Rate, whatever happened to the requests before it, so a slow
// response delays the measurement of the requests queued behind it
// (coordinated omission is accounted for by measuring from the due time).
type Schedule struct {
	Start time.Time
	Rate  float64 // requests per second, > 0
}

// At returns the instant request i is due.
func (s Schedule) At(i int64) time.Time {
	return s.Start.Add(time.Duration(float64(i) * float64(time.Second) / s.Rate))
}

// Due returns how many requests are due at or before now: the count of i >= 0
// with At(i) <= now.
func (s Schedule) Due(now time.Time) int64 {
	el := now.Sub(s.Start)
	if el < 0 {
		return 0
	}
	n := int64(math.Floor(el.Seconds()*s.Rate)) + 1
	// Correct float rounding at the boundaries so Due agrees with At.
	for n > 0 && s.At(n-1).After(now) {
		n--
	}
	for !s.At(n).After(now) {
		n++
	}
	return n
}

// Total returns how many requests fall in [Start, Start+d): ceil(d*Rate).
func (s Schedule) Total(d time.Duration) int64 {
	return s.Due(s.Start.Add(d - 1))
}
