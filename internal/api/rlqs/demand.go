package rlqs

import (
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// demands keeps, per counter key, the demand that each of this node's
// streams reports for it, and divides the key's part of the limit among
// them by max-min fairness (see level), so that each stream's lease is
// sized to its part of the limit instead of the first stream to report
// taking all of it. Other nodes' and regions' clients are not in it: the
// store and the burst guard divide the limit among them, as among any
// other callers.
type demands struct {
	seed   maphash.Seed
	shards [64]demandShard
}

type demandShard struct {
	mu   sync.Mutex
	keys map[string]*keyDemand
}

// keyDemand is one key's demand: each bucket's rate (requests a second).
type keyDemand struct {
	rates map[*bucket]float64
	// sorted is rates' values in ascending order, nil when a rate moved
	// since it was built.
	sorted []float64
	// fed is what the node told the burst guard of its clients'
	// refusals of the key in bucket fedBucket of the limit (see refusals).
	fed       uint64
	fedBucket int64
}

func newDemands() *demands {
	d := &demands{seed: maphash.MakeSeed()}
	for i := range d.shards {
		d.shards[i].keys = map[string]*keyDemand{}
	}
	return d
}

func (d *demands) shard(key string) *demandShard {
	return &d.shards[maphash.String(d.seed, key)%uint64(len(d.shards))]
}

// set records b's rate for key.
func (d *demands) set(key string, b *bucket, rate float64) {
	sh := d.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil {
		k = &keyDemand{rates: map[*bucket]float64{}}
		sh.keys[key] = k
	}
	if old, ok := k.rates[b]; !ok || old != rate {
		k.rates[b], k.sorted = rate, nil
	}
}

// leave takes b's rate out of its key's demand.
func (d *demands) leave(key string, b *bucket) {
	sh := d.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil {
		return
	}
	delete(k.rates, b)
	k.sorted = nil
	if len(k.rates) == 0 {
		delete(sh.keys, key)
	}
}

// level returns the most that any one of key's buckets gets of capacity
// (requests a second) divided among them by max-min fairness: buckets
// that ask for less than an equal part get what they ask for, and the
// others share what is left equally. It is +Inf when the buckets ask for
// no more than capacity together.
//
// Fair parts rather than parts in proportion to the rates: clients that
// all ask for more than their part get equal parts that do not move with
// their measured rates (a Poisson count of a few requests is noisy), and
// a lease replaced for every move of its part would start its client's
// bucket full again and again.
func (d *demands) level(key string, capacity float64) float64 {
	sh := d.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil {
		return math.Inf(1)
	}
	if k.sorted == nil {
		k.sorted = make([]float64, 0, len(k.rates))
		for _, r := range k.rates {
			k.sorted = append(k.sorted, r)
		}
		slices.Sort(k.sorted)
	}
	left := capacity
	for i, r := range k.sorted {
		if n := float64(len(k.sorted) - i); r*n >= left {
			return left / n
		}
		left -= r
	}
	return math.Inf(1)
}

// refusals returns how many of denied refusals of key, reported at now,
// to tell the burst guard as the region's demand: at most
// [maxRefusalsPerLimit] times the limit's capacity a bucket of its
// window, for the node's streams together.
// Reports are the client's word: without the cap one client could make
// its region weigh as much as it liked in the guard's shares (the others
// then taking less of the headroom; the bound holds either way).
func (d *demands) refusals(key string, lim window.Limit, now time.Time, denied uint64) uint64 {
	if denied == 0 {
		return 0
	}
	_, b := lim.BucketAt(now.UnixMilli())
	sh := d.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil {
		return 0
	}
	if k.fedBucket != b {
		k.fed, k.fedBucket = 0, b
	}
	most := maxRefusalsPerLimit * lim.Capacity()
	n := min(denied, most-min(k.fed, most))
	k.fed += n
	return n
}

// maxRefusalsPerLimit bounds the refusals a node tells the guard of a
// key, in limits a bucket: a region refused ten times the limit weighs
// as much as its refusals say (the guard weighs by their square root),
// one claiming more weighs no more than that.
const maxRefusalsPerLimit = 10
