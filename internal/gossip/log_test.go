package gossip

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestMemberlistLogLines: memberlist's lines come out as slog records at
// their level, one line each, without the "memberlist:" prefix; a send
// that fails on a closed connection, or any error while the node shuts
// down, is debug.
func TestMemberlistLogLines(t *testing.T) {
	cases := []struct {
		name, line string
		quiet      bool
		level, msg string
	}{
		{"error", "[ERR] memberlist: Push/Pull with x failed: EOF", false, "ERROR", "Push/Pull with x failed: EOF"},
		{"warn", "[WARN] memberlist: Refuting a suspect message", false, "WARN", "Refuting a suspect message"},
		{"closed conn", "[ERR] memberlist: Failed to send gossip to 1.2.3.4:7946: write udp 1.2.3.4:7946: use of closed network connection", false, "DEBUG", "Failed to send gossip"},
		{"shutting down", "[ERR] memberlist: Failed to send ping: EOF", true, "DEBUG", "Failed to send ping: EOF"},
		{"multi-line", "[WARN] memberlist: 2 errors occurred:\n\t* Failed to join a: refused\n\t* Failed to join b: refused\n\n", false, "WARN", `"Failed to join a: refused; Failed to join b: refused"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := newStdLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), func() bool { return c.quiet }, nil)
			l.Print(c.line)
			got := buf.String()
			if strings.Count(got, "\n") != 1 || strings.Contains(got, `\n`) || strings.Contains(got, `\t`) {
				t.Errorf("record = %q, want one line without escapes", got)
			}
			if !strings.Contains(got, "level="+c.level) || !strings.Contains(got, c.msg) || strings.Contains(got, "memberlist: ") {
				t.Errorf("record = %q, want level=%s and %q without the memberlist prefix", got, c.level, c.msg)
			}
		})
	}
	if got, want := errLine(errors.New("1 error occurred:\n\t* Failed to join 127.0.0.1:9: refused\n\n")), "Failed to join 127.0.0.1:9: refused"; got != want {
		t.Errorf("errLine() = %q, want %q", got, want)
	}
}

// TestLogLimiter: per kind (level and leading words), the first logBurst
// lines of a period are logged, the rest counted; the first line of the
// next period says how many were suppressed. Addresses and details do not
// make new kinds, and at most maxLogKinds kinds are told apart.
func TestLogLimiter(t *testing.T) {
	now := t0
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, nil))
	met := newMetrics()
	lim := newLogLimiter(func() time.Time { return now }, met.logSuppressed)
	w := newStdLogger(lg, nil, lim)
	for i := range 100 {
		w.Printf("[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message from=10.0.%d.%d:7946", i/250, i%250)
	}
	w.Printf("[WARN] memberlist: Got ping for unexpected node 'x%d' from=1.2.3.4:5", 1)
	if got, want := strings.Count(buf.String(), "\n"), logBurst+1; got != want {
		t.Errorf("%d lines logged, want %d:\n%s", got, want, buf.String())
	}
	kind := "error: Decrypt packet failed"
	if got, want := counterValue(met.logSuppressed.WithLabelValues(kind)), 100.0-logBurst; got != want {
		t.Errorf("suppressed{%s} = %v, want %v", kind, got, want)
	}
	now = now.Add(logPeriod)
	buf.Reset()
	w.Printf("[ERR] memberlist: Decrypt packet failed: again")
	if got := buf.String(); !strings.Contains(got, "suppressed=95") {
		t.Errorf("the first line of the next period = %q, want suppressed=95", got)
	}
	// Made-up kinds share "other" beyond maxLogKinds.
	for i := range 3 * maxLogKinds {
		w.Printf("[WARN] memberlist: %s: x", strings.Repeat("k", i+1))
	}
	if got := len(lim.kinds); got > maxLogKinds {
		t.Errorf("%d kinds kept, want at most %d", got, maxLogKinds)
	}
}
