package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/loadtest/internal/rlbuild"
)

// The peers -peers measures beside the node, built from their modules at
// these versions (envoyproxy/ratelimit tags no releases as modules: the
// pseudo-version is its main branch of 2026-01-22; gubernator v2.13.0 is
// the newest that builds with this Go).
const (
	peerRatelimitModule    = "github.com/envoyproxy/ratelimit/src/service_cmd"
	peerRatelimitVersion   = "v1.4.1-0.20260122083618-3fb702589d36"
	peerGubernatorModule   = "github.com/gubernator-io/gubernator/v2/cmd/gubernator"
	peerGubernatorVersion  = "v2.13.0"
	storePeerRatelimit     = "envoyproxy-ratelimit"
	storePeerGubernator    = "gubernator"
	peerRatelimitJSONPath  = "/json"
	peerGubernatorJSONPath = "/v1/GetRateLimits"
)

// isNode reports whether store names an rlnode row (whose /metrics the
// bench reads), not a ceiling or a peer.
func isNode(store string) bool { return store == "redis" || store == "memory" }

// isPeer reports whether store names a peer's row.
func isPeer(store string) bool { return store == storePeerRatelimit || store == storePeerGubernator }

// buildPeers installs the peers' commands into dir (GOBIN), or reuses
// them when dir holds them already; it returns their paths.
func buildPeers(ctx context.Context, dir string, out io.Writer) (ratelimit, gubernator string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	for _, p := range []struct{ module, version, bin string }{
		{peerRatelimitModule, peerRatelimitVersion, "service_cmd"},
		{peerGubernatorModule, peerGubernatorVersion, "gubernator"},
	} {
		if _, err := os.Stat(filepath.Join(dir, p.bin)); err == nil {
			continue
		}
		fmt.Fprintf(out, "building %s@%s ...\n", p.module, p.version)
		cmd := exec.CommandContext(ctx, "go", "install", p.module+"@"+p.version)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go install %s@%s: %w: %.500s", p.module, p.version, err, b)
		}
	}
	return filepath.Join(dir, "service_cmd"), filepath.Join(dir, "gubernator"), nil
}

// NewPeerRatelimitJSON makes envoyproxy/ratelimit's /json requests over
// the 10k values of the "user" descriptor, all allowed.
func NewPeerRatelimitJSON(prefix string) *Workload {
	w := &Workload{Name: "uniform10k", PerCall: 1, Path: peerRatelimitJSONPath}
	for i := range uniformKeys {
		w.json = append(w.json, fmt.Appendf(nil, `{"domain":%q,"descriptors":[{"entries":[{"key":"user","value":"%s-u%d"}]}]}`, envoyDomain, prefix, i))
	}
	return w
}

// NewPeerGubernatorJSON makes gubernator's GetRateLimits requests over
// 10k keys, all allowed.
func NewPeerGubernatorJSON(prefix string) *Workload {
	w := &Workload{Name: "uniform10k", PerCall: 1, Path: peerGubernatorJSONPath}
	for i := range uniformKeys {
		w.json = append(w.json, fmt.Appendf(nil, `{"requests":[{"name":"bench","unique_key":"%s-u%d","hits":1,"limit":%d,"duration":60000}]}`, prefix, i, highLimit))
	}
	return w
}

// peers measures envoyproxy/ratelimit (on the run's Redis) and gubernator
// (in memory) on the rows the table compares: Envoy's RLS over
// 10k keys and a hot key, and JSON over 10k keys.
func (h *harness) peers(ctx context.Context, redisAddr string) error {
	rl, gub, err := buildPeers(ctx, h.cfg.PeerDir, h.out)
	if err != nil {
		return err
	}
	if redisAddr != "" {
		if err := h.peerRatelimit(ctx, rl, redisAddr); err != nil {
			return err
		}
	}
	return h.peerGubernator(ctx, gub)
}

func (h *harness) peerRatelimit(ctx context.Context, bin, redisAddr string) error {
	root := filepath.Join(h.procs.Dir, "ratelimit-runtime")
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(envoyRules), 0o600); err != nil {
		return err
	}
	ports, err := rlbuild.FreePorts(3)
	if err != nil {
		return err
	}
	env := []string{"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT=" + strconv.Itoa(ports[0]), "GRPC_PORT=" + strconv.Itoa(ports[1]), "DEBUG_PORT=" + strconv.Itoa(ports[2])}
	pr, err := h.procs.Start(storePeerRatelimit, bin, env)
	if err != nil {
		return err
	}
	defer pr.Stop()
	tg := target{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), envoyBase: "http://127.0.0.1:" + strconv.Itoa(ports[1]), pid: []int{pr.Pid(), h.redisPID}}
	if err := pr.WaitReady(ctx, 20*time.Second, func() error { return probeEnvoy(ctx, tg.envoyBase) }); err != nil {
		return fmt.Errorf("start envoyproxy/ratelimit: %w: %s", err, pr.Tail())
	}
	for _, r := range []planRow{{"uniform10k", modeClose, protoEnvoy}, {"hotkey", modeClose, protoEnvoy}, {"uniform10k", modeClose, protoJSON}} {
		if err := h.row(ctx, tg, storePeerRatelimit, r, redisAddr); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) peerGubernator(ctx context.Context, bin string) error {
	ports, err := rlbuild.FreePorts(2)
	if err != nil {
		return err
	}
	httpAddr, grpcAddr := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	// A cluster of one: no peer discovery.
	env := []string{"OTEL_TRACES_EXPORTER=none", "GUBER_HTTP_ADDRESS=" + httpAddr, "GUBER_GRPC_ADDRESS=" + grpcAddr,
		"GUBER_ADVERTISE_ADDRESS=" + grpcAddr, "GUBER_PEER_DISCOVERY_TYPE=none", "GUBER_LOG_LEVEL=error"}
	pr, err := h.procs.Start(storePeerGubernator, bin, env)
	if err != nil {
		return err
	}
	defer pr.Stop()
	tg := target{base: "http://" + httpAddr, pid: []int{pr.Pid()}}
	probe := func() error {
		body := strings.NewReader(`{"requests":[{"name":"bench","unique_key":"probe","hits":1,"limit":10,"duration":60000}]}`)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.base+peerGubernatorJSONPath, body)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "UNDER_LIMIT") {
			return fmt.Errorf("gubernator probe: status %d: %.200s", resp.StatusCode, b)
		}
		return nil
	}
	if err := pr.WaitReady(ctx, 20*time.Second, probe); err != nil {
		return fmt.Errorf("start gubernator: %w: %s", err, pr.Tail())
	}
	return h.row(ctx, tg, storePeerGubernator, planRow{"uniform10k", modeClose, protoJSON}, "")
}
