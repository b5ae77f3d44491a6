//go:build pprof

package main

import (
	"log"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux
	"os"
)

// A node built with -tags pprof serves /debug/pprof on RLCLUSTER_PPROF_LISTEN
// (a loopback host:port), for profiling under load (loadtest/bench's
// -profile-url). Release builds leave it out.
func init() {
	addr := os.Getenv("RLCLUSTER_PPROF_LISTEN")
	if addr == "" {
		return
	}
	go func() {
		srv := &http.Server{Addr: addr}
		if err := srv.ListenAndServe(); err != nil {
			log.Printf("pprof listener %s: %v", addr, err)
		}
	}()
}
