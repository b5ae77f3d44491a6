package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times
// (100 on every Linux this runs on).
const clockTick = 100

// procCPU returns the CPU time (user plus system) process pid has used,
// from /proc/<pid>/stat; an error where there is no /proc.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields after its closing one. utime and stime are fields 14
	// and 15, the 12th and 13th after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// procsCPU returns the CPU time of each process of pids, in order; an
// error when there is none or one cannot be read.
func procsCPU(pids []int) ([]time.Duration, error) {
	if len(pids) == 0 {
		return nil, errors.New("no server process")
	}
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		d, err := procCPU(pid)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}
