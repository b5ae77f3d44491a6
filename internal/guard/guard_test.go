package guard

import (
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

var t0 = time.Unix(1_700_000_000, 0)

func view(alive, silent []string) *View {
	return &View{Region: "a", Alive: alive, Silent: silent, Nodes: 1, Horizon: 100 * time.Millisecond}
}

// admitN runs n one-hit requests for key through g and a store that holds
// est already, returning how many were admitted;
// others of est are region b's.
func admitN(g *Guard, now time.Time, key string, limit uint64, n int, v *View, est *uint64, others uint64) int {
	ok := 0
	for range n {
		adm, lim, _ := g.Admit(now, key, limit, 1, v)
		if !adm {
			continue
		}
		res := region.Result{Decision: window.Decision{Allowed: *est+1 <= lim}}
		if res.Allowed {
			*est++
			ok++
		}
		if *est < lim {
			res.Remaining = lim - *est
		}
		res.Regions = []region.RegionCount{{Region: "a", Current: *est - others}, {Region: "b", Current: others}}
		g.Done(now, key, limit, 1, v, &res)
	}
	return ok
}

func TestAloneIsOff(t *testing.T) {
	g := New(Config{})
	var est uint64
	if got, want := admitN(g, t0, "k", 100, 150, view([]string{"a"}, nil), &est, 0), 100; got != want {
		t.Errorf("admitted %d, want %d (the store alone decides)", got, want)
	}
	if got := g.Keys(); got != 0 {
		t.Errorf("Keys() = %d, want 0", got)
	}
}

func TestBurstShare(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b", "c"}, nil)
	var est uint64
	if got, want := admitN(g, t0, "k", 100, 100, v, &est, 0), 34; got != want {
		t.Errorf("first horizon: admitted %d, want %d = ceil(100/3)", got, want)
	}
	ok, _, retry := g.Admit(t0.Add(40*time.Millisecond), "k", 100, 1, v)
	if ok || retry != 60*time.Millisecond {
		t.Errorf("Admit within the horizon = %v, retry %v; want denied, 60ms", ok, retry)
	}
	// Next horizon: the others admitted 34 each meanwhile (est 102 would be
	// over; say 90): headroom 10, own weight 34 of 90.
	est = 90
	got := admitN(g, t0.Add(100*time.Millisecond), "k", 100, 100, v, &est, 56)
	if got < 1 || got > 5 {
		t.Errorf("second horizon: admitted %d, want a share of the 10 left (1 to 5)", got)
	}
}

func TestNodesDivideTheShare(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b"}, nil)
	v.Nodes = 2
	var est uint64
	if got, want := admitN(g, t0, "k", 100, 100, v, &est, 0), 25; got != want {
		t.Errorf("admitted %d, want %d = 100/2 regions/2 nodes", got, want)
	}
}

func TestCharge(t *testing.T) {
	tests := []struct {
		name          string
		alive, silent []string
		want          bool
	}{
		{"no split", []string{"a", "b", "c"}, nil, false},
		{"minority", []string{"a"}, []string{"b", "c"}, true},
		{"majority", []string{"b", "c"}, []string{"a"}, false},
		{"half with the smallest", []string{"a"}, []string{"b"}, false},
		{"half without it", []string{"b"}, []string{"a"}, true},
	}
	for _, tt := range tests {
		v := view(tt.alive, tt.silent)
		if got := v.Charge(); got != tt.want {
			t.Errorf("%s: Charge() = %v, want %v", tt.name, got, tt.want)
		}
	}
	// The minority of three charges two silent regions 34 each.
	g := New(Config{})
	v := view([]string{"a"}, []string{"b", "c"})
	ok, lim, _ := g.Admit(t0, "k", 100, 1, v)
	if !ok || lim != 32 {
		t.Errorf("Admit = %v, limit %d; want true, 32", ok, lim)
	}
	// What the estimate already holds of a silent region is not charged
	// twice.
	res := region.Result{Decision: window.Decision{Allowed: true, Remaining: 10, PrevWeight: 0.5},
		Regions: []region.RegionCount{{Region: "a", Current: 1}, {Region: "b", Current: 20, Previous: 20}}}
	g.Done(t0, "k", 100, 1, v, &res)
	if _, lim, _ := g.Admit(t0, "k", 100, 1, v); lim != 100-34-4 {
		t.Errorf("limit %d, want %d (c charged 34, b 34-30)", lim, 100-34-4)
	}
}

func TestSweep(t *testing.T) {
	g := New(Config{})
	v := view([]string{"a", "b"}, nil)
	g.Admit(t0, "k", 10, 1, v)
	g.Sweep(t0.Add(50 * time.Millisecond))
	if got := g.Keys(); got != 1 {
		t.Errorf("Keys() = %d within the horizon, want 1", got)
	}
	g.Sweep(t0.Add(100 * time.Millisecond))
	if got := g.Keys(); got != 0 {
		t.Errorf("Keys() = %d after the horizon, want 0", got)
	}
}
