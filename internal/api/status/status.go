// Package status owns the node's status page (/) and its data
// (/status.json): this node's view of the gossip pool, by region, with
// replication lag and clock offsets.
package status

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"sort"
	"time"
)

// Cluster describes the multi-region pool this node belongs to, for the
// status page. It is optional: nil means a single region with no gossip.
type Cluster interface {
	// Members returns every node this node knows, itself included, in any
	// order. It is called once per /status.json request and must not block
	// on the network.
	Members() []Member
	// ClockOffsets returns the estimated clock offset of each peer (peer
	// minus local), by member name; peers not measured yet are missing. It
	// must not block on the network.
	ClockOffsets() map[string]time.Duration
}

// Member is one node of the pool as this node sees it.
type Member struct {
	// Name is the node's unique name in the pool.
	Name string `json:"name"`
	// Region is the node's region.
	Region string `json:"region"`
	// Addr is the node's gossip host:port.
	Addr string `json:"addr"`
	// APIAddr is the node's API host:port, as it advertises it.
	APIAddr string `json:"api_addr"`
	// State is "alive", "dead" (failed) or "left" (gracefully).
	State string `json:"state"`
	// Since is when this node saw the member enter State.
	Since time.Time `json:"since"`
	// Local is true for this node itself.
	Local bool `json:"local"`
}

// Status is what /status.json answers: this node's view of the pool.
type Status struct {
	// Node and Region name this node; Node is empty without a Cluster.
	Node   string `json:"node"`
	Region string `json:"region"`
	// Time is this node's clock when it answered.
	Time time.Time `json:"time"`
	// Gossip is false when the node runs alone (no Cluster).
	Gossip bool `json:"gossip"`
	// Ready is what /readyz answers; NotReady says why not, in /readyz's
	// words (for example "gossip: no other region reachable: check --join
	// and --gossip-key").
	Ready    bool   `json:"ready"`
	NotReady string `json:"not_ready,omitempty"`
	// Regions lists every region known, this node's first, then by name.
	Regions []RegionStatus `json:"regions"`
	// Watch is the watched key's windows, for /status.json?watch=<key>.
	Watch *WatchStatus `json:"watch,omitempty"`
	// Leases is what the node's quota leases hold.
	Leases *LeaseStatus `json:"leases,omitempty"`
}

// RegionStatus is one region in [Status].
type RegionStatus struct {
	Region string `json:"region"`
	// Local is true for this node's own region.
	Local bool `json:"local"`
	// Alive, Dead and Left count the region's members by state.
	Alive int `json:"alive"`
	Dead  int `json:"dead"`
	Left  int `json:"left"`
	// LagSeconds is the age of the newest totals merged from the region
	// (replication lag); nil for the local region and for regions never
	// heard from.
	LagSeconds *float64 `json:"lag_seconds"`
	// Members are the region's members, sorted by name.
	Members []MemberStatus `json:"members"`
}

// MemberStatus is a [Member] with its measured clock offset.
type MemberStatus struct {
	Member
	// ClockOffsetSeconds is the peer's clock minus this node's; nil when
	// not measured (always for this node itself).
	ClockOffsetSeconds *float64 `json:"clock_offset_seconds"`
}

//go:embed status.html
var statusPage []byte

// Config configures a [Page].
type Config struct {
	// Region is this node's region. Required.
	Region string
	// Cluster describes the gossip pool; nil means a single region.
	Cluster Cluster
	// Ages returns, for each remote region heard from, how old the newest
	// totals merged from it are; nil means none. It must not block.
	Ages func() map[string]time.Duration
	// Now returns the current time. Required.
	Now func() time.Time
	// Ready is what /readyz checks (the store, gossip with --join): nil
	// when the node is ready, else why not. Nil means always ready.
	Ready func(ctx context.Context) error
	// Watcher follows the windows of watched keys (?watch=<key>); nil
	// means the page watches no key.
	Watcher Watcher
	// Leases returns the quota leases' streams and buckets held on this
	// node; nil means none are served.
	Leases func() LeaseStatus
}

// LeaseStatus is what the node's quota leases hold (Envoy's rate limit
// quota service and ratelimit.v1's Lease).
type LeaseStatus struct {
	Streams int64 `json:"streams"`
	Buckets int64 `json:"buckets"`
}

// Page serves the status page and its data. It is safe for concurrent use.
type Page struct{ cfg Config }

// New returns the status page of cfg.
func New(cfg Config) *Page { return &Page{cfg: cfg} }

// ServePage serves the status page, which polls /status.json and Peek
// from the browser.
func (s *Page) ServePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(statusPage)
}

// Status returns this node's view of the pool, as /status.json serves it.
func (s *Page) Status(ctx context.Context) Status {
	st := Status{Region: s.cfg.Region, Time: s.cfg.Now().UTC(), Gossip: s.cfg.Cluster != nil, Ready: true}
	if s.cfg.Leases != nil {
		l := s.cfg.Leases()
		st.Leases = &l
	}
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(ctx); err != nil {
			st.Ready, st.NotReady = false, err.Error()
		}
	}
	byRegion := map[string]*RegionStatus{}
	get := func(r string) *RegionStatus {
		rs, ok := byRegion[r]
		if !ok {
			rs = &RegionStatus{Region: r, Local: r == s.cfg.Region, Members: []MemberStatus{}}
			byRegion[r] = rs
		}
		return rs
	}
	get(s.cfg.Region)
	if c := s.cfg.Cluster; c != nil {
		offsets := c.ClockOffsets()
		for _, m := range c.Members() {
			if m.Local {
				st.Node = m.Name
			}
			rs := get(m.Region)
			ms := MemberStatus{Member: m}
			if off, ok := offsets[m.Name]; ok && !m.Local {
				v := off.Seconds()
				ms.ClockOffsetSeconds = &v
			}
			rs.Members = append(rs.Members, ms)
			switch m.State {
			case "alive":
				rs.Alive++
			case "dead":
				rs.Dead++
			case "left":
				rs.Left++
			}
		}
	}
	if s.cfg.Ages != nil {
		for r, age := range s.cfg.Ages() {
			if r == s.cfg.Region {
				continue
			}
			v := age.Seconds()
			get(r).LagSeconds = &v
		}
	}
	for _, rs := range byRegion {
		sort.Slice(rs.Members, func(i, j int) bool { return rs.Members[i].Name < rs.Members[j].Name })
		st.Regions = append(st.Regions, *rs)
	}
	sort.Slice(st.Regions, func(i, j int) bool {
		a, b := st.Regions[i], st.Regions[j]
		if a.Local != b.Local {
			return a.Local
		}
		return a.Region < b.Region
	})
	return st
}

// ServeJSON serves [Page.Status] as JSON; with ?watch=<key>, also the
// key's windows and the remote regions' staleness (see [Page.Watch]).
func (s *Page) ServeJSON(w http.ResponseWriter, r *http.Request) {
	st := s.Status(r.Context())
	if key := r.URL.Query().Get("watch"); key != "" {
		ws, code := s.Watch(r, key)
		if code != http.StatusOK {
			http.Error(w, ws.Error, code)
			return
		}
		st.Watch = &ws
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(st)
}
