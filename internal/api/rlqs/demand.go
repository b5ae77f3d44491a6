package rlqs

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/rlcluster/rlcluster/internal/window"
)

// demands sums, per counter key, the demand that this node's streams
// report for it, so that each stream's lease is sized to its part of the
// limit instead of the first stream to report taking all of it. Other
// nodes' and regions' clients are not in it: the store and the burst
// guard divide the limit among them, as among any other callers.
type demands struct {
	seed   maphash.Seed
	shards [64]demandShard
}

type demandShard struct {
	mu   sync.Mutex
	keys map[string]*keyDemand
}

// keyDemand is one key's demand: the sum of its buckets' rates (requests
// a second) and how many buckets add to it.
type keyDemand struct {
	total float64
	n     int
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

// set replaces a bucket's rate old (0 when it was not counted yet) by
// rate, joined says whether it was counted, and returns the key's total
// after.
func (d *demands) set(key string, joined bool, old, rate float64) float64 {
	sh := d.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil {
		k = &keyDemand{}
		sh.keys[key] = k
	}
	if !joined {
		k.n++
		old = 0
	}
	k.total = max(k.total-old+rate, rate)
	return k.total
}

// leave takes a bucket's rate out of its key's total.
func (d *demands) leave(key string, rate float64) {
	sh := d.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil {
		return
	}
	if k.n--; k.n <= 0 {
		delete(sh.keys, key)
		return
	}
	k.total = max(k.total-rate, 0)
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
