package gossip

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

func TestAllowance(t *testing.T) {
	for _, c := range []struct {
		name            string
		limit, estimate uint64
		replicas        int
		want            uint64
	}{
		{"idle key, three regions: the budget", 3000, 0, 3, 50},
		{"a third of the way: the budget", 3000, 1000, 3, 50},
		{"near half: below the budget", 3000, 1400, 3, 33},
		{"just below half", 3000, 1499, 3, 0},
		{"at half", 3000, 1500, 3, 0},
		{"above the limit", 3000, 4000, 3, 0},
		{"odd limit", 7, 1, 3, 0},
		{"two regions", 1000, 100, 2, 25},
		{"a limit too small for a budget", 19, 0, 1, 0},
		{"no replica count", 1000, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := allowance(c.limit, c.estimate, c.replicas); got != c.want {
				t.Errorf("allowance(%d, %d, %d) = %d, want %d", c.limit, c.estimate, c.replicas, got, c.want)
			}
		})
	}
}

// hitN admits hits of key on node n as the decision path does: Check, then
// Dirty with the limit and the estimate admitted at (hits included). It
// returns the bucket and the new local total.
func (s *sim) hitN(n *Node, key string, lim window.Limit, hits uint64) (int64, uint64) {
	s.t.Helper()
	res := make([]region.Result, 1)
	if err := s.stores[n.Region()].Check(context.Background(), []region.Request{{Key: key, Limit: lim, Hits: hits, Now: time.Now()}}, res); err != nil {
		s.t.Fatal(err)
	}
	r := res[0]
	if !r.Allowed {
		s.t.Fatalf("%d hits on %s denied", hits, key)
	}
	n.Dirty(region.Total{Key: key, Window: lim.Window, Bucket: r.Bucket, Count: r.Local, Trail: r.LocalTrail,
		Limit: lim.Limit, Estimate: r.Estimate + hits})
	return r.Bucket, r.Local
}

