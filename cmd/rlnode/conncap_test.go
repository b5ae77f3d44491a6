package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// TestConnectionCapHeldByIdleClients: a node with --max-connections 64
// and 1,000 clients that hold connections doing nothing (a third connect
// and send nothing, a third trickle a request's headers a byte every
// 500 ms, a third ask /healthz, without a token, and keep the connection
// idle), each connecting again a second after the node closes it. A legitimate
// client's Checks, over keep-alive HTTP/1.1, must all succeed with a p99
// under a second, with authentication on and off. Before the cap reclaimed
// idle connections, the 1,000 held the 64 slots and every other client
// waited in the listen backlog until it timed out (5 s). The bound is a
// liveness check, far from both that failure and from the latency of a
// loaded machine under -race (p99 up to about 280 ms); the latency itself
// is the loadtest's to measure.
//
// Loopback only; bounded in count (at most 3 rounds of 500 Checks, 1,000 clients reconnecting
// at most 200 times each) and time (a minute).
func TestConnectionCapHeldByIdleClients(t *testing.T) {
	const (
		attackers = 1000
		maxConns  = 64
		checks    = 500
	)
	raiseFileLimit(t, 3*attackers)
	const tok = "legit-token-0123456789"
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		tok  string
	}{
		{"auth off", nil, ""},
		{"auth on", []string{"--auth-token-file", tokFile}, tok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startProcNode(t, append([]string{"--listen", "127.0.0.1:0", "--max-connections", fmt.Sprint(maxConns)}, tc.args...)...)
			addr := strings.TrimPrefix(n.base, "http://")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			for i := range attackers {
				wg.Go(func() { hold(ctx, addr, i%3) })
			}
			defer wg.Wait()
			defer cancel()
			time.Sleep(2 * time.Second) // let the 1,000 connect and settle

			client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			// The machine may be shared with other work, whose stalls are
			// not the node's: up to three rounds, the first that holds
			// passes. Without the cap's reclaiming, every round fails.
			for round := 1; ; round++ {
				p99, failed := legitChecks(t, ctx, client, n.base, tc.tok, checks)
				if p99 <= time.Second && failed == 0 {
					break
				}
				if round == 3 {
					t.Fatalf("p99 %v with %d failed, want under 1s with none failed", p99, failed)
				}
			}
		})
	}
}

// legitChecks sends k Checks one after another over client, with tok
// when set, and returns their p99 latency and how many failed.
func legitChecks(t *testing.T, ctx context.Context, client *http.Client, base, tok string, k int) (time.Duration, int) {
	t.Helper()
	lat := make([]time.Duration, 0, k)
	failed, conns := 0, 0
	for i := range k {
		body := fmt.Sprintf(`{"key":"legit-%d","limit":{"limit":1000000,"window":"60s"}}`, i%10)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/ratelimit.v1.RateLimitService/Check", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			if !i.Reused {
				conns++
			}
		}}))
		start := time.Now()
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		lat = append(lat, time.Since(start))
		if err != nil {
			failed++
			if failed <= 3 {
				t.Logf("Check %d: %v", i, err)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	slices.Sort(lat)
	p99 := lat[len(lat)*99/100]
	t.Logf("%d Checks: p50 %v, p99 %v, max %v, %d failed, over %d connections", k, lat[len(lat)/2], p99, lat[len(lat)-1], failed, conns)
	return p99, failed
}

// hold connects to addr and holds the connection doing nothing useful
// (kind 0: sends nothing; 1: trickles a request's headers, a byte every
// 500 ms; 2: asks
// /healthz once, then idles), reconnecting each time the node closes it,
// until ctx is done or it has connected 200 times.
func hold(ctx context.Context, addr string, kind int) {
	var d net.Dialer
	for range 200 {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			r := bufio.NewReader(c)
			if kind == 2 {
				if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
					return
				}
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			_, _ = io.Copy(io.Discard, r) // until the node closes it
		}()
		if kind == 1 {
			_, _ = c.Write([]byte("POST /ratelimit.v1.RateLimitService/Check HTTP/1.1\r\nHost: x\r\n"))
			tick := time.NewTicker(500 * time.Millisecond)
		trickle:
			for {
				select {
				case <-ctx.Done():
					break trickle
				case <-closed:
					break trickle
				case <-tick.C:
					_, _ = c.Write([]byte("X"))
				}
			}
			tick.Stop()
		}
		select {
		case <-ctx.Done():
			c.Close()
			<-closed
			return
		case <-closed:
			c.Close()
		}
		select { // a client's pause before it connects again
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// raiseFileLimit raises the soft limit on open files to at least n, up to
// the hard limit, and fails t when the hard limit is lower.
func raiseFileLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Fatalf("the hard limit on open files is %d, want at least %d (ulimit -Hn)", lim.Max, n)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
}

// TestStreamsTimeOut: server-reflection streams that send their headers
// and nothing more end at --stream-timeout, on --listen and on
// --grpc-listen, and the connection slots they held (--max-connections 4,
// four such streams) serve other clients again. Before streams had a
// timeout of their own, four of them held a node's four slots past the
// two-minute idle timeout.
func TestStreamsTimeOut(t *testing.T) {
	n := startProcNode(t, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--max-connections", "4", "--stream-timeout", "2s")
	for _, addr := range []string{strings.TrimPrefix(n.base, "http://"), n.grpc} {
		t.Run(addr, func(t *testing.T) {
			t.Parallel() // each listener has slots of its own
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			ended := make(chan error, 4)
			for range 4 {
				conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				st, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					_, err := st.Recv() // it never asks anything
					ended <- err
				}()
			}
			for range 4 {
				select {
				case err := <-ended:
					if took := time.Since(start); err == nil || took < time.Second || took > 10*time.Second {
						t.Errorf("a silent reflection stream ended with %v after %v, want an error after about 2s", err, took)
					}
				case <-ctx.Done():
					t.Fatalf("silent reflection streams still open after %v, want them ended at --stream-timeout 2s", time.Since(start))
				}
			}
			// The slots serve again, once their connections have been idle
			// for a second.
			time.Sleep(1100 * time.Millisecond)
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
			defer hcancel()
			if _, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Errorf("health check after the streams ended: %v", err)
			}
		})
	}
}
