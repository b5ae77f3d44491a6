package apitest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// Pool is a hand-written decision.Pool: a cluster of N regions whose
// remote regions' totals are as old as Ages says, and which keeps the
// totals it is asked to queue. Its guard view is a region alone, under
// which the burst guard admits everything. It is safe for concurrent use.
type Pool struct {
	// N is how many regions the cluster has, this one included; 0 means 1.
	N atomic.Int64
	// Ages is what RemoteAges returns. Set it before the Pool is used.
	Ages map[string]time.Duration

	mu      sync.Mutex
	totals  []region.Total
	decided []string
}

// Regions returns N, at least 1.
func (p *Pool) Regions() int { return max(int(p.N.Load()), 1) }

// Dirty keeps t.
func (p *Pool) Dirty(t region.Total) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.totals = append(p.totals, t)
}

// Decided keeps key.
func (p *Pool) Decided(key string, _ window.Limit, _ int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.decided = append(p.decided, key)
}

// GuardView returns a view of one region alone.
func (p *Pool) GuardView(time.Time) guard.View {
	return guard.View{Region: "local", Alive: []string{"local"}, Nodes: 1}
}

// RemoteAges returns Ages.
func (p *Pool) RemoteAges() map[string]time.Duration { return p.Ages }

// Totals returns the totals Dirty was given, in order.
func (p *Pool) Totals() []region.Total {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]region.Total(nil), p.totals...)
}

// DecidedKeys returns the keys Decided was given, in order.
func (p *Pool) DecidedKeys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.decided...)
}
