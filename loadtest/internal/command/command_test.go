package command

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"testing"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		code   int
		stderr string
	}{
		{"success", nil, 0, ""},
		{"help", flag.ErrHelp, 0, ""},
		{"wrapped help", fmt.Errorf("parse: %w", flag.ErrHelp), 0, ""},
		{"failure", errors.New("boom"), 1, "tool: boom\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w bytes.Buffer
			if got := exitCode(&w, "tool", tt.err); got != tt.code {
				t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.code)
			}
			if w.String() != tt.stderr {
				t.Errorf("stderr = %q, want %q", w.String(), tt.stderr)
			}
		})
	}
}
