package main

import (
	"fmt"
	"strings"
)

// busyShares is how busy one row kept the two sides of its run: Gen its
// load generator's CPU time over the run per core the generator may use,
// Server its server's (with its Redis's, which shares the server's core)
// per core the server may use (one when pinned). Zero is not measured.
type busyShares struct {
	Gen, Server float64
}

// busyRule decides from busyShares what a row measured.
//
// A row measured its generator (it is generator-bound) when the generator
// was busier than MaxGen while the server's core stayed under MinServer:
// then the generator, not the server, held the rate back. A generator as
// busy beside a saturated server's core only shows what the traffic costs
// on both sides (wrk at the trivial handler's rate spends most of its core
// in the kernel's loopback path), and the server is the limit.
//
// A closed-loop row whose server's core stayed under MinServer is
// unsteady: it did not saturate the server, so its rate is a floor of the
// server's, whatever else held it back (other work on the machine, the
// generator, the network).
type busyRule struct {
	MaxGen    float64 // the generator's share above which it may be the limit
	MinServer float64 // the server's share at which its core is saturated
}

// generatorBound reports whether b measured its generator.
func (r busyRule) generatorBound(b busyShares) bool {
	return b.Gen > r.MaxGen && b.Server < r.MinServer
}

// refusal says why a pair of rows (a ceiling's and a node's) measured its
// generator; "" when neither did. Pass a zero node to judge the ceiling
// alone.
func (r busyRule) refusal(ceiling, node busyShares) string {
	switch {
	case r.generatorBound(ceiling):
		return fmt.Sprintf("ceiling's generator %.0f%% busy > %.0f%% with its server's core %.0f%% busy < %.0f%%",
			100*ceiling.Gen, 100*r.MaxGen, 100*ceiling.Server, 100*r.MinServer)
	case r.generatorBound(node):
		return fmt.Sprintf("node row's generator %.0f%% busy > %.0f%% with its server's core %.0f%% busy < %.0f%%",
			100*node.Gen, 100*r.MaxGen, 100*node.Server, 100*r.MinServer)
	}
	return ""
}

// unsteady says which rows of a closed-loop pair (a ceiling's and a
// node's or peer's) left their server's core under MinServer; "" when
// both saturated it.
func (r busyRule) unsteady(ceiling, node busyShares) string {
	var under []string
	for _, side := range []struct {
		name string
		b    busyShares
	}{{"ceiling", ceiling}, {"row", node}} {
		switch {
		case side.b.Server <= 0:
			under = append(under, side.name+" not measured")
		case side.b.Server < r.MinServer:
			under = append(under, fmt.Sprintf("%s %.0f%%", side.name, 100*side.b.Server))
		}
	}
	if len(under) == 0 {
		return ""
	}
	return fmt.Sprintf("server's core less busy than %.0f%%: %s", 100*r.MinServer, strings.Join(under, ", "))
}
