// Package region owns the regional store: a key's counts in this region's
// Redis (standalone, Sentinel or Cluster) or in memory, behind one
// interface, with every decision made atomically in one store round trip,
// and the layers that keep deciding when Redis cannot.
//
// [Open] composes the store a node runs from one [Config]: the in-memory
// store alone, or Redis behind a [Failover] (with an in-memory fallback)
// behind an optional [DenyCache]. The [Stack] it returns names each layer
// and reads their counters at once ([Stack.Stats], [Stack.Collectors]).
// The layers' own constructors ([NewMemory], [NewRedis], [NewFailover],
// [NewDenyCache]) remain for tests and tools that need one layer.
//
// [NewRedis] takes a URL in one of these forms (query parameters are
// go-redis's: dial_timeout, pool_size, ...):
//
//	redis://[user:password@]host:port[/db]         standalone
//	rediss://[user:password@]host:port[/db]        standalone over TLS
//	redis://host1:port1?cluster=true                 Cluster, seeded from host1
//	redis://host1:port1?addr=host2:port2&addr=...    Cluster (any addr= makes one;
//	                                                 cluster=true is optional then)
//	redis+sentinel://[user:password@]s1:p1,s2:p2/mastername[/db]
//	rediss+sentinel://...                            Sentinel (TLS to all)
//	redis://s1:p1?master_name=m&addr=s2:p2           Sentinel, go-redis's own form
//
// In the Sentinel forms the user info authenticates to the sentinels and,
// unless username/password parameters say otherwise, to the master.
//
// The user info is Redis AUTH: a password alone for requirepass, or an ACL
// user and its password (the store only touches keys under "rl:", so the
// user can be confined to ~rl:*). [RedisConfig.Password] gives the password
// outside the URL. rediss:// verifies the server against the system's roots
// unless [RedisConfig.TLSConfig] gives a CA pool or client certificates.
// Errors never repeat a URL's password, and [RedactURL] masks every secret
// a URL may hold (user info, password or token query parameters) for logs.
//
// [NewFailover] wraps a primary store (Redis) so that a decision never
// waits longer than a timeout for it, a circuit breaker stops calling it
// while it is down, and a policy decides meanwhile: from an in-memory
// fallback that counts under a region of its own (local), allow all (open)
// or deny all (closed).
//
// Counts are kept per region: a counter bucket is a vector with one count
// per region, of which only the local region's ever grows by a decision;
// the others grow only by [Store.Merge], a max-merge of the totals other
// regions report, at most [MaxRegionsPerBucket] regions per bucket. Sums
// over regions saturate. The contract every Store meets is the test suite
// in package storetest.
//
// [DenyCache] wraps a Store (normally Redis) and answers from memory the
// requests that a denial it remembers still denies.
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
}

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
	return nil
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
