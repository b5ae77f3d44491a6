package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/status"
)

// fakeCluster reports a fixed membership.
type fakeCluster struct {
	members []status.Member
	offsets map[string]time.Duration
}

func (f fakeCluster) Members() []status.Member               { return f.members }
func (f fakeCluster) ClockOffsets() map[string]time.Duration { return f.offsets }

func TestStatusPage(t *testing.T) {
	s := newServer(t, api.Config{Region: "us"})
	for _, tc := range []struct {
		name, path string
		want       int
		contains   string
	}{
		{"root is the page", "/", http.StatusOK, `fetch("status.json"`},
		{"page polls Peek", "/", http.StatusOK, "ratelimit.v1.RateLimitService/Peek?"},
		{"json", "/status.json", http.StatusOK, `"gossip": false`},
		{"unknown path stays 404", "/nope", http.StatusNotFound, ""},
		{"index.html is not the page", "/index.html", http.StatusNotFound, ""},
		{"subpath of status.json", "/status.json/x", http.StatusNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := get(t, s.URL+tc.path, tc.want)
			if !strings.Contains(body, tc.contains) {
				t.Errorf("GET %s = %.200q..., want it to contain %q", tc.path, body, tc.contains)
			}
		})
	}
	resp, err := http.Post(s.URL+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusMethodNotAllowed; got != want {
		t.Errorf("POST / = %d, want %d", got, want)
	}
	resp, err = http.Get(s.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.Header.Get("Content-Type"), "text/html; charset=utf-8"; got != want {
		t.Errorf("GET / Content-Type = %q, want %q", got, want)
	}
}

func TestStatusJSON(t *testing.T) {
	since := t0.Add(-time.Minute)
	cl := fakeCluster{
		members: []status.Member{
			{Name: "eu-1", Region: "eu", Addr: "10.0.2.11:7946", State: "alive", Since: since},
			{Name: "us-2", Region: "us", Addr: "10.0.1.12:7946", State: "dead", Since: since},
			{Name: "us-1", Region: "us", Addr: "10.0.1.11:7946", State: "alive", Since: since, Local: true},
			{Name: "ap-1", Region: "ap", Addr: "10.0.3.11:7946", State: "left", Since: since},
		},
		offsets: map[string]time.Duration{"eu-1": 3 * time.Millisecond, "us-1": time.Hour},
	}
	pool := &apitest.Pool{Ages: map[string]time.Duration{"eu": 80 * time.Millisecond, "us": time.Hour}}
	s := newServer(t, api.Config{Region: "us", Cluster: cl, Pool: pool})

	var st status.Status
	if err := json.Unmarshal([]byte(get(t, s.URL+"/status.json", http.StatusOK)), &st); err != nil {
		t.Fatalf("decode /status.json: %v", err)
	}
	if st.Node != "us-1" || st.Region != "us" || !st.Gossip || !st.Time.Equal(t0) {
		t.Errorf("status = node %q region %q gossip %v time %v, want us-1 us true %v", st.Node, st.Region, st.Gossip, st.Time, t0)
	}
	type row struct {
		region            string
		local             bool
		alive, dead, left int
		lag               string
		members           string
	}
	var got []row
	for _, rg := range st.Regions {
		r := row{region: rg.Region, local: rg.Local, alive: rg.Alive, dead: rg.Dead, left: rg.Left, lag: "none"}
		if rg.LagSeconds != nil {
			r.lag = time.Duration(*rg.LagSeconds * float64(time.Second)).String()
		}
		var ms []string
		for _, m := range rg.Members {
			off := "-"
			if m.ClockOffsetSeconds != nil {
				off = time.Duration(*m.ClockOffsetSeconds * float64(time.Second)).String()
			}
			ms = append(ms, m.Name+"/"+m.State+"/"+off)
		}
		r.members = strings.Join(ms, " ")
		got = append(got, r)
	}
	want := []row{
		// The local region first, without a lag and without the local
		// node's clock offset; then the others by name.
		{"us", true, 1, 1, 0, "none", "us-1/alive/- us-2/dead/-"},
		{"ap", false, 0, 0, 1, "none", "ap-1/left/-"},
		{"eu", false, 1, 0, 0, "80ms", "eu-1/alive/3ms"},
	}
	if len(got) != len(want) {
		t.Fatalf("regions = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("regions[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}
