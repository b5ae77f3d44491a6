//go:build race

package main

// raceEnabled reports whether the tests run with the race detector, whose
// shadow memory and slowdown a node measured in a child process must not
// carry (see startProcNode).
const raceEnabled = true
