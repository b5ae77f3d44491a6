package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

// reloaders fans SIGHUP out to every part of the node that can reload its
// files (TLS certificates, auth tokens, rules, gossip keys): one
// signal.Notify, one goroutine, each registered func called in turn.
//
// A reload func must keep what it had when it fails: the node keeps serving
// with the old certificates, tokens or rules, logs the error and counts it
// in rlcluster_reloads_total{what,result="error"}.
//
// The zero value is not usable; use newReloaders. Safe for concurrent use.
type reloaders struct {
	log   *slog.Logger
	count *prometheus.CounterVec

	mu  sync.Mutex
	fns []reloadFunc
}

type reloadFunc struct {
	what string
	fn   func() error
}

func newReloaders(log *slog.Logger, reg prometheus.Registerer) (*reloaders, error) {
	r := &reloaders{
		log: log,
		count: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rlcluster_reloads_total",
			Help: "Reloads of files on SIGHUP, by what was reloaded and result (ok, error); a failed reload keeps the previous contents.",
		}, []string{"what", "result"}),
	}
	if err := reg.Register(r.count); err != nil {
		return nil, err
	}
	return r, nil
}

// add registers fn, called on every SIGHUP under the name what (for logs
// and metrics).
func (r *reloaders) add(what string, fn func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fns = append(r.fns, reloadFunc{what, fn})
	r.count.WithLabelValues(what, "ok")
	r.count.WithLabelValues(what, "error")
}

// reload calls every registered func, logging and counting each result,
// and reports how many failed.
func (r *reloaders) reload() (failed int) {
	r.mu.Lock()
	fns := append([]reloadFunc(nil), r.fns...)
	r.mu.Unlock()
	for _, f := range fns {
		if err := f.fn(); err != nil {
			failed++
			r.count.WithLabelValues(f.what, "error").Inc()
			r.log.Error("reload failed: keeping the previous "+f.what, "what", f.what, "err", err)
			continue
		}
		r.count.WithLabelValues(f.what, "ok").Inc()
		r.log.Info("reloaded", "what", f.what)
	}
	return failed
}

// watch reloads on every SIGHUP until ctx is done. It returns at once;
// SIGHUP stops terminating the process from the moment it is called.
func (r *reloaders) watch(ctx context.Context) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				r.log.Info("SIGHUP: reloading")
				r.reload()
			}
		}
	}()
}
