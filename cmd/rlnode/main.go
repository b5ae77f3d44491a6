// Command rlnode runs one rlcluster node: the rate-limit API (Connect, gRPC
// and gRPC-Web on one port, over HTTP/1.1 and h2c) in front of the region's
// store, Redis or in memory, and, with --gossip-addr, a member of the
// multi-region gossip pool that replicates counts between regions.
//
// Run `rlnode -help` for the flags; each has an RLNODE_<FLAG> environment
// fallback.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/auth"
	"github.com/rlcluster/rlcluster/internal/api/deadline"
	"github.com/rlcluster/rlcluster/internal/api/grpcserve"
	"github.com/rlcluster/rlcluster/internal/api/h2work"
	"github.com/rlcluster/rlcluster/internal/gctune"
	"github.com/rlcluster/rlcluster/internal/gossip"
	"github.com/rlcluster/rlcluster/internal/guard"
	"github.com/rlcluster/rlcluster/internal/region"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "rlnode: %v\n", err)
		os.Exit(1)
	}
}

// run runs a node until ctx is done or the process gets SIGTERM or SIGINT,
// then drains in-flight requests and returns nil. stdout receives -help's
// text; stderr receives the logs.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runWithClock(ctx, args, getenv, stdout, stderr, time.Now)
}

