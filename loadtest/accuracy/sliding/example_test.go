package sliding_test

import (
	"fmt"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
	"github.com/rlcluster/rlcluster/loadtest/accuracy/sliding"
)

// The default counter splits the window into sub-buckets: 100 per second
// here, of 10 ms each. A burst late in one second is counted where it fell,
// so the next second does not admit it again.
func ExampleCounter_Decide() {
	l := window.Limit{Limit: 10, Window: time.Second}
	s := sliding.Default(l)
	start := int64(1_700_000_000_000) // a whole second
	// 10 hits at start+900 ms; the next request at start+1400 ms. Its
	// counts are those of sub-buckets j-K..j, oldest first: the hits' sub-
	// bucket is 50 back from the current one.
	now := start + 1400
	c := make([]uint64, s.K+1)
	c[s.K-(s.SubBucket(now)-s.SubBucket(start+900))] = 10

	d := s.Decide(now, c, 1)
	fmt.Println(d.Allowed, d.Estimate, d.RetryAfter)
	fmt.Println(d.SubWhole, d.SubOldest, d.SubWeightNum, d.SubWeightDen)

	// The seeds' two-bucket counter weighs the previous second's 10 hits by
	// (1000 - 400) / 1000 and admits 4 more of them.
	d = sliding.TwoBucket(l).Decide(now, []uint64{10, 0}, 1)
	fmt.Println(d.Allowed, d.Estimate)
	// Output:
	// false 10 501ms
	// 10 0 10 10
	// true 6
}
