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
// algorithms; or, with a [Calendar], Limit hits per bucket of the
// calendar (its minutes to years in a time zone, of unequal lengths),
// counted as a fixed window ([Calendar.DecideCalendar]):
//
//   - [SlidingWindow], the default, decided by [Limit.DecideTrails]: each
//     region keeps per epoch-aligned bucket of length W a [Trail] of
//     marks, each some hits and the offset of the last of them, and a mark
//     counts whole while its last hit is in the trailing window:
//
//     estimate = cur's count + the hits of prev's marks with At > e
//     allow    = estimate + hits <= limit
//
//     Up to [ExactMax] hits per window the local region's trail is exact
//     (a granule of 1 ms): it decides as a sliding log of its own
//     admissions. Above it, and across regions, a granule is 1/[Granules]
//     of the bucket. The estimate is never below the exact count, so one
//     region never admits more than the limit in a trailing window.
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
//     across regions; a region's trails merge granule by granule
//     ([Trail.Merge]), so replication stays idempotent and order-free.
//
//   - [TokenBucket], computed as GCRA by [Limit.DecideGCRA]: one theoretical
//     arrival time per key; limit tokens refill evenly over W into a bucket
//     of Limit.Burst tokens (the limit by default), the most admitted at
//     once. It also serves as "leaky bucket as a meter".
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
// # Accuracy
//
// Accuracy is measured in both directions at every decision: the exact
// count admitted in the trailing window (t-W, t] that ends at every
// admission t, over the limit, and whether an exact sliding log given the
// same admissions would have decided the same. TestTrailAccuracy and
// TestAdversarialSearch state and check the default's bounds;
// docs/design.md has the figures and loadtest/accuracy measures them
// against the simulator and a running node.
package window
