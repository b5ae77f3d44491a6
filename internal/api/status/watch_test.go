package status_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/status"
)

// fakeWatcher answers known keys with fixed windows and records what it
// was asked.
type fakeWatcher struct {
	windows map[string]status.Watch
	asked   []string
	samples []status.StalenessSample
}

func (f *fakeWatcher) Watch(_ context.Context, key string) (status.Watch, error) {
	f.asked = append(f.asked, key)
	w, ok := f.windows[key]
	if !ok {
		return status.Watch{}, errors.New("no decision seen on this node for the key yet")
	}
	return w, nil
}

func (f *fakeWatcher) Staleness() []status.StalenessSample { return f.samples }

const (
	fullToken  = "full-access-token-0123456789"
	loginToken = "login-only-token-0123456789"
)

// newWatchServer serves the status page behind bearer tokens, as rlnode
// does: one token bound to nothing, one bound to the rule "login".
func newWatchServer(t *testing.T, w status.Watcher) *httptest.Server {
	t.Helper()
	t0 := time.Unix(1_700_000_000, 0)
	p := status.New(status.Config{Region: "eu", Now: func() time.Time { return t0 }, Watcher: w})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.ServePage)
	mux.HandleFunc("GET /status.json", p.ServeJSON)
	mux.HandleFunc("GET /watch.svg", p.ServeWatchSVG)
	toks, err := auth.NewTokens([]string{fullToken, loginToken + " rules=login prefixes=user-"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(auth.RequireBearer(toks, nil, mux))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path, token string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

// svgDoc is the part of watch.svg the test reads.
type svgDoc struct {
	Rects []struct {
		Class  string `xml:"class,attr"`
		Region string `xml:"data-region,attr"`
		Bucket int64  `xml:"data-bucket,attr"`
		Count  uint64 `xml:"data-count,attr"`
		Total  uint64 `xml:"data-total,attr"`
		Closed string `xml:"data-closed,attr"`
	} `xml:"rect"`
	Lines []struct {
		Class string `xml:"class,attr"`
		Limit uint64 `xml:"data-limit,attr"`
	} `xml:"line"`
	Polylines []struct {
		Region string  `xml:"data-region,attr"`
		Last   float64 `xml:"data-last,attr"`
		Points string  `xml:"points,attr"`
	} `xml:"polyline"`
}

// TestWatchRendersWindows: over a real HTTP client, the status page draws
// a watched key's windows (each region's count per window, the limit) and
// the remote regions' staleness, serves them in /status.json, and refuses
// callers without a token or whose token's scope does not cover the key.
func TestWatchRendersWindows(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0).UTC()
	win := func(b int64, closed bool, eu, us uint64) status.Window {
		w := status.Window{Bucket: b, Start: t0.Add(time.Duration(b-100) * 10 * time.Second), Closed: closed, Total: eu + us}
		if eu > 0 {
			w.Regions = append(w.Regions, status.RegionCount{Region: "eu", Count: eu})
		}
		if us > 0 {
			w.Regions = append(w.Regions, status.RegionCount{Region: "us", Count: us})
		}
		return w
	}
	fw := &fakeWatcher{
		windows: map[string]status.Watch{"r:login:user-1": {Rule: "login", Window: 10 * time.Second, Limit: 10,
			Windows: []status.Window{win(100, true, 6, 3), win(101, true, 7, 4), win(102, false, 2, 0)}}},
		samples: []status.StalenessSample{
			{Time: t0, Ages: map[string]time.Duration{"us": 80 * time.Millisecond}},
			{Time: t0.Add(time.Second), Ages: map[string]time.Duration{"us": 1500 * time.Millisecond}},
		},
	}
	srv := newWatchServer(t, fw)
	q := "?watch=" + url.QueryEscape("r:login:user-1")

	code, body, hdr := get(t, srv, "/watch.svg"+q, fullToken)
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "image/svg+xml") {
		t.Fatalf("watch.svg: %d %s: %s", code, hdr.Get("Content-Type"), body)
	}
	var doc svgDoc
	if err := xml.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("watch.svg is not XML: %v\n%s", err, body)
	}
	type cell struct {
		region string
		bucket int64
	}
	counts := map[cell]uint64{}
	totals := map[int64]uint64{}
	open := map[int64]string{}
	for _, r := range doc.Rects {
		switch r.Class {
		case "count":
			counts[cell{r.Region, r.Bucket}] = r.Count
			open[r.Bucket] = r.Closed
		case "window":
			totals[r.Bucket] = r.Total
		}
	}
	wantCounts := map[cell]uint64{{"eu", 100}: 6, {"us", 100}: 3, {"eu", 101}: 7, {"us", 101}: 4, {"eu", 102}: 2}
	if len(counts) != len(wantCounts) {
		t.Errorf("drawn counts %v, want %v", counts, wantCounts)
	}
	for c, want := range wantCounts {
		if got := counts[c]; got != want {
			t.Errorf("drawn count of %s in bucket %d = %d, want %d", c.region, c.bucket, got, want)
		}
	}
	if totals[100] != 9 || totals[101] != 11 || totals[102] != 2 {
		t.Errorf("drawn window totals %v, want 100:9 101:11 102:2", totals)
	}
	if open[101] != "true" || open[102] != "false" {
		t.Errorf("closed flags %v, want 101 closed and 102 open", open)
	}
	var limit uint64
	for _, l := range doc.Lines {
		if l.Class == "limit" {
			limit = l.Limit
		}
	}
	if limit != 10 {
		t.Errorf("limit line at %d, want 10", limit)
	}
	if len(doc.Polylines) != 1 || doc.Polylines[0].Region != "us" || doc.Polylines[0].Last != 1.5 ||
		len(strings.Fields(doc.Polylines[0].Points)) != 2 {
		t.Errorf("staleness lines %+v, want one for us with 2 points ending at 1.5 s", doc.Polylines)
	}

	// The same windows as JSON.
	code, body, _ = get(t, srv, "/status.json"+q, fullToken)
	var st status.Status
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
		t.Fatalf("status.json: %d %v: %s", code, err, body)
	}
	if st.Watch == nil || st.Watch.Limit != 10 || st.Watch.Rule != "login" || st.Watch.WindowSeconds != 10 ||
		len(st.Watch.Windows) != 3 || st.Watch.Windows[1].Total != 11 || len(st.Watch.Staleness) != 2 ||
		st.Watch.Staleness[1].AgeSeconds["us"] != 1.5 {
		t.Errorf("status.json watch = %+v", st.Watch)
	}

	// The page itself carries the watch form and fetches watch.svg.
	if code, body, _ := get(t, srv, "/"+q, fullToken); code != http.StatusOK ||
		!strings.Contains(body, `name="watch"`) || !strings.Contains(body, "watch.svg?") {
		t.Errorf("page: %d, without the watch form or its fetch", code)
	}

	// A key not decided here: the picture says why, in words.
	code, body, _ = get(t, srv, "/watch.svg?watch="+url.QueryEscape("i:nobody"), fullToken)
	if code != http.StatusOK || !strings.Contains(body, "no decision seen on this node") {
		t.Errorf("undecided key: %d %s", code, body)
	}

	// Who may watch what.
	for _, tt := range []struct {
		name, key, token string
		want             int
	}{
		{"no token", "r:login:user-1", "", http.StatusUnauthorized},
		{"wrong token", "r:login:user-1", "not-a-valid-token-at-all", http.StatusUnauthorized},
		{"scoped, its rule and prefix", "r:login:user-1", loginToken, http.StatusOK},
		{"scoped, another rule", "r:admin:user-1", loginToken, http.StatusForbidden},
		{"scoped, another prefix", "r:login:bot-1", loginToken, http.StatusForbidden},
		{"scoped, inline", "i:user-1", loginToken, http.StatusForbidden},
		{"scoped, forward-auth of its rule", "f:login:10.0.0.1", loginToken, http.StatusOK},
		{"scoped, Envoy domain", "e:web/path=%2F", loginToken, http.StatusForbidden}, // domains= not set: none
		{"no namespace", "user-1", fullToken, http.StatusBadRequest},
		{"rule key without a key", "r:login", fullToken, http.StatusBadRequest},
	} {
		fw.asked = nil
		for _, path := range []string{"/watch.svg", "/status.json"} {
			code, body, _ := get(t, srv, path+"?watch="+url.QueryEscape(tt.key), tt.token)
			if code != tt.want {
				t.Errorf("%s: %s?watch=%s: %d, want %d (%s)", tt.name, path, tt.key, code, tt.want, strings.TrimSpace(body))
			}
		}
		if tt.want != http.StatusOK && len(fw.asked) > 0 {
			t.Errorf("%s: the watcher was asked for %v", tt.name, fw.asked)
		}
	}
}

// TestWatchWithoutWatcher: a node without gossip watches nothing and says
// so.
func TestWatchWithoutWatcher(t *testing.T) {
	srv := newWatchServer(t, nil)
	code, body, _ := get(t, srv, "/watch.svg?watch=i:k", fullToken)
	if code != http.StatusNotFound || !strings.Contains(body, "watches no key") {
		t.Errorf("watch.svg without a Watcher: %d %s, want 404", code, body)
	}
}
