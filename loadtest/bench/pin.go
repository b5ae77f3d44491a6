package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
)

func numCPU() int { return runtime.NumCPU() }

// PinSelf pins every thread of this process to cpu with taskset and sets
// GOMAXPROCS to 1, so the load generator stays off the node's core.
func PinSelf(taskset, cpu string) error {
	out, err := exec.Command(taskset, "-a", "-p", "-c", cpu, strconv.Itoa(os.Getpid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset self: %w: %s", err, out)
	}
	runtime.GOMAXPROCS(1)
	return nil
}
