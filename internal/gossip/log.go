package gossip

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// newStdLogger adapts memberlist's "[LEVEL] memberlist: msg" log lines to
// slog records of the same level, one line each. quiet, when not nil and
// true (the node is shutting down), turns errors and warnings into debug
// records: sends that fail because the node itself closed its sockets are
// not a fault. An error that says the connection was closed under it is
// always debug.
func newStdLogger(l *slog.Logger, quiet func() bool) *log.Logger {
	return log.New(slogWriter{l: l, quiet: quiet}, "", 0)
}

type slogWriter struct {
	l     *slog.Logger
	quiet func() bool
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
	w.l.Log(context.Background(), lvl, s, "component", "memberlist")
	return len(p), nil
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
