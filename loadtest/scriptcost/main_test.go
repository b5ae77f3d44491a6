package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// dumped reads the instruction total of the k-th callgrind dump.
func TestDumped(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"out.1": "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 121448000\n",
		"out.2": "version: 1\nevents: Ir\nsummary: 203716000\n",
		"out.3": "version: 1\nevents: Ir\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for k, want := range map[int]int64{1: 121448000, 2: 203716000} {
		if got, err := dumped(dir, k); err != nil || got != want {
			t.Errorf("dumped(%d) = %d, %v; want %d", k, got, err, want)
		}
	}
	for _, k := range []int{3, 4} {
		if _, err := dumped(dir, k); err == nil {
			t.Errorf("dumped(%d): no error for a dump without a summary or none at all", k)
		}
	}
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-n", "0"}, &out); err == nil {
		t.Error("run(-n 0) = nil, want an error")
	}
}
