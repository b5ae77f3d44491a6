package api_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/rules"
	"github.com/rlcluster/rlcluster/internal/porttest"
	"github.com/rlcluster/rlcluster/internal/window"
)

// nginxBinary finds nginx with the auth_request module, or skips the test
// (fails it when RLCLUSTER_REQUIRE_NGINX=1).
func nginxBinary(t *testing.T) string {
	t.Helper()
	missing := func(why string) {
		t.Helper()
		msg := why + "; install Debian's nginx-light (apt-get install -y nginx-light) to run this test"
		if os.Getenv("RLCLUSTER_REQUIRE_NGINX") == "1" {
			t.Fatal(msg + " (RLCLUSTER_REQUIRE_NGINX=1)")
		}
		t.Skip(msg + ", or set RLCLUSTER_REQUIRE_NGINX=1 to fail instead of skipping")
	}
	bin, err := exec.LookPath("nginx")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		missing("nginx is not installed")
	}
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -V: %v\n%s", bin, err, out)
	}
	if !bytes.Contains(out, []byte("http_auth_request_module")) {
		missing(bin + " lacks the auth_request module")
	}
	return bin
}

// startNginx runs nginx in the foreground with server (a config for the
// http {} block) in a temporary prefix, waits until it accepts connections
// and stops it when t ends. It returns nginx's base URL.
func startNginx(t *testing.T, server string) string {
	t.Helper()
	bin := nginxBinary(t)
	dir := t.TempDir()
	port := porttest.Free(t)
	server = strings.ReplaceAll(server, "listen 8081;", fmt.Sprintf("listen 127.0.0.1:%d;", port))
	if err := os.WriteFile(filepath.Join(dir, "rlcluster.conf"), []byte(server), 0o644); err != nil {
		t.Fatal(err)
	}
	user := ""
	if os.Geteuid() == 0 {
		// Workers would otherwise switch to an unprivileged user that
		// cannot enter the temporary directory.
		user = "user root;"
	}
	conf := fmt.Sprintf(`%[2]s
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 64; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/rlcluster.conf;
}
`, dir, user)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	errLog := filepath.Join(dir, "error.log")
	var out bytes.Buffer
	cmd := exec.Command(bin, "-p", dir, "-c", confPath, "-e", errLog, "-g", "daemon off;")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	logs := func() string {
		b, _ := os.ReadFile(errLog)
		return out.String() + string(b)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("nginx logs:\n%s", logs())
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("nginx exited before serving: %v\n%s", err, logs())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s within 10s: %v\n%s", addr, err, logs())
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not a settle wait
	}
}

// TestNginxAuthRequest runs deploy/nginx/rlcluster.conf in a real nginx in
// front of an rlnode handler and a tiny app, and checks what a client sees.
func TestNginxAuthRequest(t *testing.T) {
	example, err := os.ReadFile("../../deploy/nginx/rlcluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rules.New([]rules.Rule{{Name: "api", Limit: window.Limit{Limit: 2, Window: time.Minute, Algorithm: window.FixedWindow}}})
	if err != nil {
		t.Fatal(err)
	}
	node := newServer(t, api.Config{Rules: rs})
	var appHits atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		appHits.Add(1)
		fmt.Fprintln(w, "hello from app")
	}))
	t.Cleanup(app.Close)

	conf := string(example)
	for _, r := range []struct{ old, new string }{
		{"server rlnode:8080;", "server " + hostPort(t, node.URL) + ";"},
		{"server app:8000;", "server " + hostPort(t, app.URL) + ";"},
	} {
		if !strings.Contains(conf, r.old) {
			t.Fatalf("deploy/nginx/rlcluster.conf lacks %q", r.old)
		}
		conf = strings.ReplaceAll(conf, r.old, r.new)
	}
	if !strings.Contains(conf, "listen 8081;") {
		t.Fatal(`deploy/nginx/rlcluster.conf lacks "listen 8081;"`)
	}
	base := startNginx(t, conf)

	// The clock is fixed at 30 s into the minute, so a fixed window's
	// bucket ends in 30 s. The client's own X-Forwarded-For is ignored:
	// nginx sends $remote_addr.
	steps := []struct {
		name     string
		method   string
		xff      string
		status   int
		body     string
		rl       string
		retry    string
		wantHits int64
	}{
		{"first allowed", "GET", "", 200, "hello from app\n", `"api";r=1;t=30`, "", 1},
		{"second allowed (a POST)", "POST", "", 200, "hello from app\n", `"api";r=0;t=30`, "", 2},
		{"third denied", "GET", "", 429, "rate limited\n", `"api";r=0;t=30`, "30", 2},
		{"a spoofed X-Forwarded-For is still the same client", "GET", "198.51.100.9", 429, "rate limited\n", `"api";r=0;t=30`, "30", 2},
	}
	for _, st := range steps {
		req, err := http.NewRequest(st.method, base+"/some/page", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		if st.xff != "" {
			req.Header.Set("X-Forwarded-For", st.xff)
		}
		resp, b := apitest.Do(t, req)
		if resp.StatusCode != st.status || b != st.body {
			t.Errorf("%s: %d %q, want %d %q", st.name, resp.StatusCode, b, st.status, st.body)
		}
		wantHeaders(t, st.name, resp.Header, map[string]string{
			"RateLimit-Policy": `"api";q=2;w=60`,
			"RateLimit":        st.rl,
			"Retry-After":      st.retry,
		})
		if got := appHits.Load(); got != st.wantHits {
			t.Errorf("%s: the app saw %d requests, want %d", st.name, got, st.wantHits)
		}
	}
}

// TestNginxAuthRequestNodeDown checks the documented failure: with rlnode
// unreachable, nginx answers 500 and the app sees nothing (fail closed).
func TestNginxAuthRequestNodeDown(t *testing.T) {
	example, err := os.ReadFile("../../deploy/nginx/rlcluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	var appHits atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { appHits.Add(1) }))
	t.Cleanup(app.Close)
	conf := strings.ReplaceAll(string(example), "server rlnode:8080;", fmt.Sprintf("server 127.0.0.1:%d;", porttest.Free(t)))
	conf = strings.ReplaceAll(conf, "server app:8000;", "server "+hostPort(t, app.URL)+";")
	base := startNginx(t, conf)
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("status %d with rlnode down, want 500", resp.StatusCode)
	}
	if n := appHits.Load(); n != 0 {
		t.Errorf("the app saw %d requests with rlnode down, want 0", n)
	}
}

func hostPort(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Host == "" {
		t.Fatal(errors.New("no host in " + rawURL))
	}
	return u.Host
}
