// Package command owns how a load harness's main runs: its run function
// gets the arguments and standard output under a context that SIGINT or
// SIGTERM cancels, and a failure is printed and turned into exit status 1.
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Main calls run with os.Args[1:] and os.Stdout under a context that
// SIGINT or SIGTERM cancels, and exits with status 1, after printing
// "name: err" to standard error, when run fails. flag.ErrHelp (-help) is
// not a failure: the flag set has printed the usage.
func Main(name string, run func(ctx context.Context, args []string, out io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if code := exitCode(os.Stderr, name, err); code != 0 {
		os.Exit(code)
	}
}

// exitCode returns the exit status for run's error err, and prints a
// failure to w.
func exitCode(w io.Writer, name string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(w, name+":", err)
	return 1
}
