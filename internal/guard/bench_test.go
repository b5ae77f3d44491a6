package guard

import (
	"strconv"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/region"
	"github.com/rlcluster/rlcluster/internal/window"
)

// BenchmarkAdmitDone is the guard's cost per decision on the request path:
// Admit and Done for keys spread over 1000, three regions alive.
func BenchmarkAdmitDone(b *testing.B) {
	g := New(Config{})
	v := &View{Region: "a", Alive: []string{"a", "b", "c"}, Nodes: 1, Horizon: 80 * time.Millisecond}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	res := region.Result{Decision: window.Decision{Allowed: true, Remaining: 500},
		Regions: []region.RegionCount{{Region: "a", Current: 100}, {Region: "b", Current: 50}}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			now := t0.Add(time.Duration(i) * time.Microsecond)
			k := keys[i%len(keys)]
			if ok, _, _ := g.Admit(now, k, limitOf(1000), 1, v); ok {
				r := res
				g.Done(now, k, limitOf(1000), 1, v, &r)
			}
		}
	})
}
