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
// A [Limit] is at most Limit hits per Window, counted by one of four
// algorithms:
//
//   - [SlidingWindow] and [FixedWindow] keep one count per epoch-aligned
//     bucket of length W and decide with [Limit.DecideCounter] on the
//     previous and current bucket's counts:
//
//     estimate = cur + floor(prev * (W - e) / W)   (FixedWindow: cur)
//     allow    = estimate + hits <= limit
//
//     Their counts are grow-only per region and replicate across regions.
//     SlidingWindow is the two-bucket counter the stores run today;
//     [Sliding] (below) generalizes it to sub-buckets, and its default
//     bounds bursts that the two-bucket counter lets through.
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
// [Sliding] generalizes the counter: the window is split into K
// epoch-aligned sub-buckets of S = W/K whole milliseconds, and at nowMs, in
// sub-bucket j with e elapsed in it,
//
//	estimate = c[j-K+1] + ... + c[j] + floor(c[j-K] * (S - e) / S)
//	allow    = estimate + hits <= limit
//
// It has three modes:
//
//   - two-bucket ([TwoBucket], K = 1): the seeds' formula above, the same
//     decision as [Limit.DecideCounter]. Worked examples: 500 per minute,
//     previous minute 400, current 250, at 23:45: 250 + 400*15/60 = 350,
//     allowed. 7 per minute, previous 5, current 3, at 30% of the minute:
//     3 + floor(3.5) = 6, one more allowed and the next denied.
//   - default ([DefaultSliding], weighted, K = [DefaultSubBuckets] = 100
//     for every window that is a multiple of 100 ms): the oldest
//     overlapping sub-bucket weighted by its overlap.
//   - strict (Sliding.Strict): the oldest overlapping sub-bucket counted
//     whole, so the estimate is never below the exact count.
//
// Every mode answers Remaining, ResetAfter and RetryAfter exactly, and its
// [Decision] carries the terms of the estimate (SubWhole, SubOldest,
// SubWeightNum/SubWeightDen) so that a response can be checked with integer
// math alone. The estimate is the count before the request.
//
// # Accuracy
//
// Accuracy is the exact count admitted in the trailing window (t-W, t] that
// ends at every admission t, over the limit, for one key in one region.
// Measured with loadtest/accuracy on a limit of 1000 per 4 s (go run
// ./loadtest/accuracy -mode M [-k K] [-phases ...]): cold starts at 1x, 2x
// and 10x the limit's rate, evenly spaced or Poisson, beginning at phases 0.1
// to 0.9 of the bucket and at phases that split a sub-bucket; and on/off
// bursts at 10x. The steady minimum is over admissions from 2W after the
// load began, at 2x and 10x.
//
//	mode                 worst trailing window   steady min (constant / Poisson)
//	two-bucket           1.90 (1 + phase)         0.88 / 0.87
//	default (K = 100)    1.03                     0.995 / 0.91
//	strict (K = 100)     1.00                     0.90 / 0.83
//	exact sliding log    1.00                     1.00 / 0.92
//
// Under Poisson arrivals even an exact log leaves the trailing window
// below the limit at times (0.92): randomness, not the algorithm. The
// weighted error comes from the hits of the oldest sub-bucket being bunched
// rather than spread evenly; a burst at P times the limit's rate that starts
// mid-sub-bucket leaves about P/(4K) of the limit in excess, so fewer
// sub-buckets cost accuracy under bursts (10x: K = 10 gives 1.25, K = 20
// 1.13, K = 40 1.07). Strict admits in bunches at sub-bucket boundaries
// after a burst, leaving capacity unused: with K = 10 the trailing window
// can fall to almost nothing between bunches.
//
// Across regions each mode adds the replication delay's error: a region
// decides on the other regions' counts as last heard.
//
// # Counts in stores and on the wire
//
// Counter algorithms keep grow-only counts per region. For [Sliding] a
// counter is identified by (key, W, K) and its buckets by the sub-bucket
// index j = floor(t/S); each region's count of a sub-bucket max-merges, as
// the two-bucket counts do, so replication stays idempotent and order-free
// and regions agree exactly on every closed sub-bucket after
// reconciliation. A decision reads sub-buckets j-K..j (K+1 counts per
// region, a missing one is 0) and adds the admitted hits to sub-bucket j;
// sub-buckets older than j-K can be dropped.
package window