// TestSimUrgency: on the bubble's exact clock, three regions 30 ms apart.
// A key far below its limit reaches the other regions only once its
// oldest unsent hit is MaxStaleness old; one whose unsent hits reach the
// allowance, or that is at or above half its limit, within one flush plus
// the one-way delay; and a graceful Close sends what is left.
func TestSimUrgency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const oneWay = 30 * time.Millisecond
		s := newSim(t, threeRegions, 1, oneWay)
		defer s.close()
		time.Sleep(time.Second) // let the start-up's rejoin sends pass
		eu := s.nodes["eu-0"]
		flush, stale := testConfig().FlushInterval, DefaultMaxStaleness
		if flush == 0 {
			flush = DefaultFlushInterval
		}
		fast := flush + oneWay + 10*time.Millisecond // the poll's step
		everywhere := func(key string, w time.Duration, b int64, c uint64) func() bool {
			return func() bool {
				return s.count("us", "eu", key, w, b) == c && s.count("ap", "eu", key, w, b) == c
			}
		}
		lim := window.Limit{Limit: 3000, Window: time.Hour}

		// Far: one hit waits out the maximum staleness.
		start := time.Now()
		b, c := s.hitN(eu, "far", lim, 1)
		time.Sleep(stale - flush)
		if got := s.count("us", "eu", "far", lim.Window, b); got != 0 {
			t.Fatalf("us holds %d of a far key %v after its hit, want 0 before %v", got, time.Since(start), stale)
		}
		waitFor(t, 2*stale, "far key everywhere", everywhere("far", lim.Window, b, c))
		took := time.Since(start)
		t.Logf("far key: in every region %v after its hit (max staleness %v)", took, stale)
		if took < stale || took > stale+fast {
			t.Errorf("far key arrived after %v, want %v to %v", took, stale, stale+fast)
		}

		// fastly: hits on key arrive everywhere within one flush plus the
		// one-way delay.
		fastly := func(what, key string, hits uint64) {
			t.Helper()
			b, c := s.hitN(eu, key, lim, hits)
			took := waitFor(t, stale, what+" everywhere", everywhere(key, lim.Window, b, c))
			t.Logf("%s: in every region after %v (bound %v)", what, took, fast)
			if took > fast {
				t.Errorf("%s: arrived after %v, want <= %v", what, took, fast)
			}
		}

		// Unsent hits reaching the allowance: 10 at a time, the fifth
		// request's 50 unsent reach the budget's 3000/(20*3) = 50.
		for range 4 {
			b, _ = s.hitN(eu, "burst", lim, 10)
		}
		time.Sleep(10 * fast)
		if got := s.count("us", "eu", "burst", lim.Window, b); got != 0 {
			t.Fatalf("us holds %d of 40 hits below the allowance, want 0", got)
		}
		fastly("allowance reached", "burst", 10)

		// Near: at half the limit every hit goes at the next flush.
		s.hitN(eu, "near", lim, 1500)
		time.Sleep(10 * fast)
		fastly("near key", "near", 1)

		// Quiet: eu holds 40 unsent hits (allowance 50) and stops; us
		// takes the key past half its limit. Once eu hears it, eu's
		// allowance is 0 and its hits follow at its next flush.
		b, c = s.hitN(eu, "quiet", lim, 40)
		time.Sleep(10 * fast)
		s.hitN(s.nodes["us-0"], "quiet", lim, 1500)
		took = waitFor(t, stale, "eu's quiet hits in us", func() bool { return s.count("us", "eu", "quiet", lim.Window, b) == c })
		t.Logf("quiet region: its unsent hits in us %v after us passed half the limit (bound %v)", took, 2*fast)
		if took > 2*fast {
			t.Errorf("quiet region: its hits arrived after %v, want <= %v", took, 2*fast)
		}

		by := eu.met.bytesByReason()
		for _, why := range []string{reasonPeriodic, reasonUrgent, reasonEcho} {
			if by[why] <= 0 {
				t.Errorf("no bytes counted as %s: %v", why, by)
			}
		}
		if by[reasonFlush] != 0 {
			t.Errorf("%v bytes counted as flush, want 0: every total here has a limit", by[reasonFlush])
		}
		for _, class := range []string{classNear, classFar} {
			if got := eu.met.stalenessCount(class); got == 0 {
				t.Errorf("no staleness observed for %s keys", class)
			}
		}

		// A graceful Close sends a far key's unsent hits.
		ap := s.nodes["ap-0"]
		res := make([]region.Result, 1)
		if err := s.stores["ap"].Check(context.Background(), []region.Request{{Key: "left", Limit: lim, Hits: 3, Now: time.Now()}}, res); err != nil {
			t.Fatal(err)
		}
		ap.Dirty(region.Total{Key: "left", Window: lim.Window, Bucket: res[0].Bucket, Count: res[0].Local, Limit: lim.Limit, Estimate: 3})
		if err := ap.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Second, "eu holds ap's last hits", func() bool {
			return s.count("eu", "ap", "left", lim.Window, res[0].Bucket) == 3
		})
	})
}

// TestUrgencyDue: which dirty totals a flush takes. Far keys wait; a key
// at half its limit goes at once; with the dirty set three quarters full
// every waiting total goes, so that new keys (which may be near their
// limits) find room instead of being dropped.
func TestUrgencyDue(t *testing.T) {
	n := receiver(t, "eu", region.NewMemory(region.MemoryConfig{Region: "eu"}))
	n.cfg.MaxDirty = 100
	n.dirty, n.notice = map[dref]tally{}, map[ref]uint64{}
	b := t0.UnixMilli() / time.Minute.Milliseconds()
	dirty := func(from, to int, est uint64) {
		for i := from; i < to; i++ {
			n.Dirty(region.Total{Key: fmt.Sprintf("k%d", i), Window: time.Minute, Bucket: b, Count: 1, Limit: 1000, Estimate: est})
		}
	}
	due := func() map[string]int {
		n.mu.Lock()
		defer n.mu.Unlock()
		by := map[string]int{}
		for _, why := range n.due(t0, 3, false).why {
			by[why]++
		}
		return by
	}
	dirty(0, 50, 1)
	if got := due(); len(got) != 0 || len(n.dirty) != 50 {
		t.Fatalf("50 far keys: sent %v, %d still dirty; want none sent, 50 dirty", got, len(n.dirty))
	}
	dirty(50, 51, 500)
	if got := due(); got[reasonUrgent] != 1 || len(got) != 1 {
		t.Errorf("a key at half its limit: sent %v, want 1 urgent", got)
	}
	dirty(51, 80, 1)
	if got := due(); got[reasonPeriodic] != 79 || len(n.dirty) != 0 {
		t.Errorf("79 far keys with room for 100: sent %v, %d still dirty; want 79 periodic, none dirty", got, len(n.dirty))
	}
	if got := n.met.dropCount("dirty_full"); got != 0 {
		t.Errorf("%v totals dropped, want none", got)
	}
}

