package h2work_test

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/api/h2work"
)

// goroutines is a handler that records the goroutine each request runs on.
type goroutines struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (g *goroutines) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	g.mu.Lock()
	g.ids[id] = true
	g.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

func (g *goroutines) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.ids)
}

// get sends n requests one after another with c and checks each answer.
func get(t *testing.T, c *http.Client, url string, n int) {
	t.Helper()
	for range n {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || string(body) != "ok" {
			t.Fatalf("GET answered %q, %v; want ok", body, err)
		}
	}
}

// TestReusesGoroutines checks that HTTP/2 requests run on a few reused
// goroutines (net/http starts one per stream, which a request then runs
// on without the Handler) and HTTP/1.1 requests on their connection's.
func TestReusesGoroutines(t *testing.T) {
	const n = 50
	g := &goroutines{ids: map[string]bool{}}
	p := h2work.New(g, 8, time.Minute)
	srv := apitest.Serve(t, p)

	get(t, apitest.H2CClient(t), srv.URL, n)
	// A worker signals a request's end before it waits for the next, so
	// a request may now and then find none idle and start another.
	if got := g.count(); got > 4 {
		t.Errorf("%d HTTP/2 requests ran on %d goroutines, want at most 4", n, got)
	}
	if w := p.Workers(); w < 1 || w > 4 {
		t.Errorf("Workers() = %d after %d HTTP/2 requests, want 1 to 4", w, n)
	}

	h1 := &goroutines{ids: map[string]bool{}}
	p1 := h2work.New(h1, 8, time.Minute)
	srv1 := apitest.Serve(t, p1)
	get(t, srv1.Client(), srv1.URL, n)
	if got := h1.count(); got != 1 {
		t.Errorf("%d HTTP/1.1 requests on one connection ran on %d goroutines, want 1", n, got)
	}
	if w := p1.Workers(); w != 0 {
		t.Errorf("Workers() = %d after HTTP/1.1 requests only, want 0", w)
	}
}

// TestAtMostMax checks that requests beyond Max busy workers run on their
// own goroutines, and that every one is answered.
func TestAtMostMax(t *testing.T) {
	const max, n = 3, 8
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(n)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		started.Done()
		<-release
		_, _ = io.WriteString(w, "ok")
	})
	p := h2work.New(h, max, time.Minute)
	srv := apitest.Serve(t, p)
	c := apitest.H2CClient(t)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { get(t, c, srv.URL, 1) })
	}
	started.Wait() // every request is in the handler at once
	if w := p.Workers(); w != max {
		t.Errorf("Workers() = %d with %d requests in the handler, want %d", w, n, max)
	}
	close(release)
	wg.Wait()
}

// TestPanicReachesNetHTTP checks that a handler's panic on a worker is
// raised on the request's own goroutine, where net/http recovers it
// (resetting the stream), and that the Handler keeps serving.
func TestPanicReachesNetHTTP(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("handler failed")
		case "/abort":
			panic(http.ErrAbortHandler) // net/http resets the stream and logs nothing
		}
		_, _ = io.WriteString(w, "ok")
	})
	p := h2work.New(h, 4, time.Minute)
	srv := httptest.NewUnstartedServer(p)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protos
	srv.Config.ErrorLog = log.New(lockedWriter{&mu, &logs}, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	c := apitest.H2CClient(t)

	// Each panic resets its stream; the next request is served.
	panics := func(path string) {
		for range 3 {
			if resp, err := c.Get(srv.URL + path); err == nil {
				_ = resp.Body.Close()
				t.Fatalf("GET %s answered %s, want the stream reset", path, resp.Status)
			}
			get(t, c, srv.URL, 1)
		}
	}
	panics("/abort")
	mu.Lock()
	if logs.Len() > 0 {
		t.Errorf("net/http logged %q for http.ErrAbortHandler, want nothing", logs.String())
	}
	mu.Unlock()
	panics("/panic")
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "handler failed") || !strings.Contains(logs.String(), "h2work_test.TestPanicReachesNetHTTP") {
		t.Errorf("net/http logged %q, want the handler's panic and its stack", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestIdleWorkersEnd checks that a worker ends after idle without a
// request, and that the next request starts one again.
func TestIdleWorkersEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 10 * time.Second
		p := h2work.New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok")
		}), 4, idle)
		serve := func() {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.ProtoMajor, r.ProtoMinor, r.Proto = 2, 0, "HTTP/2.0"
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, r)
			if rec.Body.String() != "ok" {
				t.Fatalf("answered %q, want ok", rec.Body.String())
			}
		}
		serve()
		synctest.Wait()
		if w := p.Workers(); w != 1 {
			t.Fatalf("Workers() = %d after a request, want 1", w)
		}
		time.Sleep(idle - time.Millisecond)
		serve() // the worker is still there, and its wait starts again
		synctest.Wait()
		time.Sleep(idle - time.Millisecond)
		synctest.Wait()
		if w := p.Workers(); w != 1 {
			t.Fatalf("Workers() = %d %s after the last request, want 1", w, idle-time.Millisecond)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if w := p.Workers(); w != 0 {
			t.Fatalf("Workers() = %d %s after the last request, want 0", w, idle)
		}
		serve()
		synctest.Wait()
		if w := p.Workers(); w != 1 {
			t.Fatalf("Workers() = %d after a request to an idle Handler, want 1", w)
		}
		time.Sleep(idle)
		synctest.Wait()
	})
}
