package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/polltest"
)

// nodeArgsEnv, when set in a test binary's environment, makes it run as
// rlnode with these arguments (a JSON list) instead of running tests, so
// that a test can measure a node in a process of its own (its memory, its
// file descriptors) without building the command first.
const nodeArgsEnv = "RLNODE_TEST_RUN_NODE_ARGS"

func TestMain(m *testing.M) {
	if v := os.Getenv(nodeArgsEnv); v != "" {
		var args []string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			fmt.Fprintf(os.Stderr, "rlnode: %s: %v\n", nodeArgsEnv, err)
			os.Exit(2)
		}
		if err := run(context.Background(), args, os.Getenv, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "rlnode: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if plain.dir != "" {
		os.RemoveAll(plain.dir)
	}
	os.Exit(code)
}

// procNode is an rlnode running in a child process (this test binary, see
// TestMain).
type procNode struct {
	cmd  *exec.Cmd
	base string // http://host:port of --listen
	grpc string // host:port of --grpc-listen, when given
	mu   sync.Mutex
	logs strings.Builder
}

// startProcNode starts a node in a child process with args and waits until
// it logs its address; t's cleanup stops it. The child is this test binary
// (see TestMain), or, when the tests run with the race detector, rlnode
// built without it, so that what is measured is what runs in production.
func startProcNode(t *testing.T, args ...string) *procNode {
	t.Helper()
	var cmd *exec.Cmd
	if raceEnabled {
		cmd = exec.Command(plainBinary(t), args...)
	} else {
		b, _ := json.Marshal(args)
		cmd = exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), nodeArgsEnv+"="+string(b))
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &procNode{cmd: cmd}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			n.mu.Lock()
			if n.logs.Len() < 1<<20 {
				n.logs.WriteString(sc.Text() + "\n")
			}
			n.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		waited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
		}
		<-done
	})
	_, ok := polltest.Poll(20*time.Second, func() bool {
		logs := n.Logs()
		m := listenRE.FindStringSubmatch(logs)
		if m == nil {
			return false
		}
		n.base = "http://" + m[1]
		if g := grpcListenRE.FindStringSubmatch(logs); g != nil {
			n.grpc = g[1]
		}
		return true
	})
	if !ok {
		t.Fatalf("node did not log its address within 20s; logs:\n%s", n.Logs())
	}
	return n
}

var plain struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// plainBinary builds rlnode without the race detector, once per test run.
func plainBinary(t *testing.T) string {
	t.Helper()
	plain.once.Do(func() {
		if plain.dir, plain.err = os.MkdirTemp("", "rlnode-plain"); plain.err != nil {
			return
		}
		plain.path = filepath.Join(plain.dir, "rlnode")
		out, err := exec.Command("go", "build", "-o", plain.path, ".").CombinedOutput()
		if err != nil {
			plain.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if plain.err != nil {
		t.Fatalf("build rlnode without -race: %v", plain.err)
	}
	return plain.path
}

// Logs returns what the node logged so far.
func (n *procNode) Logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.logs.String()
}

// memory returns the node's resident set now and its peak since the last
// resetPeak, in bytes.
func (n *procNode) memory(t *testing.T) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(n.cmd.Process.Pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		t.Fatalf("/proc/%d/status has no VmRSS or VmHWM", n.cmd.Process.Pid)
	}
	return rss, peak
}

// resetPeak resets the node's peak resident set (VmHWM) to its current one.
func (n *procNode) resetPeak(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(filepath.Join("/proc", strconv.Itoa(n.cmd.Process.Pid), "clear_refs"), []byte("5"), 0); err != nil {
		t.Fatalf("reset the node's peak memory: %v", err)
	}
}