// TestClosedOwn: a closed bucket's own total is kept, merged to its
// largest, until it stops counting, and no more than the bound are kept.
func TestClosedOwn(t *testing.T) {
	var c closedOwn
	dk := func(k string) dref { return dref{ref{k, time.Second, 7}, "eu"} }
	c.keep(dk("a"), tally{n: 3}, 9000, 2)
	c.keep(dk("a"), tally{n: 5}, 9000, 2)
	c.keep(dk("a"), tally{n: 4}, 9000, 2)
	c.keep(dk("b"), tally{n: 1}, 9500, 2)
	if c.keep(dk("c"), tally{n: 1}, 9500, 2) { // over the bound
		t.Error("keep took a total past the bound")
	}
	if !c.keep(dk("d"), tally{}, 9500, 2) { // nothing to keep
		t.Error("keep reported an empty total dropped")
	}
	if !c.keep(dk("a"), tally{n: 2}, 9000, 2) { // merged into a kept one
		t.Error("keep reported a kept total's merge dropped")
	}
	if got := c.tot[dk("a")].n; got != 5 {
		t.Errorf("a = %d, want the largest, 5", got)
	}
	if _, ok := c.tot[dk("c")]; ok || len(c.tot) != 2 {
		t.Errorf("kept %v, want a and b only", c.tot)
	}
	c.forget(8999)
	if len(c.tot) != 2 {
		t.Errorf("forgot before the buckets stopped counting: %v", c.tot)
	}
	c.forget(9000)
	if _, ok := c.tot[dk("a")]; ok || len(c.tot) != 1 {
		t.Errorf("after a stopped counting: %v, want b only", c.tot)
	}
	if got := countsUntil(dk("a"), 8000); got != 9000 {
		t.Errorf("countsUntil = %d, want the end plus a window, 9000", got)
	}
}

// TestClosedOwnFull: when more closed buckets' own totals wait to be kept
// for a repair than the bound holds, the ones past it are dropped and
// counted, as a full dirty set is.
func TestClosedOwnFull(t *testing.T) {
	n := receiver(t, "eu", region.NewMemory(region.MemoryConfig{Region: "eu"}))
	n.cfg.MaxDirty = 2
	n.dirty, n.notice = map[dref]tally{}, map[ref]uint64{}
	b := t0.UnixMilli() / time.Minute.Milliseconds()
	closeBucket := func(w time.Duration, b int64, keys ...string) (kept int, dropped float64) {
		for _, k := range keys {
			n.Dirty(region.Total{Key: k, Region: "eu", Window: w, Bucket: b, Count: 1, Limit: 1000, Estimate: 1})
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		n.forgetClosed(bucketEndOf(w, b).Add(time.Millisecond))
		return len(n.urg.closed.tot), n.met.dropCount("closed_full")
	}
	if kept, dropped := closeBucket(time.Minute, b, "a", "b"); kept != 2 || dropped != 0 {
		t.Errorf("2 closed totals with room for 2: kept %d, dropped %v; want 2 and none", kept, dropped)
	}
	// A bucket of a 30 s window that closes while the first two count.
	if kept, dropped := closeBucket(30*time.Second, 2*(b+1), "c"); kept != 2 || dropped != 1 {
		t.Errorf("a third with room for 2: kept %d, dropped %v; want 2 and 1", kept, dropped)
	}
	// A minute after the first two closed, they no longer count: their
	// room is free for the next bucket to close at that instant.
	if kept, dropped := closeBucket(30*time.Second, 2*(b+1)+1, "d"); kept != 1 || dropped != 1 {
		t.Errorf("after the first two stopped counting: kept %d, dropped %v; want 1 (d) and still 1", kept, dropped)
	}
}
