package gossip

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// newStdLogger adapts memberlist's "[LEVEL] memberlist: msg" log lines to
// slog records of the same level, one line each. quiet, when not nil and
// true (the node is shutting down), turns errors and warnings into debug
// records: sends that fail because the node itself closed its sockets are
// not a fault. An error that says the connection was closed under it is
// always debug. lim, when not nil, rate-limits the lines by kind (see
// logLimiter): memberlist logs a line for many a packet anyone can send.
func newStdLogger(l *slog.Logger, quiet func() bool, lim *logLimiter) *log.Logger {
	return log.New(slogWriter{l: l, quiet: quiet, lim: lim}, "", 0)
}

type slogWriter struct {
	l     *slog.Logger
	quiet func() bool
	lim   *logLimiter
}

func (w slogWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	lvl := slog.LevelInfo
	for _, c := range []struct {
		prefix string
		lvl    slog.Level
	}{{"[DEBUG] ", slog.LevelDebug}, {"[INFO] ", slog.LevelInfo}, {"[WARN] ", slog.LevelWarn}, {"[ERR] ", slog.LevelError}} {
		if strings.HasPrefix(s, c.prefix) {
			s, lvl = strings.TrimPrefix(s, c.prefix), c.lvl
			break
		}
	}
	s = oneLine(strings.TrimPrefix(s, "memberlist: "))
	if lvl > slog.LevelInfo && (strings.Contains(s, "use of closed network connection") || (w.quiet != nil && w.quiet())) {
		lvl = slog.LevelDebug
	}
	w.lim.log(w.l, lvl, s, s, "component", "memberlist")
	return len(p), nil
}

// Rate-limited logs for network input.
//
// A line that a packet can cause (memberlist's "Decrypt packet failed"
// for each garbage packet, a merge that fails for each frame) must not let
// a sender fill the disk: per kind, the first logBurst lines in each
// logPeriod go to the log, the rest are counted in
// rlcluster_gossip_log_lines_suppressed_total{kind}, and the next line of
// that kind logged says how many were suppressed before it. A kind is the
// level and the message's leading words (up to its first digit or
// punctuation, at most 48 bytes), so that addresses and error details do
// not make new kinds; at most maxLogKinds kinds are told apart, the rest
// share the kind "other".
const (
	logBurst    = 5
	logPeriod   = time.Minute
	maxLogKinds = 64
)

// logLimiter rate-limits log lines by kind. A nil *logLimiter logs
// everything. Safe for concurrent use.
type logLimiter struct {
	now        func() time.Time
	suppressed *prometheus.CounterVec // by kind

	mu    sync.Mutex
	kinds map[string]*logKind
}

type logKind struct {
	start      time.Time // of the current period
	logged     int       // lines logged in it
	suppressed int       // lines suppressed since the last one logged
}

func newLogLimiter(now func() time.Time, suppressed *prometheus.CounterVec) *logLimiter {
	return &logLimiter{now: now, suppressed: suppressed, kinds: map[string]*logKind{}}
}

// logKindOf returns the kind of a line of level lvl saying msg.
func logKindOf(lvl slog.Level, msg string) string {
	end := len(msg)
	for i, c := range msg {
		if !(c == ' ' || c == '/' || c == '-' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			end = i
			break
		}
	}
	k := strings.TrimSpace(msg[:min(end, 48)])
	return strings.ToLower(lvl.String()) + ": " + k
}

// admit reports whether a line of kind may be logged now and, if so, how
// many lines of kind were suppressed since the last one logged.
func (l *logLimiter) admit(kind string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.kinds[kind]
	if k == nil {
		if len(l.kinds) >= maxLogKinds {
			kind = "other"
			k = l.kinds[kind]
		}
		if k == nil {
			k = &logKind{start: now}
			l.kinds[kind] = k
		}
	}
	if now.Sub(k.start) >= logPeriod || now.Before(k.start) {
		k.start, k.logged = now, 0
	}
	if k.logged >= logBurst {
		k.suppressed++
		l.suppressed.WithLabelValues(kind).Inc()
		return false, 0
	}
	k.logged++
	suppressed, k.suppressed = k.suppressed, 0
	return true, suppressed
}

// log writes msg at lvl to lg with args unless l (when not nil) has
// logged its share of lines of kind (the level and keyOf's leading words)
// this period; a line after suppressed ones says how many.
func (l *logLimiter) log(lg *slog.Logger, lvl slog.Level, keyOf, msg string, args ...any) {
	ctx := context.Background()
	if !lg.Enabled(ctx, lvl) {
		return
	}
	if l != nil {
		ok, n := l.admit(logKindOf(lvl, keyOf))
		if !ok {
			return
		}
		if n > 0 {
			args = append(args, "suppressed", n)
		}
	}
	lg.Log(ctx, lvl, msg, args...)
}

// logNet logs a line that network input caused, rate-limited by kind
// (the level and msg).
func (n *Node) logNet(lvl slog.Level, msg string, args ...any) {
	n.logLim.log(n.log, lvl, msg, msg, args...)
}

// oneLine flattens a multi-line message (memberlist's joined errors:
// "2 errors occurred:\n\t* a\n\t* b\n\n") into "a; b".
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\n\t") {
		return s
	}
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimSpace(strings.TrimPrefix(l, "* "))
		if l == "" || strings.HasSuffix(l, "error occurred:") || strings.HasSuffix(l, "errors occurred:") {
			continue
		}
		parts = append(parts, l)
	}
	return strings.Join(parts, "; ")
}

// errLine is err's message on one line, for a log attribute.
func errLine(err error) string {
	if err == nil {
		return ""
	}
	return oneLine(err.Error())
}
