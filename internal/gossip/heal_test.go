package gossip

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rlcluster/rlcluster/internal/window"
)

// TestHealAgreement: region us is cut off from ap and eu until they
// declare its node dead, while every region admits hits on keys with a
// long window (their bucket stays open) and a short one (buckets close
// during the partition). Traffic stops; the partition heals. From the
// instant the link heals, every region holds the same vector for every
// open and closed bucket within two flush intervals plus the one-way
// delay (asserted with checkTiming's margin for a loaded machine here,
// exactly on the bubble's clock in TestSimHealAgreement): each node
// probes the members it holds failed with its open and waiting totals
// every flush interval, so the first probe to cross carries them, within
// a flush interval plus the one-way delay, without waiting for memberlist
// to see the members alive again.
func TestHealAgreement(t *testing.T) {
	const oneWay = 60 * time.Millisecond
	fn := NewFaultNetwork(3)
	wan(fn, threeRegions, oneWay)
	h := newHarness(t, fn, threeRegions, 1)
	open := window.Limit{Limit: 1 << 40, Window: time.Hour}
	short := window.Limit{Limit: 1 << 40, Window: time.Second}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var hits atomic.Int64
	for _, tn := range h.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick(stop, 5*time.Millisecond, func(i int) bool {
				lim := open
				if i%2 == 1 {
					lim = short
				}
				if _, err := h.hit(tn, fmt.Sprintf("h%d", i%8), lim); err != nil {
					t.Error(err)
					return false
				}
				hits.Add(1)
				return true
			})
		}()
	}
	// Traffic before the cut, replicated as usual: some hits in both
	// windows.
	waitFor(t, 20*time.Second, "traffic before the cut", func() bool { return hits.Load() >= int64(10*len(h.nodes)) })
	h.fn.Partition("us", "ap")
	h.fn.Partition("us", "eu")
	waitFor(t, 20*time.Second, "ap and eu declare us dead", func() bool {
		for _, tn := range h.nodes {
			for _, m := range tn.node.Members() {
				if m.Region == "us" && tn.region != "us" && m.State == "alive" {
					return false
				}
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	want := h.truthVecs(nil)
	var nOpen, nClosed int
	for br := range want {
		if br.Window == open.Window {
			nOpen++
		} else {
			nClosed++
		}
	}
	if nOpen == 0 || nClosed == 0 {
		t.Fatalf("%d open and %d closed buckets hit, want some of each", nOpen, nClosed)
	}
	if ok, _ := h.agree(want); ok {
		t.Fatal("the regions agree before the heal: the partition cost nothing to repair")
	}
	// memberlist's own view, polled beside the agreement, for the log.
	aliveC := make(chan time.Duration, 1)
	h.fn.HealAll()
	healAt := time.Now()
	go func() {
		took, ok := poll(20*time.Second, func() bool {
			for _, tn := range h.nodes {
				alive := 0
				for _, m := range tn.node.ml.Members() {
					if m.State == memberlist.StateAlive {
						alive++
					}
				}
				if alive != len(h.nodes) {
					return false
				}
			}
			return true
		})
		if !ok {
			took = -1
		}
		aliveC <- took
	}()
	var diff, last string
	took, ok := poll(20*time.Second, func() bool {
		ok, d := h.agree(want)
		if !ok {
			diff, last = d, fmt.Sprintf("%s at %v", d, time.Since(healAt).Round(time.Millisecond))
		}
		return ok
	})
	if !ok {
		t.Fatalf("regions do not agree 20s after the heal: %s", diff)
	}
	t.Logf("last difference seen: %s", last)
	alive := <-aliveC
	bound := 2*testConfig().FlushInterval + oneWay
	t.Logf("heal: %d open and %d closed buckets agreed in every region %v after the heal (bound: two flush intervals + one-way delay = %v); memberlist saw every member alive %v after the heal",
		nOpen, nClosed, took.Round(time.Millisecond), bound, alive.Round(time.Millisecond))
	checkTiming(t, "agreement after the heal", took, bound)
	for _, tn := range h.nodes {
		if got := counterValue(tn.node.met.resends); got == 0 && tn.region == "us" {
			t.Errorf("%s re-sent no open totals after the heal", tn.name)
		}
	}
}
