package window_test

import (
	"fmt"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// The seeds' example: 7 per minute, the previous minute held 5 and this one
// holds 3; at 30% of the minute the estimate is 3 + floor(5 * 0.7) = 6, so
// one more request is allowed and the one after it is denied.
func ExampleLimit_DecideCounter() {
	l := window.Limit{Limit: 7, Window: time.Minute}
	now := int64(28_000_000*60_000 + 18_000) // 18 s into a minute
	c := window.Counts{Prev: 5, Cur: 3}

	d := l.DecideCounter(now, c, 1)
	fmt.Println(d.Estimate, d.Allowed, d.Remaining)
	c.Cur++ // the store adds the admitted hit

	d = l.DecideCounter(now, c, 1)
	fmt.Println(d.Estimate, d.Allowed, d.RetryAfter)
	// Output:
	// 6 true 0
	// 7 false 6.001s
}

// A token bucket of 3 per second: a full bucket admits a burst of 3, then a
// token comes back every third of a second.
func ExampleLimit_DecideGCRA() {
	l := window.Limit{Limit: 3, Window: time.Second, Algorithm: window.TokenBucket}
	now := int64(1_700_000_000_000)
	var tat int64 // no state yet: a full bucket
	for i := 0; i < 4; i++ {
		var d window.Decision
		d, tat = l.DecideGCRA(now, tat, 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	d, _ := l.DecideGCRA(now+334, tat, 1)
	fmt.Println(d.Allowed)
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 334ms
	// true
}

// A sliding log of 2 per second: the third request waits until the oldest
// entry leaves the window.
func ExampleLimit_DecideLog() {
	l := window.Limit{Limit: 2, Window: time.Second, Algorithm: window.SlidingLog}
	var log []window.LogEntry
	for _, now := range []int64{10_000, 10_400, 10_700, 11_000} {
		d := l.DecideLog(now, log, 1)
		if d.Allowed {
			log = append(log, window.LogEntry{AtMs: now, Hits: 1})
		}
		fmt.Println(now, d.Allowed, d.RetryAfter)
	}
	// Output:
	// 10000 true 0s
	// 10400 true 0s
	// 10700 false 300ms
	// 11000 true 0s
}

func ExampleLimit_Estimate() {
	// 500 per minute at 23:45: bucket 22 held 400, bucket 23 holds 250.
	l := window.Limit{Limit: 500, Window: time.Minute}
	fmt.Println(l.Estimate(23*60_000+45_000, window.Counts{Prev: 400, Cur: 250}))
	// Output: 350
}
