package region

import "time"

// Knobs that production leaves at their defaults, for the tests and
// benchmarks of package region_test and this package's own.

// SetGathering makes r's gathered batches wait at most wait for company
// and carry at most batch requests (maxWait and maxBatch in production).
// Call it before r's first Check.
func SetGathering(r *Redis, wait time.Duration, batch int) { r.co.setBounds(wait, batch) }

// SetUnbatched makes r send each decision of a round trip as its own
// EVALSHA of its script, instead of one call of the batch script. Call it
// before r's first Check.
func SetUnbatched(r *Redis) { r.batch = false }

// setBounds sets c's maxWait and maxBatch; a zero leaves one as it is.
func (c *coalescer) setBounds(wait time.Duration, batch int) {
	if wait > 0 {
		c.maxWait = wait
	}
	if batch > 0 {
		c.maxBatch = batch
	}
}
