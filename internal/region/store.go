package region

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// Bounds that the store, replication and the API must agree on. They are
// defined here, once, and imported by every package that checks them.
const (
	// MaxKeyBytes is the longest counter key (Request.Key, Total.Key) that
	// the stores keep and replication carries, namespace prefix included.
	// The API's bound on a caller's key must leave room for its prefix.
	MaxKeyBytes = 4096
	// MaxRegionName is the longest region name replication carries (bytes),
	// a fallback replica's "~id" suffix included.
	MaxRegionName = 64
	// MaxRegionsPerBucket is the most regions (fallback replicas
	// included) one counter bucket holds. Merge drops the totals of a
	// region new to a full bucket, so that made-up regions cannot make a
	// decision on that key slow; the stores count them (RegionsDropped).
	// The local region's own count is never dropped.
	MaxRegionsPerBucket = 256
)

// satAdd returns a+b, or the largest uint64 when the sum would wrap: sums
// of per-region counts saturate, so a made-up huge count can only deny.
func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}

// ErrUnavailable is returned when the store cannot be reached.
var ErrUnavailable = errors.New("region: store unavailable")

// Request is one decision to make: may Key spend Hits of Limit at Now?
//
// A Request must be valid ([Request.Validate] returns nil): the caller
// validates it, once, and every [Store] trusts it. In rlnode that caller is
// the API, which validates each request at its boundary before it reaches
// the store; the stores do not check again. A Store given an invalid
// request may answer anything for that request (a zero window panics), but
// only input from other regions (Merge) is checked where it could corrupt
// stored state.
type Request struct {
	// Key is the counter's identity (the API layer prefixes rule names),
	// 1 to MaxKeyBytes bytes.
	Key string
	// Limit is the limit to decide against; it must be valid.
	Limit window.Limit
	// Hits is the number of hits to spend, 1 to Limit.Limit.
	Hits uint64
	// Now is the instant of the decision; buckets follow from it.
	Now time.Time
	// Peek decides without consuming anything.
	Peek bool
	// K is the number of sub-buckets a SlidingWindow counter splits its
	// window into (see [window.Sliding]): 0 or 1 is the two-bucket
	// counter, identified by (Key, W) and decided as
	// [window.Limit.DecideCounter]; from 2 to [window.MaxSubBuckets] (W
	// a whole number of milliseconds times K) a counter of its own,
	// identified by (Key, W, K). Other algorithms must leave it 0.
	K int64
	// Strict counts the oldest overlapping (sub-)bucket whole instead of
	// weighting it (SlidingWindow only): [window.Sliding]'s Strict. It
	// reads the same counts as the weighted counter of the same K.
	Strict bool
}

// ErrSubBuckets is returned by [Request.Validate] for a sub-bucket count or
// a strict flag the request's algorithm cannot take.
var ErrSubBuckets = errors.New("region: sub-buckets and strict are for sliding window counters only")

// sliding returns the sliding window counter that decides r and whether r
// is decided by one other than the two-bucket [window.Limit.DecideCounter]
// (K > 1 or strict).
func (r *Request) sliding() (window.Sliding, bool) {
	k := max(r.K, 1)
	return window.Sliding{Limit: r.Limit, K: k, Strict: r.Strict}, r.K > 1 || r.Strict
}

// subBuckets returns the K that identifies r's counter: 1 for the
// two-bucket layout, K for a counter over K > 1 sub-buckets.
func (r *Request) subBuckets() int64 { return max(r.K, 1) }

// ErrEmptyKey is returned by [Request.Validate] for a request without a key.
var ErrEmptyKey = errors.New("region: empty key")

// ErrKeyTooLong is returned by [Request.Validate] for a key longer than
// MaxKeyBytes.
var ErrKeyTooLong = errors.New("region: key too long")

// Validate reports whether r is a request the stores can decide: a key of
// 1 to MaxKeyBytes bytes, a valid limit and 1 to Limit.Limit hits.
func (r *Request) Validate() error {
	if r.Key == "" {
		return ErrEmptyKey
	}
	if len(r.Key) > MaxKeyBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(r.Key), MaxKeyBytes)
	}
	if err := r.Limit.Validate(); err != nil {
		return fmt.Errorf("region: request %q: %w", r.Key, err)
	}
	if err := r.Limit.ValidateHits(r.Hits); err != nil {
		return fmt.Errorf("region: request %q: %w", r.Key, err)
	}
	if r.K != 0 || r.Strict {
		if r.Limit.Algorithm != window.SlidingWindow || r.K < 0 {
			return fmt.Errorf("region: request %q: %w", r.Key, ErrSubBuckets)
		}
		if s, _ := r.sliding(); s.Validate() != nil {
			return fmt.Errorf("region: request %q: %w", r.Key, s.Validate())
		}
	}
	return nil
}

// RegionCount is one region's counts for a key's current and previous
// buckets. For a counter over K > 1 sub-buckets (Request.K), Current is the
// region's sum over the sub-buckets wholly inside the trailing window (j-K+1
// to j, the decision's SubWhole summed over regions) and Previous its count
// in the oldest overlapping one (j-K, SubOldest summed over regions).
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
	// decision (counter algorithms; for K > 1 the current sub-bucket,
	// Decision.Bucket); replication sends it to other regions.
	Local uint64
	// LocalRegion, when set, is the region whose count Local is, if not the
	// store's local region: a [Failover] deciding from its fallback counts
	// under the fallback's own region.
	LocalRegion string
	// TAT is the token bucket's theoretical arrival time that the decision
	// read, in Unix µs, 0 when there was none (TokenBucket only).
	TAT int64
}

// Total is one region's total count for a key's bucket, the unit of
// replication. Totals only grow, so merging keeps the maximum.
//
// K names the counter as Request.K does: 0 or 1 the two-bucket counter of
// (Key, Window), whose Bucket is floor(t/W); from 2 the counter of (Key,
// Window, K), whose Bucket is the sub-bucket index floor(t/(W/K)). A K that
// does not split Window into whole milliseconds is ignored by Merge.
type Total struct {
	Key    string
	Window time.Duration
	K      int64
	Bucket int64
	Region string
	Count  uint64
}

// BucketRef names one bucket of a key's counter; K as in [Total].
type BucketRef struct {
	Key    string
	Window time.Duration
	K      int64
	Bucket int64
}

// subCounter reports whether (w, k) names a counter over k > 1 sub-buckets
// that the stores can hold: k at most window.MaxSubBuckets and dividing w
// in whole milliseconds. ok is false for the two-bucket counter (k <= 1).
func subCounter(w time.Duration, k int64) (valid, ok bool) {
	if k <= 1 {
		return true, false
	}
	wm := w.Milliseconds()
	return k <= window.MaxSubBuckets && wm > 0 && wm%k == 0, true
}

// Store is a region's store of counts. Implementations are safe for
// concurrent use. Every method may block on I/O until ctx is done.
type Store interface {
	// Check decides every request in reqs, in order, and writes the answers
	// to res (len(res) == len(reqs)). Each request is decided atomically.
	// Every request must be valid (see [Request]): Check does not validate.
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
