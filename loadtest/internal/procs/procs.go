// Package procs starts the child processes of a load harness (rlnode,
// redis-server, a ceiling server), each with its log in a file, waits
// until one is ready, and kills them all when the harness ends or dies.
package procs

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Group starts child processes and kills every one of them on Close. Each
// child is in its own process group and gets SIGKILL if the harness dies.
type Group struct {
	Dir     string // logs go here
	WorkDir string // the children's working directory; empty means this process's
	Taskset string // path of taskset; empty means no pinning
	CPU     string // the CPU list children are pinned to, for example "0"

	mu   sync.Mutex
	list []*Proc
}

// Proc is a running child process.
type Proc struct {
	Name   string
	Log    string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // valid after exited is closed
}

// Start starts bin with args, pinned when p.Taskset is set.
func (p *Group) Start(name, bin string, env []string, args ...string) (*Proc, error) {
	argv := append([]string{bin}, args...)
	if p.Taskset != "" {
		argv = append([]string{p.Taskset, "-c", p.CPU}, argv...)
	}
	logPath := filepath.Join(p.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create log for %s: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = p.WorkDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	pr := &Proc{Name: name, Log: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		pr.err = cmd.Wait()
		f.Close()
		close(pr.exited)
	}()
	p.mu.Lock()
	p.list = append(p.list, pr)
	p.mu.Unlock()
	return pr, nil
}

// Pid is the child's process id (taskset execs the program, so it is the
// program's own).
func (pr *Proc) Pid() int { return pr.cmd.Process.Pid }

// Exited reports whether the child has exited.
func (pr *Proc) Exited() bool {
	select {
	case <-pr.exited:
		return true
	default:
		return false
	}
}

// Stop kills the child's process group and waits for it.
func (pr *Proc) Stop() {
	if pr.Exited() {
		return
	}
	_ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-pr.exited:
	case <-time.After(5 * time.Second):
	}
}

// Tail returns the end of the child's log, for error messages.
func (pr *Proc) Tail() string {
	b, _ := os.ReadFile(pr.Log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// WaitReady polls ready until it succeeds, the child exits, or timeout.
func (pr *Proc) WaitReady(ctx context.Context, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if pr.Exited() {
			return fmt.Errorf("%s exited (%v): %s", pr.Name, pr.err, pr.Tail())
		}
		if err = ready(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %v: %v; log: %s", pr.Name, timeout, err, pr.Tail())
}

// Close kills every child still running.
func (p *Group) Close() {
	p.mu.Lock()
	list := p.list
	p.list = nil
	p.mu.Unlock()
	for _, pr := range list {
		pr.Stop()
	}
}

// HTTPOK returns a readiness check for WaitReady: a GET of url that must
// answer 200 OK.
func HTTPOK(ctx context.Context, url string) func() error {
	return func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}
