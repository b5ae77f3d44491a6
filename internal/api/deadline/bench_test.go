package deadline

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkHTTPServe measures one small JSON POST answered by net/http
// over TCP loopback, on keep-alive connections, with rlnode's server
// timeouts (10s for headers, 15s to read, 30s to write, 2m idle): on the
// plain listener ("socket", every deadline set on the socket) and on a
// Listener ("deadline"). cpu-ns/op is the process's CPU time, server and
// clients together, per request.
func BenchmarkHTTPServe(b *testing.B) {
	const body = `{"key":"user1234","limit":{"limit":"1000000000","window":"60s"}}`
	req := []byte("POST /ratelimit.v1.RateLimitService/Check HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	for _, v := range []struct {
		name string
		wrap func(net.Listener) net.Listener
	}{
		{"socket", func(l net.Listener) net.Listener { return l }},
		{"deadline", func(l net.Listener) net.Listener { return NewListener(l) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			tcp, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"allowed":true}`)
				}),
				ReadHeaderTimeout: 10 * time.Second,
				ReadTimeout:       15 * time.Second,
				WriteTimeout:      30 * time.Second,
				IdleTimeout:       2 * time.Minute,
			}
			go func() { _ = srv.Serve(v.wrap(tcp)) }()
			b.Cleanup(func() { _ = srv.Close() })
			addr := tcp.Addr().String()
			n := responseSize(b, addr, req)

			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				buf := make([]byte, n)
				for pb.Next() {
					if _, err := c.Write(req); err != nil {
						b.Error(err)
						return
					}
					if _, err := io.ReadFull(c, buf); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// responseSize sends req once to addr and returns the size of the
// answer, the same for every request (its Date header is of fixed width).
func responseSize(b *testing.B, addr string, req []byte) int {
	b.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		b.Fatal(err)
	}
	cr := &countingReader{r: c}
	resp, err := http.ReadResponse(bufio.NewReader(cr), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	return cr.n
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// processCPU returns the process's user and system CPU time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
