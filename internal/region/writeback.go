package region

import (
	"context"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// The Failover's write-back: the buckets the fallback counted while the
// primary was unavailable, remembered and merged into the primary when it
// answers again, and the mirror of the primary's counts into the fallback.

// writeBackSoon starts a write-back when the breaker is closed and the
// fallback holds counts the primary lacks: a failure too short to open the
// breaker (or a write-back that failed) is written back once the primary
// answers (the next successful call starts it), not at the end of an
// outage that may never come.
func (f *Failover) writeBackSoon() {
	if !f.wbAny.Load() || f.open.Load() || !f.wbOn.CompareAndSwap(false, true) {
		return
	}
	f.probes.Add(1)
	go func() {
		defer f.probes.Done()
		defer f.wbOn.Store(false)
		f.writeBackRetrying()
	}()
}

// writeBackLater calls writeBackSoon ProbeMin from now, unless a call is
// waiting already or the breaker is open (the recovery writes back): what
// the fallback counted after a failure too short to open the breaker is
// written back even if no call follows it (a node whose traffic stopped).
func (f *Failover) writeBackLater() {
	if f.open.Load() || !f.wbLater.CompareAndSwap(false, true) {
		return
	}
	f.probes.Add(1)
	go func() {
		defer f.probes.Done()
		defer f.wbLater.Store(false)
		t := time.NewTimer(f.cfg.ProbeMin)
		defer t.Stop()
		select {
		case <-f.stop:
		case <-t.C:
			f.writeBackSoon()
		}
	}()
}

// writeBackRetrying writes back, and after a failure tries again with the
// probes' backoff (ProbeMin doubling up to ProbeMax) while the breaker
// stays closed and the Failover open: the next call would start a new
// write-back too, but a node whose traffic stopped makes none, and the
// fallback's counts would wait for it. When the breaker opens again, the
// recovery's write-back takes over.
func (f *Failover) writeBackRetrying() {
	delay := f.cfg.ProbeMin
	for !f.writeBack() {
		t := time.NewTimer(delay)
		select {
		case <-f.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if f.open.Load() {
			return
		}
		delay = min(2*delay, f.cfg.ProbeMax)
	}
}

// writeBackMargin is how long past one window after a bucket closes it is
// still written back: the Redis store keeps a bucket two windows plus its
// TTL margin (10 s by default) after its first write, so until then a
// write-back never re-creates a bucket the primary has dropped. Other
// regions accept a bucket's totals as long (gossip's RetryMargin).
const writeBackMargin = 10 * time.Second

// remember records a total that the fallback admitted (its own region's)
// or merged (another region's) while the primary could not take it, for
// the write-back. The totals are kept here, not read back from the
// fallback at write-back time: the in-memory fallback keeps only a key's
// newest two buckets, and an outage of more than a window moves it on.
func (f *Failover) remember(t Total) {
	if t.Region == f.cfg.Region {
		return // the primary's own region only ever changes by its decisions
	}
	r := BucketRef{Key: t.Key, Window: t.Window, Bucket: t.Bucket}
	f.wbMu.Lock()
	defer f.wbMu.Unlock()
	b := f.wb[r]
	if b == nil {
		if len(f.wb) >= f.cfg.MaxWriteBack {
			f.wbDropped.Add(1)
			return
		}
		b = &memBucket{idx: t.Bucket}
		f.wb[r] = b
	}
	b.maxMerge(t.Region, t.Count, t.Trail, t.Window.Milliseconds(), "")
	f.wbAny.Store(true)
}

// writeBack merges into the primary the totals remembered for the buckets
// still alive (see writeBackMargin), with the fallback's own of those
// buckets where it still holds them: the fallback region's admissions and
// what other regions reported while the primary could not take it (never
// the primary's own region, which only its decisions change). It reports
// false when the primary refused them: they are kept for the next
// write-back.
func (f *Failover) writeBack() bool {
	f.wbMu.Lock()
	wb := f.wb
	f.wb = map[BucketRef]*memBucket{}
	f.wbAny.Store(false)
	f.wbMu.Unlock()
	nowMs := window.Ms(f.cfg.Now())
	refs := make([]BucketRef, 0, len(wb))
	for r := range wb {
		if _, end := window.BucketSpan(r.Window, r.Bucket); end+max(r.Window, -r.Window).Milliseconds()+writeBackMargin.Milliseconds() > nowMs {
			refs = append(refs, r)
		}
	}
	if len(refs) == 0 {
		return true
	}
	vecs, _ := f.fallback.Vectors(context.Background(), refs)
	var totals []Total
	for i, r := range refs {
		b := wb[r]
		if i < len(vecs) {
			for _, t := range vecs[i] {
				if t.Count > 0 && t.Region != f.cfg.Region {
					b.maxMerge(t.Region, t.Count, t.Trail, t.Window.Milliseconds(), "")
				}
			}
		}
		for _, c := range b.counts {
			totals = append(totals, Total{Key: r.Key, Window: r.Window, Bucket: r.Bucket, Region: c.region, Count: c.n, Trail: c.h})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.primary.Merge(ctx, totals); err != nil {
		// Keep the totals for the next write-back (the next recovery, or
		// the next fallback decision while the breaker is closed).
		f.wbMu.Lock()
		for _, r := range refs {
			switch kept := f.wb[r]; {
			case kept != nil:
				for _, c := range wb[r].counts {
					kept.maxMerge(c.region, c.n, c.h, r.Window.Milliseconds(), "")
				}
			case len(f.wb) < f.cfg.MaxWriteBack:
				f.wb[r] = wb[r]
			default:
				f.wbDropped.Add(1)
			}
		}
		f.wbAny.Store(len(f.wb) > 0)
		f.wbMu.Unlock()
		f.log.Warn("store: write back the fallback's counts, will retry", "totals", len(totals), "err", err)
		return false
	}
	f.writeBacks.Add(uint64(len(totals)))
	f.log.Info("store: wrote the fallback's counts back", "totals", len(totals), "fallback_region", f.fbRegion)
	return true
}

// mirror max-merges the per-region counts of the primary's counter
// decisions into the fallback, with their trails (the default sliding
// window), so that the fallback counts a burst until its hits leave the
// window as the primary does. Its own region's count too (Restore): what
// an earlier outage's fallback admitted and wrote back, which the
// fallback must count on from in the next one, though it may have evicted
// the key meanwhile; counted from 0 again, its totals would stay below
// the one the primary and the other regions hold, and hide its hits.
func (f *Failover) mirror(reqs []Request, res []Result) {
	var buf [8]Total // a decision of one or two regions needs no more
	totals := buf[:0]
	for i := range reqs {
		q := &reqs[i]
		if !q.Limit.Algorithm.Counted() {
			continue
		}
		for _, rc := range res[i].Regions {
			if rc.Current > 0 {
				totals = append(totals, Total{Key: q.Key, Window: q.Limit.BucketWindow(res[i].Bucket), Bucket: res[i].Bucket, Region: rc.Region, Count: rc.Current, Trail: rc.CurrentTrail})
			}
			if rc.Previous > 0 && q.Limit.Calendar.Unit == 0 {
				totals = append(totals, Total{Key: q.Key, Window: q.Limit.Window, Bucket: res[i].Bucket - 1, Region: rc.Region, Count: rc.Previous, Trail: rc.PreviousTrail})
			}
		}
	}
	if len(totals) > 0 {
		_ = f.fallback.Restore(context.Background(), totals)
	}
}
