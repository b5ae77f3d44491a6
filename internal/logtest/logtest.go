// Package logtest collects what code under test writes, its logs above all,
// for tests to read back, and picks lines out of such text for a failure
// message.
package logtest

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// Buffer is a log sink safe for concurrent writes and reads (a logger's
// goroutines write while the test reads). The zero value is empty and ready
// to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a text logger that writes records at level and above to w.
func Logger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// Lines returns the lines of s that contain sub, one per line: the part of
// a long log or metrics page worth showing when a test fails.
func Lines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
