package status

import (
	"context"
	"errors"
	"fmt"
	"html"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/auth"
)

// Watcher follows watched keys' windows for the status page. Its methods
// must not block on the network beyond one store read; the page checks
// that the caller may read a key before it asks.
type Watcher interface {
	// Watch starts (or keeps) following key, a counter key as the store
	// holds it ("i:<key>", "r:<rule>:<key>", "f:<rule>:<key>",
	// "e:<domain>/..."), and returns its recent windows. An error says why
	// there are none (for example, no decision for the key on this node
	// yet).
	Watch(ctx context.Context, key string) (Watch, error)
	// Staleness returns the recent staleness samples, oldest first.
	Staleness() []StalenessSample
}

// Watch is a watched key's recent windows.
type Watch struct {
	// Rule is the rule the key was made under ("inline" for an inline
	// limit, the domain for Envoy).
	Rule   string
	Window time.Duration
	Limit  uint64
	// Windows are oldest first; the last one is the open bucket.
	Windows []Window
}

// Window is one bucket of a watched key.
type Window struct {
	Bucket int64     `json:"bucket"`
	Start  time.Time `json:"start"`
	// Closed is true once the bucket was read after it closed and every
	// region's reconciliation landed: its counts are final.
	Closed bool `json:"closed"`
	// Regions are the bucket's counts by region (a replica under its own
	// name, region~id), sorted by region.
	Regions []RegionCount `json:"regions"`
	// Total is their sum: the hits admitted in the bucket.
	Total uint64 `json:"total"`
}

// RegionCount is one region's count in a [Window].
type RegionCount struct {
	Region string `json:"region"`
	Count  uint64 `json:"count"`
}

// StalenessSample is how old the newest totals merged from each remote
// region were at one instant.
type StalenessSample struct {
	Time time.Time                `json:"time"`
	Ages map[string]time.Duration `json:"-"`
}

// WatchStatus is what /status.json?watch=<key> adds to [Status].
type WatchStatus struct {
	Key           string    `json:"key"`
	Rule          string    `json:"rule,omitempty"`
	WindowSeconds float64   `json:"window_seconds,omitempty"`
	Limit         uint64    `json:"limit,omitempty"`
	Windows       []Window  `json:"windows"`
	Staleness     []Sample  `json:"staleness"`
	Error         string    `json:"error,omitempty"`
	Time          time.Time `json:"time"`
}

// Sample is a [StalenessSample] in seconds, by region, for JSON.
type Sample struct {
	Time       time.Time          `json:"time"`
	AgeSeconds map[string]float64 `json:"age_seconds"`
}

// MaxWatchKey bounds the key of ?watch=.
const MaxWatchKey = 4096

// Watch returns key's windows for the caller of r, with an HTTP status:
// 400 for a key in no namespace, 403 when the caller's token is bound to
// a scope that does not cover the key (see [Authorize]), 404 when the
// node watches no key (no Watcher). A key with no windows yet answers 200
// with Error saying why.
func (s *Page) Watch(r *http.Request, key string) (WatchStatus, int) {
	ws := WatchStatus{Key: key, Time: s.cfg.Now().UTC(), Windows: []Window{}, Staleness: []Sample{}}
	if s.cfg.Watcher == nil {
		ws.Error = "this node watches no key (it runs without gossip)"
		return ws, http.StatusNotFound
	}
	if err := Authorize(auth.FromContext(r.Context()), key); err != nil {
		ws.Error = err.Error()
		if errors.Is(err, errForbidden) {
			return ws, http.StatusForbidden
		}
		return ws, http.StatusBadRequest
	}
	w, err := s.cfg.Watcher.Watch(r.Context(), key)
	if err != nil {
		ws.Error = err.Error()
	}
	ws.Rule, ws.WindowSeconds, ws.Limit = w.Rule, w.Window.Seconds(), w.Limit
	if w.Windows != nil {
		ws.Windows = w.Windows
	}
	for _, sm := range s.cfg.Watcher.Staleness() {
		out := Sample{Time: sm.Time.UTC(), AgeSeconds: map[string]float64{}}
		for reg, a := range sm.Ages {
			if reg != s.cfg.Region {
				out.AgeSeconds[reg] = a.Seconds()
			}
		}
		ws.Staleness = append(ws.Staleness, out)
	}
	return ws, http.StatusOK
}

var errForbidden = errors.New("this token may not read that key")

