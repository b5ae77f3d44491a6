// Package redistest starts real redis-server processes for tests: a
// standalone server or a Redis Cluster, each on free loopback ports, stopped
// when the test ends.
//
// When redis-server is not installed the test is skipped, unless the
// environment sets RLCLUSTER_REQUIRE_REDIS=1 (as CI does), in which case it
// fails.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlcluster/rlcluster/internal/porttest"
)

// Server is a running redis-server.
type Server struct {
	Addr string // host:port
	cmd  *exec.Cmd
	dir  string
	args []string
}

// URL returns the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Bin returns the path of the named binary (redis-server, redis-cli), or
// skips or fails t when it is not installed.
func Bin(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		for _, d := range []string{"/usr/bin", "/usr/local/bin", "/usr/sbin"} {
			if _, serr := os.Stat(filepath.Join(d, name)); serr == nil {
				return filepath.Join(d, name)
			}
		}
		if os.Getenv("RLCLUSTER_REQUIRE_REDIS") == "1" {
			t.Fatalf("%s not found and RLCLUSTER_REQUIRE_REDIS=1: %v", name, err)
		}
		t.Skipf("%s not installed (set RLCLUSTER_REQUIRE_REDIS=1 to fail instead): %v", name, err)
	}
	return p
}

// Start starts a standalone redis-server with no persistence and returns it;
// it is stopped when t ends. Extra arguments are passed to redis-server.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := Bin(t, "redis-server")
	dir := t.TempDir()
	var lastErr error
	for try := 0; try < 5; try++ {
		// Below the ephemeral range: Restart needs the port back.
		port := porttest.Steady(t)
		s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
		s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "no"}, extra...)
		if lastErr = s.start(bin); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

func (s *Server) start(bin string) error {
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.Dir = s.dir
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: %w", bin, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := Ping(s.Addr); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("redis-server on %s did not answer PING in 10s", s.Addr)
}

// Stop kills the server. It is safe to call more than once.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Pause stops the server's process (SIGSTOP): connections stay open and
// commands hang, as with a stalled or partitioned Redis. Resume or Stop
// ends it.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, "pause", syscall.SIGSTOP)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, "resume", syscall.SIGCONT)
}

// signal sends sig to the running server, failing t (named by what) when
// it is not running or the signal cannot be sent.
func (s *Server) signal(t testing.TB, what string, sig syscall.Signal) {
	t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		t.Fatalf("%s redis-server on %s: not running", what, s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s redis-server on %s: %v", what, s.Addr, err)
	}
}

// Restart starts a stopped server again on the same address (its data is
// gone, as with a crash of a server without persistence).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.start(Bin(t, "redis-server")); err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
}

// Ping sends a PING in RESP to addr and waits up to a second for PONG (or
// NOAUTH, from a server that requires a password).
func Ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	// A server that requires a password answers -NOAUTH: it is up.
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// Cluster is a running Redis Cluster of three masters.
type Cluster struct {
	Addrs   []string
	servers []*Server
}

// URL returns a redis:// URL naming every master; the region package's URL
// parser turns several addr parameters into a cluster client.
func (c *Cluster) URL() string {
	u := "redis://" + c.Addrs[0] + "?cluster=true"
	for _, a := range c.Addrs[1:] {
		u += "&addr=" + a
	}
	return u
}

// StartCluster starts three cluster-enabled redis-servers, joins them with
// redis-cli --cluster create and waits until the cluster is ok.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	cli := Bin(t, "redis-cli")
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i),
			"--cluster-node-timeout", "2000")
		c.servers = append(c.servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// Every node must see the cluster ok (not only the first), or a command
	// sent to a slower node answers CLUSTERDOWN.
	for ctx.Err() == nil {
		ok := true
		for _, a := range c.Addrs {
			host, port, _ := net.SplitHostPort(a)
			out, _ := exec.CommandContext(ctx, cli, "-h", host, "-p", port, "cluster", "info").Output()
			if !strings.Contains(string(out), "cluster_state:ok") {
				ok = false
				break
			}
		}
		if ok {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redis cluster on %v did not reach cluster_state:ok", c.Addrs)
	return nil
}

// StartSentinel starts a redis-server in Sentinel mode that monitors master
// under the name "mymaster" with a quorum of 1, and waits until it answers
// with the master's address; it is stopped when t ends.
func StartSentinel(t testing.TB, master *Server) *Server {
	t.Helper()
	bin := Bin(t, "redis-server")
	dir := t.TempDir()
	host, mport, _ := net.SplitHostPort(master.Addr)
	port := porttest.Free(t)
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor mymaster %s %s 1\n", port, dir, host, mport)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatalf("write sentinel config: %v", err)
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, args: []string{conf, "--sentinel"}}
	if err := s.start(bin); err != nil {
		t.Fatalf("start sentinel: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// ResetStats resets the statistics of the Redis at addr (CONFIG RESETSTAT),
// so that INFO counts from now on.
func ResetStats(t testing.TB, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// EvalshaCalls returns how many EVALSHA calls the Redis at addr has run
// since its statistics were reset, from INFO commandstats.
func EvalshaCalls(t testing.TB, addr string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := evalshaRE.FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var evalshaRE = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),`)
