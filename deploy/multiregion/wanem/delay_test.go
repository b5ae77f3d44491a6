package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// requireNFQueue skips when the test cannot install iptables rules, unless
// RLCLUSTER_REQUIRE_NFQUEUE=1 (CI), where it fails instead.
func requireNFQueue(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := exec.LookPath("iptables"); err != nil {
		why = "iptables not installed"
	}
	if why == "" {
		return
	}
	if os.Getenv("RLCLUSTER_REQUIRE_NFQUEUE") == "1" {
		t.Fatalf("NFQUEUE test required but %s", why)
	}
	t.Skipf("needs root and iptables: %s", why)
}

// startWanem runs the emulator on loopback subnets with its own chain and
// queue and stops it (removing the rules) at cleanup.
func startWanem(t *testing.T, args ...string) Config {
	t.Helper()
	pid := os.Getpid()
	base := []string{
		"--regions", "a=127.201.1.0/24,b=127.201.2.0/24,c=127.201.3.0/24",
		"--hook", "OUTPUT",
		"--chain", fmt.Sprintf("RLWANEMT%d", pid%100000),
		"--queue", fmt.Sprint(3000 + pid%1000),
		"--stats-interval", "-1s",
	}
	cfg, err := parseConfig(append(base, args...), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, cfg, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		t.Fatalf("wanem: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("wanem not ready after 10s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("wanem exit: %v", err)
		}
		ipt, err := pickIPTables(context.Background(), "auto")
		if err != nil {
			t.Errorf("pick iptables: %v", err)
			return
		}
		if ipt.chainExists(context.Background(), cfg.Chain) {
			t.Errorf("chain %s still exists after exit", cfg.Chain)
		}
	})
	return cfg
}

// udpRTTs sends n datagrams from src to an echo server on dst, one at a
// time, and returns the round trips of those answered within timeout.
func udpRTTs(t *testing.T, src, dst string, n int, timeout time.Duration) []time.Duration {
	t.Helper()
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(dst)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			k, from, err := srv.ReadFromUDP(buf)
			if err != nil {
				return
			}
			_, _ = srv.WriteToUDP(buf[:k], from)
		}
	}()
	cli, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)}, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	var rtts []time.Duration
	buf := make([]byte, 64)
	for i := 0; i < n; i++ {
		msg := []byte(fmt.Sprintf("ping %d", i))
		start := time.Now()
		if _, err := cli.Write(msg); err != nil {
			t.Fatal(err)
		}
		for {
			_ = cli.SetReadDeadline(start.Add(timeout))
			k, err := cli.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(buf[:k]) == string(msg) {
				rtts = append(rtts, time.Since(start))
				break
			}
		}
	}
	return rtts
}

// TestDelay shows the round trip between two emulated regions is twice the
// configured one-way delay, within a few ms, and that a lossy pair drops.
// The delay is judged by the lower quartile of the round trips: on a busy
// machine the scheduler adds to the others, which is not the emulator's
// doing.
func TestDelay(t *testing.T) {
	requireNFQueue(t)
	const oneWay = 30 * time.Millisecond
	startWanem(t, "--delays", "a-b=30ms,a-c=5ms", "--loss", "a-c=1")

	rtts := udpRTTs(t, "127.201.1.1", "127.201.2.1", 20, time.Second)
	if len(rtts) != 20 {
		t.Fatalf("got %d answers of 20 on a lossless path", len(rtts))
	}
	slices.Sort(rtts)
	quartile, median, minRTT := rtts[len(rtts)/4], rtts[len(rtts)/2], rtts[0]
	added := quartile / 2
	t.Logf("a<->b: configured one-way %v; round trips min %v lower quartile %v median %v max %v; measured one-way %v", oneWay, minRTT, quartile, median, rtts[len(rtts)-1], added)
	if minRTT < 2*oneWay {
		t.Errorf("min round trip %v < twice the one-way delay %v: a packet was released early", minRTT, 2*oneWay)
	}
	if diff := added - oneWay; diff > 3*time.Millisecond {
		t.Errorf("measured one-way delay %v, want %v within 3ms", added, oneWay)
	}

	// Same-region traffic is not delayed.
	local := udpRTTs(t, "127.201.1.1", "127.201.1.2", 5, time.Second)
	if len(local) != 5 || slices.Max(local) > 10*time.Millisecond {
		t.Errorf("same-region round trips %v, want 5 under 10ms", local)
	}
	// Loss 1 drops everything between a and c.
	if got := udpRTTs(t, "127.201.1.1", "127.201.3.1", 5, 100*time.Millisecond); len(got) != 0 {
		t.Errorf("a<->c with loss 1: got %d answers, want 0", len(got))
	}
}

// TestStaleRulesRemoved shows start-up clears a chain left by a crashed run.
func TestStaleRulesRemoved(t *testing.T) {
	requireNFQueue(t)
	ipt, err := pickIPTables(context.Background(), "auto")
	if err != nil {
		t.Fatal(err)
	}
	chain := fmt.Sprintf("RLWANEMS%d", os.Getpid()%100000)
	ctx := context.Background()
	t.Cleanup(func() { _ = removeRules(ctx, ipt, chain) })
	for _, args := range [][]string{
		{"-N", chain},
		{"-A", chain, "-s", "127.201.9.0/24", "-j", "DROP"},
		{"-I", "OUTPUT", "1", "-j", chain},
	} {
		if _, err := ipt.run(ctx, append([]string{"-t", "filter"}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	cfg := startWanem(t, "--chain", chain, "--delays", "")
	out, err := ipt.run(ctx, "-t", "filter", "-S", cfg.Chain)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(splitLines(out)), 1+6; got != want { // -N plus one rule per directed pair
		t.Errorf("chain after start has %d lines, want %d:\n%s", got, want, out)
	}
	hook, _ := ipt.run(ctx, "-t", "filter", "-S", "OUTPUT")
	if n := countJumps(hook, chain); n != 1 {
		t.Errorf("OUTPUT has %d jumps to %s, want 1:\n%s", n, chain, hook)
	}
}

// splitLines returns the rule lines of iptables -S output (comments and
// warnings dropped).
func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "-") {
			out = append(out, l)
		}
	}
	return out
}

func countJumps(rules, chain string) int {
	n := 0
	for _, l := range splitLines(rules) {
		if l == "-A OUTPUT -j "+chain {
			n++
		}
	}
	return n
}
