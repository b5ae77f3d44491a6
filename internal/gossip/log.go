package gossip

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// newStdLogger adapts memberlist's "[LEVEL] msg" log lines to slog.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

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
	w.l.Log(context.Background(), lvl, s, "component", "memberlist")
	return len(p), nil
}
