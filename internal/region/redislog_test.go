package region

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestRedisLoggerLevels(t *testing.T) {
	var buf bytes.Buffer
	l := redisLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for _, c := range []struct{ format, arg, level string }{
		{"redis: %s", "connection pool: failed to dial after 5 attempts: dial tcp 127.0.0.1:6379: connect: connection refused", "DEBUG"},
		{"%s", "pool.go:770: failed to dial after 5 attempts: dial tcp 127.0.0.1:6379: connect: connection refused", "DEBUG"},
		{"%s\n", "sentinel: new master=\"m\" addr=\"127.0.0.1:7000\"", "WARN"},
	} {
		buf.Reset()
		l.Printf(context.Background(), c.format, c.arg)
		out := buf.String()
		if !strings.Contains(out, "level="+c.level) || strings.Count(out, "\n") != 1 || strings.Count(out, "redis:") != 1 {
			t.Errorf("Printf(%q) logged %q, want one line at %s", c.arg, out, c.level)
		}
	}
}