// Authorize reports whether a caller whose token is bound to sc (nil: to
// nothing) may read the counts of a counter key, by the same rules as
// deciding on it: an inline key ("i:<key>") needs inline limits and one
// of the scope's prefixes, a rule key ("r:<rule>:<key>") the rule and a
// prefix, a forward-auth key ("f:<rule>:<key>") the rule, an Envoy key
// ("e:<domain>/...") the domain. A key in no namespace is refused.
func Authorize(sc *auth.Scope, key string) error {
	if key == "" || len(key) > MaxWatchKey {
		return fmt.Errorf("watch: the key must be 1 to %d bytes", MaxWatchKey)
	}
	tag, rest, _ := strings.Cut(key, ":")
	ok := true
	switch tag {
	case "i":
		ok = sc.AllowInline() && sc.AllowKey(rest)
	case "r", "f":
		rule, k, found := strings.Cut(rest, ":")
		if !found || rule == "" {
			return errors.New("watch: a rule key is r:<rule>:<key> or f:<rule>:<key>")
		}
		ok = sc.AllowRule(rule) && (tag == "f" || sc.AllowKey(k))
	case "e":
		dom, _, found := strings.Cut(rest, "/")
		if !found || dom == "" {
			return errors.New("watch: an Envoy key is e:<domain>/<entries>")
		}
		ok = sc.AllowDomain(envoyUnescaper.Replace(dom))
	default:
		return errors.New("watch: the key must be a counter key: i:<key>, r:<rule>:<key>, f:<rule>:<key> or e:<domain>/<entries>")
	}
	if !ok {
		return errForbidden
	}
	return nil
}

var envoyUnescaper = strings.NewReplacer("%2F", "/", "%3D", "=", "%25", "%")

