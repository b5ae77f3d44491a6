package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/loadtest/internal/procs"
)

// profiled reports whether row r against store gets a CPU profile: the
// closed-loop single-decision rows over Connect JSON and Envoy's RLS,
// ceilings included.
func profiled(store string, r planRow) bool {
	return r.Mode == modeClose && (r.Protocol == protoJSON || r.Protocol == protoBinary || r.Protocol == protoEnvoy) && r.Workload != "batch10"
}

// startProfile records a CPU profile of the server over the measured run
// of a profiled row, when -profile is set: from the node's /debug/pprof if
// it serves one, else with perf record (software cpu-clock event, frame-
// pointer call graphs) on the server's process and its Redis. The channel
// yields a message for the log.
func (h *harness) startProfile(ctx context.Context, tg target, store string, r planRow) <-chan string {
	if h.cfg.Profile == "" || h.inPair || !profiled(store, r) {
		return nil
	}
	if err := os.MkdirAll(h.cfg.Profile, 0o755); err != nil {
		ch := make(chan string, 1)
		ch <- err.Error()
		return ch
	}
	secs := max(int(h.cfg.Duration.Seconds())-1, 1)
	name := fmt.Sprintf("%s-%s-%s", store, r.Protocol, r.Workload)
	base := tg.base
	if h.cfg.ProfileURL != "" {
		base = strings.TrimRight(h.cfg.ProfileURL, "/")
	}
	if store != "ceiling" && !h.noPprof {
		if servesPprof(ctx, base) {
			return h.pprof(ctx, base, filepath.Join(h.cfg.Profile, name+".pprof"), secs)
		}
		h.noPprof = true
		fmt.Fprintln(h.out, "  profile: rlnode serves no /debug/pprof; using perf record")
	}
	return h.perf(ctx, tg.pid, filepath.Join(h.cfg.Profile, name), secs)
}

// servesPprof reports whether base serves /debug/pprof.
func servesPprof(ctx context.Context, base string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return procs.HTTPOK(ctx, base+"/debug/pprof/cmdline")() == nil
}

func (h *harness) pprof(ctx context.Context, base, path string, secs int) <-chan string {
	ch := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+10)*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- "fetch: " + err.Error()
			return
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		if resp.StatusCode != http.StatusOK {
			ch <- fmt.Sprintf("/debug/pprof/profile: status %d", resp.StatusCode)
			return
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			ch <- err.Error()
			return
		}
		ch <- "wrote " + path
	}()
	return ch
}

// perf records pids for secs seconds into prefix.perf.data and writes two
// text reports beside it: prefix.self.txt (self time by command, object
// and symbol) and prefix.children.txt (time including callees, by symbol).
// The reports are written while the profiled binaries still exist.
func (h *harness) perf(ctx context.Context, pids []int, prefix string, secs int) <-chan string {
	ch := make(chan string, 1)
	bin, err := exec.LookPath("perf")
	if err != nil || len(pids) == 0 {
		ch <- "no perf on PATH (or no process): no profile"
		return ch
	}
	ps := make([]string, len(pids))
	for i, p := range pids {
		ps[i] = strconv.Itoa(p)
	}
	data := prefix + ".perf.data"
	go func() {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+30)*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, "record", "-q", "-e", "cpu-clock", "-F", "1999", "-g",
			"-p", strings.Join(ps, ","), "-o", data, "--", "sleep", strconv.Itoa(secs)).CombinedOutput()
		if err != nil {
			ch <- fmt.Sprintf("perf record: %v: %.300s", err, out)
			return
		}
		reports := []struct {
			suffix string
			args   []string
		}{
			{".self.txt", []string{"--no-children", "--sort", "comm,dso,sym", "--percent-limit", "0.3"}},
			{".children.txt", []string{"--children", "--sort", "sym", "--percent-limit", "1"}},
		}
		for _, r := range reports {
			args := append([]string{"report", "-i", data, "--stdio", "-g", "none"}, r.args...)
			out, err := exec.CommandContext(ctx, bin, args...).Output()
			if err != nil {
				ch <- fmt.Sprintf("perf report: %v", err)
				return
			}
			if err := os.WriteFile(prefix+r.suffix, out, 0o644); err != nil {
				ch <- err.Error()
				return
			}
		}
		ch <- "wrote " + data + " and " + prefix + ".{self,children}.txt"
	}()
	return ch
}
