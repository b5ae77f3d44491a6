package region

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// included) one counter bucket holds, so that made-up regions cannot
	// make a decision on that key slow. A zero count takes no slot. A
	// region new to a full bucket replaces the region with the smallest
	// count if its own is larger, and is dropped otherwise (the stores
	// count either in RegionsDropped): a full bucket keeps its largest
	// counts, so that regions made up to fill it can only raise its sum,
	// never push a real region's count out of it. The local region's own
	// count is never dropped.
	MaxRegionsPerBucket = 256
)

// ResetKeyPrefix starts the key of every reset instant the API keeps in a
// store (see the API's decision.ResetKey), and of the reset marker
// ([ResetMarkKey]), and of no other key. The in-memory store counts the
// reset instants it holds, so that a decision need not read them from a
// store that holds none ([Memory.NoResets]).
const ResetKeyPrefix = "z:"

// ResetMarkKey is the key of a store's reset marker: a total in the
// buckets of reset instants (the API's decision.ResetBucket, UTC calendar
// years) whose count under the store's own region the store raises after
// it merges a reset instant's total (Merge or Restore) of the same bucket,
// so that the marker changes whenever a reset may have reached the store.
// A node reads it to tell whether any key's reset instant may have
// changed since it last read it (see the API's decision.Decider.Reset).
// No reset instant's key is it (the API's keys start with a namespace's
// tag, never '*'), and no node reports it to the other regions.
const ResetMarkKey = ResetKeyPrefix + "*"

// mergeable reports whether a store of region local merges t: a total of
// another region (of any region when own is set) for a window the stores
// keep, and not of the reset marker, which each store keeps for itself
// (a marker total from the network, which no node sends, would only make
// every node look at its keys' resets again).
func mergeable(t *Total, local string, own bool) bool {
	return (t.Region != local || own) && t.Region != "" && t.Key != ResetMarkKey && storedWindow(t.Window, t.Bucket)
}

// isResetInstant reports whether key is a reset instant's: it starts with
// ResetKeyPrefix and is not the marker.
func isResetInstant(key string) bool {
	return strings.HasPrefix(key, ResetKeyPrefix) && key != ResetMarkKey
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
	// CurrentTrail and PreviousTrail are the region's state of the
	// current and previous bucket as the default sliding window decided on
	// them (window.Limit.DecideTrails): its trail fitted to its count
	// (window.Trail.Fit), exact for the local region's exact trail, else
	// coarse. Nil for the other algorithms.
	CurrentTrail, PreviousTrail window.Trail
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
	// LocalTrail is the local region's coarse trail of the current bucket
	// after the decision (the default sliding window); replication sends
	// it with Local.
	LocalTrail window.Trail
	// LocalRegion, when set, is the region whose count Local is, if not the
	// store's local region: a [Failover] deciding from its fallback counts
	// under the fallback's own region.
	LocalRegion string
	// TAT is the token bucket's theoretical arrival time that the decision
	// read, in Unix µs, 0 when there was none (TokenBucket only).
	TAT int64
	// Held reports that the store did not decide: it lost its counts and
	// waits for them (see [Redis.OnReload]), and denies meanwhile. A held
	// result says nothing of the key's counts.
	Held bool
}

// Total is one region's total count for a key's bucket, the unit of
// replication. Totals only grow, so merging keeps the maximum. Window and
// Bucket name the bucket as [BucketRef] does.
type Total struct {
	Key    string
	Window time.Duration
	Bucket int64
	Region string
	Count  uint64
	// Trail is where in the bucket the region's hits fell, for the default
	// sliding window: coarse, merged by window.Trail.Merge, holding at most
	// Count hits (nil when the region's hits were counted without marks).
	Trail window.Trail
	// Limit and Estimate, when Limit is not zero, are the limit of the
	// decision that produced this total and the estimate it admitted at
	// (its hits included). They are not replicated: replication reads them
	// to judge how soon the total must reach the other regions (a key near
	// its limit at once, a key far below it later). Zero: at once.
	Limit, Estimate uint64
}

// ValidTrail reports whether t's trail may be merged: a valid coarse trail
// for its window (window.Trail.Valid) holding at most t.Count hits. The
// stores merge a total's count without its trail when it is not.
func ValidTrail(t Total) bool {
	return t.Window >= time.Millisecond && t.Trail.Valid(t.Window.Milliseconds()) && t.Trail.Count() <= t.Count
}

// storedWindow reports whether the bucket (w, b) is one the stores keep:
// a window of fixed length (w of at least 1 ms), or a valid calendar
// bucket (w negative, see window.Limit.BucketAt).
func storedWindow(w time.Duration, b int64) bool {
	return w >= time.Millisecond || window.ValidCalendarBucket(w, b)
}

// BucketRef names one bucket of a key's counter. For a calendar window,
// Window is minus the bucket's length and Bucket its start in Unix ms
// (window.Limit.BucketAt).
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
