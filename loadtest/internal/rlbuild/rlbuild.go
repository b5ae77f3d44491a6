// Package rlbuild builds the rlnode binary and finds free ports for the
// load harnesses (loadtest/bench, loadtest/keyflood).
package rlbuild

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago (all held open together while they are found, so that no two are
// the same).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// Rlnode builds ./cmd/rlnode of the module containing the working
// directory into dir and returns the binary's path.
func Rlnode(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the rlcluster module: pass -rlnode")
	}
	bin := filepath.Join(dir, "rlnode")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rlnode")
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/rlnode: %w: %s", err, out)
	}
	return bin, nil
}
