package rules

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultReloadInterval is how often a [Reloader] looks at its files.
const DefaultReloadInterval = time.Second

// ReloaderConfig configures a [Reloader]. Zero fields mean the documented
// default.
type ReloaderConfig struct {
	// Path is the rules file or directory, as [Load] reads it.
	// Required.
	Path string
	// Interval is how often Run looks for changes; default 1s. A negative
	// Interval turns polling off: Run returns at once (Reload still works).
	Interval time.Duration
	// MaxRules, when positive, rejects a configuration with more rules
	// than this, at start and on every reload.
	MaxRules int
	// Logger receives a line for every reload, applied or rejected;
	// default discards.
	Logger *slog.Logger
	// Registerer, when set, receives rlcluster_rules_reloads_total{result}
	// (result "applied" or "rejected") and
	// rlcluster_rules_last_applied_timestamp_seconds.
	Registerer prometheus.Registerer
}

// Reloader keeps a set of rules current with the files it was loaded
// from. Run polls the files every Interval and reloads when their
// contents have changed and then stayed the same for one more interval
// (so a file caught half-written is not reported as an error); Reload
// reloads at once (on SIGHUP, say). A valid new set is handed to the
// apply function, which swaps it in atomically (the API server's SetRules); an
// invalid one is logged, counted as rejected, and the rules in use stay.
//
// A Reloader is safe for concurrent use; reloads are serialized.
type Reloader struct {
	cfg      ReloaderConfig
	reloads  *prometheus.CounterVec
	lastOK   prometheus.Gauge
	mu       sync.Mutex
	rules    *Set
	applied  [sha256.Size]byte // fingerprint of the files last loaded or rejected
	lastSeen [sha256.Size]byte // fingerprint at the previous poll
}

// NewReloader loads the rules at cfg.Path and returns a Reloader holding
// them. An invalid configuration is an error listing every problem.
func NewReloader(cfg ReloaderConfig) (*Reloader, error) {
	if cfg.Path == "" {
		return nil, errors.New("api: ReloaderConfig.Path is required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultReloadInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{
		cfg: cfg,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rlcluster_rules_reloads_total",
			Help: "Reloads of the rules files, by result: applied, or rejected because the new files are invalid (the rules in use stay).",
		}, []string{"result"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rlcluster_rules_last_applied_timestamp_seconds",
			Help: "When the rules in use were loaded, in Unix seconds.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{r.reloads, r.lastOK} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("api: register reload metrics: %w", err)
			}
		}
	}
	fp := fingerprint(cfg.Path)
	rs, err := LoadMax(cfg.Path, cfg.MaxRules)
	if err != nil {
		return nil, err
	}
	r.rules, r.applied, r.lastSeen = rs, fp, fp
	r.lastOK.SetToCurrentTime()
	r.reloads.WithLabelValues("applied")
	r.reloads.WithLabelValues("rejected")
	return r, nil
}

// Rules returns the rules last applied.
func (r *Reloader) Rules() *Set {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rules
}

// Reload loads the files now. When they are valid it calls apply with the
// new rules and returns nil; otherwise it returns the problems and leaves
// the rules in use alone.
func (r *Reloader) Reload(apply func(*Set)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	fp := fingerprint(r.cfg.Path)
	r.lastSeen = fp
	return r.load(fp, apply, "reload")
}

// load loads the files, whose fingerprint is fp. r.mu is held.
func (r *Reloader) load(fp [sha256.Size]byte, apply func(*Set), why string) error {
	r.applied = fp
	rs, err := LoadMax(r.cfg.Path, r.cfg.MaxRules)
	if err != nil {
		r.reloads.WithLabelValues("rejected").Inc()
		r.cfg.Logger.Error("rules rejected: keeping the rules in use", "path", r.cfg.Path, "trigger", why, "err", err)
		return err
	}
	r.rules = rs
	apply(rs)
	r.reloads.WithLabelValues("applied").Inc()
	r.lastOK.SetToCurrentTime()
	r.cfg.Logger.Info("rules reloaded", "path", r.cfg.Path, "trigger", why, "rules", rs.Summary())
	for _, w := range rs.Warnings() {
		r.cfg.Logger.Warn("rules: limit refused in a cluster of several regions", "path", r.cfg.Path, "warning", w)
	}
	return nil
}

// Run polls the files every Interval until ctx is done, reloading (and
// calling apply) when they have changed and then held still for one
// interval.
func (r *Reloader) Run(ctx context.Context, apply func(*Set)) {
	if r.cfg.Interval < 0 {
		return
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.poll(apply)
		}
	}
}

func (r *Reloader) poll(apply func(*Set)) {
	fp := fingerprint(r.cfg.Path)
	r.mu.Lock()
	defer r.mu.Unlock()
	stable := fp == r.lastSeen
	r.lastSeen = fp
	if stable && fp != r.applied {
		_ = r.load(fp, apply, "file change")
	}
}

// fingerprint hashes the names and contents of the files Load would
// read at path, and any error reading them, so that any change to them,
// including a file added or removed, changes the fingerprint.
func fingerprint(path string) [sha256.Size]byte {
	h := sha256.New()
	files, err := rulesFiles(path)
	if err != nil {
		fmt.Fprintf(h, "error %v\n", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(h, "file %q error %v\n", f, err)
			continue
		}
		fmt.Fprintf(h, "file %q %d\n", f, len(b))
		h.Write(b)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// LoadMax is [Load], refusing more than max rules when max > 0:
// what a node with --max-rules loads.
func LoadMax(path string, max int) (*Set, error) {
	rs, err := Load(path)
	if err != nil {
		return nil, err
	}
	if max > 0 && rs.Limits() > max {
		return nil, fmt.Errorf("%s: %d limits (rules and envoy descriptors), more than the maximum of %d (--max-rules)", path, rs.Limits(), max)
	}
	return rs, nil
}
