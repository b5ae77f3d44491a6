package main

import (
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/connlimit"
)

// capConns caps the connections ln keeps open at --max-connections (nil,
// ln unchanged, without the flag), so that idle and slow clients cannot
// hold the cap (see package connlimit): with authentication on,
// connections none of whose requests carried a valid token may hold at
// most half of it. Its counters are exported under the listener's name
// (api, grpc).
func capConns(ln net.Listener, c config, authOn bool, name string, reg prometheus.Registerer) (net.Listener, *connlimit.Listener, error) {
	if c.MaxConnections == 0 {
		return ln, nil, nil
	}
	cfg := connlimit.Config{Max: c.MaxConnections}
	if authOn {
		cfg.UnauthShare = max(1, c.MaxConnections/2)
	}
	cl, err := connlimit.New(ln, cfg)
	if err != nil {
		return nil, nil, err
	}
	labels := prometheus.Labels{"listener": name}
	for _, m := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rlcluster_connections_open", ConstLabels: labels,
			Help: "Connections open on the listener (api: --listen, grpc: --grpc-listen), counted against --max-connections."},
			func() float64 { return float64(cl.Stats().Open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rlcluster_connections_reclaimed_total", ConstLabels: labels,
			Help: "Connections closed to make room for a new one at --max-connections, or for idling while the listener was near it."},
			func() float64 { return float64(cl.Stats().Reclaimed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rlcluster_connections_refused_total", ConstLabels: labels,
			Help: "New connections closed at once at --max-connections, every open one having a request in flight."},
			func() float64 { return float64(cl.Stats().Refused) }),
	} {
		if err := reg.Register(m); err != nil {
			return nil, nil, fmt.Errorf("register connection metrics: %w", err)
		}
	}
	return cl, cl, nil
}

// markAuthenticated tells cl (when set) of each request that reached h
// with a valid token, that is every request to a path outside
// --auth-open-paths when h sits behind auth.RequireBearer.
func markAuthenticated(c config, cl *connlimit.Listener, h http.Handler) http.Handler {
	if cl == nil {
		return h
	}
	open := auth.OpenPaths(openPaths(c))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !open(r.URL.Path) {
			cl.Authenticated(r.RemoteAddr)
		}
		h.ServeHTTP(w, r)
	})
}