// ServeWatchSVG serves the watched key's windows (?watch=<key>) as an SVG
// picture: the admitted hits of each recent window, stacked by region,
// against the limit, and the remote regions' staleness over the last
// minutes. It answers in the same statuses as [Page.Watch].
func (s *Page) ServeWatchSVG(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("watch")
	ws, code := s.Watch(r, key)
	if code != http.StatusOK {
		http.Error(w, ws.Error, code)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	_, _ = w.Write([]byte(renderSVG(ws, s.cfg.Region)))
}

// palette colours regions in name order.
var palette = []string{"#2456c7", "#1a7f37", "#b26a00", "#8e44ad", "#c62828", "#00838f", "#6d4c41", "#546e7a"}

const (
	svgW      = 760
	padL      = 56
	padR      = 16
	barsTop   = 34
	barsH     = 200
	staleTop  = barsTop + barsH + 64
	staleH    = 110
	svgH      = staleTop + staleH + 40
	plotW     = svgW - padL - padR
	fontStyle = `font-family="system-ui,sans-serif" font-size="11"`
)

// renderSVG draws ws. Every drawn count carries data-* attributes
// (region, bucket, count, limit) and a <title>, for tests and tooltips.
func renderSVG(ws WatchStatus, local string) string {
	var b strings.Builder
	e := html.EscapeString
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>`, svgW, svgH, svgW, svgH, fontStyle)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`, svgW, svgH)
	title := fmt.Sprintf("%s: admitted per window (%gs) by region, limit %d", ws.Key, ws.WindowSeconds, ws.Limit)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13" font-weight="600">%s</text>`, padL, e(title))

	// Regions in name order, over the windows and the staleness samples.
	seen := map[string]bool{}
	for _, win := range ws.Windows {
		for _, rc := range win.Regions {
			seen[rc.Region] = true
		}
	}
	for _, sm := range ws.Staleness {
		for r := range sm.AgeSeconds {
			seen[r] = true
		}
	}
	regions := make([]string, 0, len(seen))
	for r := range seen {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	color := map[string]string{}
	for i, r := range regions {
		color[r] = palette[i%len(palette)]
	}

	// Admitted per window, stacked by region, against the limit.
	top := float64(ws.Limit) * 1.25
	for _, win := range ws.Windows {
		top = math.Max(top, float64(win.Total)*1.05)
	}
	if top == 0 {
		top = 1
	}
	y := func(v float64) float64 { return barsTop + barsH - v/top*barsH }
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, padL, barsTop+barsH, svgW-padR, barsTop+barsH)
	if ws.Error != "" {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#c62828">%s</text>`, padL+8, barsTop+barsH/2, e(ws.Error))
	}
	if n := len(ws.Windows); n > 0 {
		slot := float64(plotW) / float64(n)
		bw := math.Max(slot*0.8, 1)
		for i, win := range ws.Windows {
			x := padL + float64(i)*slot + (slot-bw)/2
			opacity := "1"
			if !win.Closed {
				opacity = "0.45"
			}
			base := 0.0
			for _, rc := range win.Regions {
				h := float64(rc.Count) / top * barsH
				fmt.Fprintf(&b, `<rect class="count" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="%s" data-region="%s" data-bucket="%d" data-count="%d" data-closed="%t"><title>%s</title></rect>`,
					x, y(base)-h, bw, h, color[rc.Region], opacity, e(rc.Region), win.Bucket, rc.Count, win.Closed,
					e(fmt.Sprintf("%s: %d in the window from %s%s", rc.Region, rc.Count, win.Start.UTC().Format("15:04:05"), map[bool]string{true: "", false: " (open or not reconciled yet)"}[win.Closed])))
				base += float64(rc.Count)
			}
			ratio := ""
			if ws.Limit > 0 {
				ratio = fmt.Sprintf(", %.2f of the limit", float64(win.Total)/float64(ws.Limit))
			}
			fmt.Fprintf(&b, `<rect class="window" x="%.1f" y="%d" width="%.1f" height="%d" fill="none" data-bucket="%d" data-total="%d"><title>%s</title></rect>`,
				x, barsTop, bw, barsH, win.Bucket, win.Total, e(fmt.Sprintf("%s: %d admitted%s", win.Start.UTC().Format("15:04:05"), win.Total, ratio)))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, padL, barsTop+barsH+14, ws.Windows[0].Start.UTC().Format("15:04:05"))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s (open)</text>`, svgW-padR, barsTop+barsH+14, ws.Windows[n-1].Start.UTC().Format("15:04:05"))
	}
	if ws.Limit > 0 {
		ly := y(float64(ws.Limit))
		fmt.Fprintf(&b, `<line class="limit" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#c62828" stroke-dasharray="5,4" data-limit="%d"/>`, padL, ly, svgW-padR, ly, ws.Limit)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#c62828">limit %d</text>`, padL-4, ly+4, ws.Limit)
	}
	lx := padL
	for _, r := range regions {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`, lx, barsTop+barsH+22, color[r], lx+14, barsTop+barsH+31, e(r))
		lx += 24 + 7*len(r)
	}

	// Remote staleness over the samples: one line per region.
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" font-weight="600">remote staleness: age of the newest totals merged from each region (seconds)</text>`, padL, staleTop-10)
	maxAge := 0.0
	for _, sm := range ws.Staleness {
		for _, a := range sm.AgeSeconds {
			maxAge = math.Max(maxAge, a)
		}
	}
	if maxAge <= 0 {
		maxAge = 1
	}
	maxAge *= 1.1
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, padL, staleTop+staleH, svgW-padR, staleTop+staleH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%.2g s</text>`, padL-4, staleTop+8, maxAge)
	if n := len(ws.Staleness); n > 0 {
		t0, t1 := ws.Staleness[0].Time, ws.Staleness[n-1].Time
		span := t1.Sub(t0).Seconds()
		if span <= 0 {
			span = 1
		}
		for _, r := range regions {
			if r == local {
				continue
			}
			var pts []string
			last := 0.0
			for _, sm := range ws.Staleness {
				a, ok := sm.AgeSeconds[r]
				if !ok {
					continue
				}
				last = a
				px := padL + sm.Time.Sub(t0).Seconds()/span*plotW
				py := staleTop + staleH - a/maxAge*staleH
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
			}
			if len(pts) == 0 {
				continue
			}
			fmt.Fprintf(&b, `<polyline class="staleness" points="%s" fill="none" stroke="%s" stroke-width="1.5" data-region="%s" data-last="%g"><title>%s</title></polyline>`,
				strings.Join(pts, " "), color[r], e(r), last, e(fmt.Sprintf("%s: %.3f s now", r, last)))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, padL, staleTop+staleH+14, t0.UTC().Format("15:04:05"))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, svgW-padR, staleTop+staleH+14, t1.UTC().Format("15:04:05"))
	} else {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#6b7585">nothing merged from another region yet</text>`, padL+8, staleTop+staleH/2)
	}
	b.WriteString(`</svg>`)
	return b.String()
}
