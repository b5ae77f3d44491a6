// Package region provides the regional store: a key's counts in this
// region's Redis (standalone, Sentinel or Cluster) or in memory, behind one
// interface, with every decision made atomically in one store round trip.
package region

import (
	"context"
	"errors"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// ErrUnavailable is returned when the store cannot be reached.
var ErrUnavailable = errors.New("region: store unavailable")

// Request is one decision to make: may Key spend Hits of Limit at Now?
type Request struct {
	// Key is the counter's identity (the API layer prefixes rule names).
	Key string
	// Limit is the limit to decide against; it must be valid.
	Limit window.Limit
	// Hits is the number of hits to spend, 1 to Limit.Limit.
	Hits uint64
	// Now is the instant of the decision; buckets follow from it.
	Now time.Time
	// Peek decides without consuming anything.
	Peek bool
}

// RegionCount is one region's counts for a key's current and previous
// buckets.
type RegionCount struct {
	Region   string
	Current  uint64
	Previous uint64
}

// Result is the answer to a Request.
type Result struct {
	window.Decision
	// Regions lists the per-region counts after the decision, for counter
	// algorithms; the local region is always present.
	Regions []RegionCount
	// Local is the local region's total in the current bucket after the
	// decision (counter algorithms); replication sends it to other regions.
	Local uint64
}

// Total is one region's total count for a key's bucket, the unit of
// replication. Totals only grow, so merging keeps the maximum.
type Total struct {
	Key    string
	Window time.Duration
	Bucket int64
	Region string
	Count  uint64
}

// BucketRef names one bucket of a key's counter.
type BucketRef struct {
	Key    string
	Window time.Duration
	Bucket int64
}

// Store is a region's store of counts. Implementations are safe for
// concurrent use. Every method may block on I/O until ctx is done.
type Store interface {
	// Check decides every request in reqs, in order, and writes the answers
	// to res (len(res) == len(reqs)). Each request is decided atomically.
	// An error means none of the decisions can be trusted.
	Check(ctx context.Context, reqs []Request, res []Result) error
	// Merge max-merges totals reported by other regions: a stored count
	// never decreases, and a total for the local region is ignored.
	Merge(ctx context.Context, totals []Total) error
	// Vectors returns the per-region counts of each bucket in refs, in
	// order (nil for a bucket that holds nothing).
	Vectors(ctx context.Context, refs []BucketRef) ([][]Total, error)
	// Close releases the store's resources.
	Close() error
}
