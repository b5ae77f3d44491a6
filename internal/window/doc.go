// Package window provides the rate-limit algorithms as pure math: bucket
// indexes, estimates, decisions, remaining, reset and retry times.
//
// Nothing here does I/O or reads a clock: every function takes the current
// instant as a parameter, and all times are whole Unix milliseconds, so that
// every node in every region computes the same bucket from the same instant.
// The token bucket keeps its state in Unix microseconds.
//
// # Algorithms
//
// A [Limit] is at most Limit hits per Window, counted by one of five
// algorithms:
//
//   - [SlidingWindow], the default, decided by [Limit.DecideTrails]: each
//     epoch-aligned bucket of length W is split at H = floor(W/2) into two
//     halves, and each region keeps per half its count, the offsets of its
//     first and last hit and where its latest run of hits began ([Half]).
//     The oldest half overlapping the trailing window is weighted over the
//     span its hits fell in. With Limit.Strict it counts each run whole
//     while any of its hits may be in the window: never above the limit in
//     one region.
//
//   - [SlidingWindowTwoBucket] and [FixedWindow] keep one count per bucket
//     and decide with [Limit.DecideCounter] on the previous and current
//     bucket's counts:
//
//     estimate = cur + floor(prev * (W - e) / W)   (FixedWindow: cur)
//     allow    = estimate + hits <= limit
//
//     The two-bucket formula is the seeds', kept with its worked examples.
//
//     Counter algorithms' counts are grow-only per region and replicate
//     across regions; a bucket's [Halves] merge field by field
//     ([Half.Merge]), so replication stays idempotent and order-free.
//
//   - [TokenBucket], computed as GCRA by [Limit.DecideGCRA]: one theoretical
//     arrival time per key; limit tokens refill evenly over W and the burst
//     is limit. It also serves as "leaky bucket as a meter".
//
//   - [SlidingLog], decided by [Limit.DecideLog] on the timestamps of the
//     admitted requests of the last W: exact, memory-heavy, for small limits.
//
// # Decisions
//
// Every algorithm answers with a [Decision]: Remaining, ResetAfter and
// RetryAfter are exact to the millisecond. RetryAfter is the earliest delay
// after which the same request would be admitted if no other traffic came
// (rounded up to the next millisecond, so a retry at now+RetryAfter is
// admitted and one a millisecond earlier is not), and 0 when the request is
// admitted. ResetAfter is the delay until a request for the full limit would
// be admitted. Arithmetic is exact integer math, with 128-bit intermediates
// ([MulDiv]) so limits up to 2^53 and windows up to 7 days never overflow.
//
// # Sliding window counters over sub-buckets
//
// [Sliding] is a comparison point, not run by the stores: the window split
// into K epoch-aligned sub-buckets of S = W/K whole milliseconds, and at
// nowMs, in sub-bucket j with e elapsed in it,
//
//	estimate = c[j-K+1] + ... + c[j] + floor(c[j-K] * (S - e) / S)
//
// (K = 1 is the two-bucket counter, [TwoBucket]; Strict counts c[j-K]
// whole). loadtest/accuracy -mode subbuckets -k K measures it.
//
// # Accuracy
//
// Accuracy is the exact count admitted in the trailing window (t-W, t] that
// ends at every admission t, over the limit, for one key in one region.
// Measured with loadtest/accuracy on a limit of 1000 per 4 s (go run
// ./loadtest/accuracy -mode M): cold starts at 1x, 2x and 10x the limit's
// rate, evenly spaced or Poisson, beginning at phases 0.1 to 0.9 of the
// bucket, and on/off bursts at 10x. The steady minimum is over admissions
// from 2W after the load began, at 2x and 10x.
//
//	mode                    worst trailing window   steady min (constant / Poisson)
//	default (half spans)    1.036                   0.998 / 0.942
//	strict                  1.000                   0.001 / 0.001 (bunched)
//	two-bucket              1.900 (1 + phase)       0.880 / 0.877
//	sub-buckets, K = 100    1.024                   0.995 / 0.929
//	exact sliding log       1.000                   0.997 / 0.930
//
// Under Poisson arrivals even an exact log leaves the trailing window
// below the limit at times: randomness, not the algorithm. The default's
// error grows for small limits (100 per 10 s: 1.13) and for patterns that
// put several bursts in one half (20 on/off runs: 1.038). Strict admits in
// bunches after a burst. Across regions each mode adds the replication
// delay's error: a region decides on the other regions' counts as last
// heard. docs/design.md has the per-phase table and the costs.
package window