// runWithClock is run with now as the clock of every decision, of the
// failover and of gossip (without --redis-clock=false, Redis's TIME
// still picks a counter decision's bucket).
func runWithClock(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, now func() time.Time) (err error) {
	if len(args) > 0 && args[0] == "validate" {
		return validate(args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "reset" {
		return reset(ctx, args[1:], getenv, stdout, stderr)
	}
	c, err := parseConfig(args, getenv, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	sec := c.secrets()
	defer func() { err = sec.scrubErr(err) }()
	if err != nil {
		return err
	}
	log := newLogger(c, stderr, sec)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	defer tuneGC(ctx, &c, getenv, log)()

	store, err := openStore(ctx, c, log, now)
	if err != nil {
		return err
	}
	defer store.Close()
	storeName := store.String()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The store's layers' metrics (keys held and evicted, failover mode,
	// deny cache) and Redis's key count and memory, read on each scrape.
	reg.MustRegister(store.Collectors()...)
	if store.Redis != nil {
		reg.MustRegister(store.Redis.InfoCollector(region.DefaultInfoTimeout))
	}
	reload, err := newReloaders(log, reg)
	if err != nil {
		return err
	}
	reload.watch(ctx) // from here on SIGHUP reloads what is registered
	tokens, err := authTokens(c, sec, reload, reg)
	if err != nil {
		return err
	}
	ruleFiles, err := loadRules(c, log, reg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	ln, capped, err := capConns(ln, c, tokens != nil, "api", reg)
	if err != nil {
		return err
	}
	// net/http sets the server's timeouts on a connection several times
	// per request: the listener holds those far ahead (package deadline).
	dl := deadline.NewListener(ln)
	defer dl.Close()
	ln = dl

	// Gossip starts before the API serves, so that the first admitted
	// decision already has somewhere to go; joining happens in the
	// background and never blocks the start.
	var node *gossip.Node
	var acc *gossip.Accuracy // admitted/limit of closed buckets, with gossip
	gcfg := c.gossipSettings()
	if c.GossipAddr != "" {
		gcfg.APIAddr, gcfg.Now, gcfg.Logger = advertisedAPI(ln.Addr().String(), c), now, log
		if gcfg.SecretKeys, err = gossipKeys(c, sec); err != nil {
			return err
		}
		if store.Redis != nil {
			gcfg.Epoch = store.Redis.Epoch // a Redis that lost its counts is repaired from its peers
		} else {
			gcfg.OwnStore = true // each node on the in-memory store counts as a replica of its own
		}
		// The Stack: gossip merges through its outer layer and restores a
		// lost region's own counts into Redis (or memory) directly.
		if node, err = gossip.New(gcfg, store); err != nil {
			return gossipStartErr(err)
		}
		if store.Redis != nil {
			// Scripts gone: Redis may have lost its counts too. Read its
			// epoch before the refused decisions run again.
			store.Redis.OnReload(node.CheckEpoch)
			defer store.Redis.OnReload(nil)
		}
		// Leave the pool on every return path; the normal path below closes
		// it first, after draining, and this call is then a no-op.
		defer func() { _ = node.Close(context.Background()) }()
		reg.MustRegister(node.Collectors()...)
		watchGossipKeys(c, sec, node, reload)
		if acc, err = gossip.NewAccuracy(node, gossip.AccuracyConfig{}); err != nil {
			return fmt.Errorf("start gossip: %w", err)
		}
		reg.MustRegister(acc.Collectors()...)
	}

	acfg := c.apiConfig()
	acfg.Store, acfg.Failover = store, store.Failover
	acfg.Now, acfg.Logger, acfg.Registerer = now, log, reg
	acfg.RequireAdmin = tokens != nil // Reset needs a token with the admin scope
	if ruleFiles != nil {
		acfg.Rules = ruleFiles.Rules()
	}
	if node != nil {
		acfg.Pool = node // the decision path's one seam to the other regions
		acfg.Cluster = cluster{node}
		acfg.Watcher = watcher{acc}
		acfg.ReadyChecks = append(acfg.ReadyChecks, gossipReady(node, c.BurstGuard, now))
		if c.BurstGuard {
			acfg.Guard = guard.New(guard.Config{Floor: c.BurstGuardFloor})
			node.ExchangeDemand(acfg.Guard)
		}
	}
	h, err := api.NewHandler(acfg)
	if err != nil {
		return err
	}
	watchRules(ctx, ruleFiles, h, reload)

	var inner http.Handler = h
	if tokens != nil {
		inner = markAuthenticated(c, capped, h)
	}
	srv := newHTTPServer(protect(c, tokens, inner), log)
	srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: c.MaxStreams}
	if capped != nil {
		srv.ConnState = capped.ConnState
	}
	if err := serveTLS(c, srv, reload); err != nil {
		return err
	}
	gs, gln, err := newGRPCServer(c, h, tokens, srv.TLSConfig, reg)
	if err != nil {
		return err
	}
	if gln != nil {
		defer gln.Close()
	}
	attrs := []any{"addr", ln.Addr().String(), "region", c.Region, "store", storeName,
		"tls", srv.TLSConfig != nil, "mtls", c.TLSClientCA != "", "auth", tokens != nil}
	if gln != nil {
		attrs = append(attrs, "grpc", gln.Addr().String())
	}
	if node != nil {
		attrs = append(attrs, "gossip", node.Addr(), "node", node.Name(), "join", gcfg.Join, "encrypted", node.Encrypted())
	} else {
		attrs = append(attrs, "gossip", "off")
	}
	log.Info("rlnode listening", attrs...)

	serveErr := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
			return
		}
		serveErr <- srv.Serve(ln)
	}()
	grpcErr := make(chan error, 1)
	if gs != nil {
		go func() { grpcErr <- gs.Serve(gln) }()
	}
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case err := <-grpcErr:
		return err
	case <-ctx.Done():
	}

	log.Info("shutting down: draining in-flight requests", "timeout", c.ShutdownTimeout)
	h.SetServing(false)
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	grpcDrained := make(chan bool, 1)
	if gs != nil {
		gs.SetServing(false)
		go func() { grpcDrained <- gs.Stop(sctx) }()
	}
	if err := srv.Shutdown(sctx); err != nil {
		// Requests still running at the deadline (or clients that opened a
		// connection and sent nothing) are cut off; leaving the pool below
		// still sends every total that was admitted.
		log.Warn("drain timed out, closing the remaining connections", "timeout", c.ShutdownTimeout, "err", err)
		_ = srv.Close()
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	if gs != nil {
		if !<-grpcDrained {
			log.Warn("gRPC drain timed out, closed the remaining connections", "timeout", c.ShutdownTimeout)
		}
		if err := <-grpcErr; err != nil {
			return err
		}
	}
	if node != nil {
		// The drain may have used up sctx: leaving gets its own bound.
		var lcancel context.CancelFunc
		sctx, lcancel = context.WithTimeout(context.Background(), c.ShutdownTimeout)
		defer lcancel()
		// Every admitted request has answered: send the last totals to the
		// other regions, hand the buckets awaiting reconciliation to this
		// region's other nodes and leave the pool.
		log.Info("leaving the gossip pool")
		if err := node.Close(sctx); err != nil {
			log.Warn("leave gossip pool", "err", err)
		}
	}
	log.Info("stopped")
	return nil
}

// openStore opens the store c names (region.Open: Redis behind a failover
// that decides under --on-store-failure while Redis is unavailable, and
// the deny cache; or the in-memory store). A Redis that does not answer at
// start does not stop the node: it decides under the failure policy and
// connects in the background. go-redis's own log lines go to log; the
// failover reads the clock now.
func openStore(ctx context.Context, c config, log *slog.Logger, now func() time.Time) (*region.Stack, error) {
	cfg := c.storeConfig()
	cfg.Logger = log
	if c.RedisURL != "" {
		var err error
		if cfg.Redis.TLSConfig, err = redisTLS(c); err != nil {
			return nil, err
		}
		cfg.Failover.Now = now
		region.SetRedisLogger(log)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return region.Open(sctx, cfg)
}

// Bounds of the API's HTTP server, suited to unary calls, whose request
// is at most --max-request-bytes and whose answer takes milliseconds: a
// request (headers and body) must arrive within httpReadTimeout and its
// answer be written within httpWriteTimeout, each per HTTP/2 stream.
// Over HTTP/1.1 each may fire up to deadline.Tick late (package deadline).
// Streaming calls (server reflection) lift both for themselves (see
// api.Server.ServeHTTP).
const (
	httpReadHeaderTimeout = 10 * time.Second
	httpReadTimeout       = 15 * time.Second
	httpWriteTimeout      = 30 * time.Second
	httpIdleTimeout       = 2 * time.Minute
	httpMaxHeaderBytes    = 64 << 10
	// defaultMaxStreams is --max-streams's default: HTTP/2 streams one
	// connection may have open, each a request of up to
	// --max-request-bytes in memory.
	defaultMaxStreams = 32
)

// newGRPCServer returns the grpc-go server of --grpc-listen and its
// listener (nil, nil without the flag), with the API's tokens, open paths,
// TLS config (nil: plaintext) and bounds.
func newGRPCServer(c config, h *api.Server, tokens *auth.Tokens, tc *tls.Config, reg prometheus.Registerer) (*grpcserve.Server, net.Listener, error) {
	if c.GRPCListen == "" {
		return nil, nil, nil
	}
	ln, err := net.Listen("tcp", c.GRPCListen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen --grpc-listen: %w", err)
	}
	ln, capped, err := capConns(ln, c, tokens != nil, "grpc", reg)
	if err != nil {
		return nil, nil, err
	}
	gcfg := grpcserve.Config{API: h, TLS: tc, MaxRequestBytes: c.MaxRequestBytes, IdleTimeout: httpIdleTimeout,
		MaxStreams: uint32(c.MaxStreams), StreamTimeout: c.StreamTimeout}
	if capped != nil {
		gcfg.Conns = capped
	}
	if tokens != nil {
		gcfg.Tokens, gcfg.OpenPaths = tokens, openPaths(c)
	}
	gs, err := grpcserve.New(gcfg)
	if err != nil {
		_ = ln.Close()
		return nil, nil, err
	}
	return gs, ln, nil
}

// h2Workers is how many goroutines serve HTTP/2 requests on --listen,
// reused from request to request (package h2work), as grpc-go's stream
// workers serve --grpc-listen.
func h2Workers() int { return max(64, 16*runtime.GOMAXPROCS(0)) }

// newHTTPServer serves h over HTTP/1.1 and unencrypted HTTP/2 (h2c), which
// gRPC clients need without TLS.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h2work.New(h, h2Workers(), 0),
		Protocols:         &p,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// tuneGC paces the garbage collector by --gc-headroom (see package gctune)
// until ctx ends or the returned func is called, which waits for the GC
// percent to be restored. With GOGC set, the runtime's pacing stands.
func tuneGC(ctx context.Context, c *config, getenv func(string) string, log *slog.Logger) func() {
	if c.GCHeadroomMiB == 0 {
		return func() {}
	}
	if v := getenv("GOGC"); v != "" {
		log.Info("GOGC is set: --gc-headroom left alone", "GOGC", v, "gc_headroom_mib", c.GCHeadroomMiB)
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		gctune.Run(ctx, gctune.Config{Headroom: uint64(c.GCHeadroomMiB) << 20})
	}()
	return func() {
		cancel()
		<-done
	}
}
