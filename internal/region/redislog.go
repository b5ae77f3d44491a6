package region

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SetRedisLogger sends go-redis's own log lines, which it otherwise writes
// to stderr in a format of its own, to log, with "component=redis": lines
// about connections that cannot be made or were lost at debug level (the
// store reports an unavailable Redis once, through the failover), others
// at warn level. go-redis has one logger per process: the last call wins.
func SetRedisLogger(log *slog.Logger) {
	redis.SetLogger(redisLogger{log.With("component", "redis")})
}

// redisLogger adapts an slog.Logger to go-redis's logging interface.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	level := slog.LevelWarn
	if connectionNoise(msg) {
		level = slog.LevelDebug
	}
	if !strings.HasPrefix(msg, "redis: ") {
		msg = "redis: " + msg
	}
	l.log.Log(ctx, level, msg)
}

// connectionNoise reports whether a go-redis line is about a connection
// that could not be made or was lost, which the failover reports itself.
func connectionNoise(msg string) bool {
	for _, s := range []string{"dial", "connection refused", "connection reset", "broken pipe",
		"i/o timeout", "EOF", "use of closed network connection", "pool"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
