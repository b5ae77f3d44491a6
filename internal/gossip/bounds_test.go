package gossip

import (
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
)

// TestBounds: the dirty set, the touched set and the inbox (in frames and
// in bytes) stay within their bounds under a flood of distinct keys, and
// what they drop is counted.
func TestBounds(t *testing.T) {
	n := receiver(t, "eu", region.NewMemory(region.MemoryConfig{Region: "eu"}))
	n.cfg.MaxDirty, n.cfg.MaxTouched = 100, 150
	n.dirty, n.notice = map[dref]tally{}, map[ref]uint64{}
	for i := range 1000 {
		n.Dirty(region.Total{Key: string(rune('a'+i%26)) + string(rune(i)), Window: time.Minute, Bucket: 1, Count: 1})
	}
	if got, want := len(n.dirty), 100; got != want {
		t.Errorf("dirty set holds %d, want the bound %d", got, want)
	}
	if got, want := n.nTouched, 150; got != want {
		t.Errorf("touched set holds %d, want the bound %d", got, want)
	}
	if got, want := len(n.notice), 100; got > want {
		t.Errorf("notice set holds %d, want at most %d", got, want)
	}
	if got, want := n.met.dropCount("dirty_full"), 900.0; got != want {
		t.Errorf("dropped(dirty_full) = %v, want %v", got, want)
	}
	if got, want := n.met.dropCount("touched_full"), 850.0; got != want {
		t.Errorf("dropped(touched_full) = %v, want %v", got, want)
	}

	// Inbox: 10 frames or 100 bytes, whichever fills first.
	n.inbox = make(chan []byte, 10)
	n.cfg.InboxBytes = 100
	for range 3 {
		n.enqueue(make([]byte, 40))
	}
	if got, want := len(n.inbox), 2; got != want {
		t.Errorf("inbox holds %d frames of 40 bytes, want %d (100-byte bound)", got, want)
	}
	if got, want := n.inboxB.Load(), int64(80); got != want {
		t.Errorf("inbox bytes = %d, want %d", got, want)
	}
	n.cfg.InboxBytes = 1 << 20
	for range 20 {
		n.enqueue(make([]byte, 1))
	}
	if got, want := len(n.inbox), 10; got != want {
		t.Errorf("inbox holds %d frames, want the bound %d", got, want)
	}
	if got, want := n.met.dropCount("queue_full"), 1.0+12; got != want {
		t.Errorf("dropped(queue_full) = %v, want %v", got, want)
	}
	if got, want := n.inboxB.Load(), int64(88); got != want {
		t.Errorf("inbox bytes = %d, want %d (dropped frames not counted)", got, want)
	}
	n.enqueue(make([]byte, MaxMessage+1))
	if got, want := n.met.dropCount("oversized"), 1.0; got != want {
		t.Errorf("dropped(oversized) = %v, want %v", got, want)
	}
}
