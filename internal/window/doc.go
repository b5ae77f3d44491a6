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
//   - [SlidingWindow] (the default) and [FixedWindow] keep one count per
//     epoch-aligned bucket of length W and decide with
//     [Limit.DecideCounter] on the previous and current bucket's counts:
//
//     estimate = cur + floor(prev * (W - e) / W)   (FixedWindow: cur)
//     allow    = estimate + hits <= limit
//
//     Their counts are grow-only per region and replicate across regions.
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
// # Accuracy of the sliding window counter
//
// The counter assumes the previous bucket's hits were spread evenly over it.
// It never admits more than limit hits in the current bucket, so never more
// than 2*limit in any window of length W. Replayed against an exact sliding
// log (TestOracle; 3 limits, 5 seeds per pattern), the hits it admits in a
// window differ from the log's by 0.2% to 4% of the limit on average under
// steady traffic (0.5x to 5x the limit) and by 16% to 24% under bursts of 3x
// to 10x the limit; over a whole trace it admits within 0.5% (steady) and 4%
// (bursty) of the log's total. Below the limit it decides as the log on
// 99.98% of requests; at saturation many requests sit exactly at the limit,
// where an estimate one off flips the decision. Use [SlidingLog] or
// [TokenBucket] where bursts must be bounded more tightly.
package window
