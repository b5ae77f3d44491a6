package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is the whole emulator configuration. Zero fields mean "default".
type Config struct {
	// Regions maps a region name to its subnet (for example us=172.28.1.0/24).
	Regions map[string]netip.Prefix
	// Links holds the one-way delay and loss of each unordered region pair.
	// A pair with no entry gets no delay and no loss (its packets are still
	// queued and accepted, so the pair is routed).
	Links map[Pair]Link
	// QueueNum is the NFQUEUE number the rules send packets to (default 7).
	QueueNum uint16
	// MaxQueueLen is how many packets the kernel may hold waiting for a
	// verdict (default 65536). Delayed packets count against it.
	MaxQueueLen uint32
	// Chain is the name of the chain wanem owns in the filter table
	// (default RLWANEM). It is flushed and deleted on start and on exit.
	Chain string
	// Hook is the built-in (or Docker) chain that jumps to Chain. "auto"
	// (default) picks DOCKER-USER when it exists, so the accepted packets
	// pass Docker's isolation between networks, and FORWARD otherwise.
	// OUTPUT is useful for loopback tests.
	Hook string
	// IPTables is the iptables binary: "auto" (default) picks the variant
	// whose filter table already holds Docker's chains, else the first of
	// iptables, iptables-nft, iptables-legacy that accepts an NFQUEUE rule.
	IPTables string
	// Seed seeds the loss decisions (0 means time-based).
	Seed int64
	// StatsInterval is how often counters are logged (default 10s, <0 off).
	StatsInterval time.Duration
}

// Pair is an unordered pair of region names, stored sorted (A < B).
type Pair struct{ A, B string }

// MakePair returns the pair of a and b in canonical order.
func MakePair(a, b string) Pair {
	if b < a {
		a, b = b, a
	}
	return Pair{A: a, B: b}
}

func (p Pair) String() string { return p.A + "-" + p.B }

// Link is the emulated path between two regions, the same both ways.
type Link struct {
	// Delay is the one-way delay added to every packet.
	Delay time.Duration
	// Loss is the share of packets dropped, in [0, 1].
	Loss float64
}

// DefaultRegions are the demo's subnets (see ../compose.yaml).
const DefaultRegions = "us=172.28.1.0/24,eu=172.28.2.0/24,ap=172.28.3.0/24"

// DefaultDelays are the demo's one-way delays.
const DefaultDelays = "us-eu=30ms,eu-ap=60ms,us-ap=90ms"

func (c *Config) setDefaults() {
	if c.QueueNum == 0 {
		c.QueueNum = 7
	}
	if c.MaxQueueLen == 0 {
		c.MaxQueueLen = 65536
	}
	if c.Chain == "" {
		c.Chain = "RLWANEM"
	}
	if c.Hook == "" {
		c.Hook = "auto"
	}
	if c.IPTables == "" {
		c.IPTables = "auto"
	}
	if c.StatsInterval == 0 {
		c.StatsInterval = 10 * time.Second
	}
}

// validate checks that every link names known regions and that subnets do
// not overlap.
func (c *Config) validate() error {
	if len(c.Regions) < 2 {
		return errors.New("wanem: need at least two regions")
	}
	names := c.regionNames()
	for i, a := range names {
		for _, b := range names[i+1:] {
			if c.Regions[a].Overlaps(c.Regions[b]) {
				return fmt.Errorf("wanem: subnets of %s and %s overlap", a, b)
			}
		}
	}
	for p, l := range c.Links {
		if _, ok := c.Regions[p.A]; !ok {
			return fmt.Errorf("wanem: link %s: unknown region %q", p, p.A)
		}
		if _, ok := c.Regions[p.B]; !ok {
			return fmt.Errorf("wanem: link %s: unknown region %q", p, p.B)
		}
		if p.A == p.B {
			return fmt.Errorf("wanem: link %s: same region twice", p)
		}
		if l.Delay < 0 || l.Loss < 0 || l.Loss > 1 {
			return fmt.Errorf("wanem: link %s: delay %v or loss %v out of range", p, l.Delay, l.Loss)
		}
	}
	return nil
}

func (c *Config) regionNames() []string {
	names := make([]string, 0, len(c.Regions))
	for n := range c.Regions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// parseRegions parses "us=172.28.1.0/24,eu=172.28.2.0/24".
func parseRegions(s string) (map[string]netip.Prefix, error) {
	out := map[string]netip.Prefix{}
	for _, item := range splitList(s) {
		name, cidr, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("parse region %q: want name=cidr", item)
		}
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("parse region %q: %w", item, err)
		}
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("parse region %q: only IPv4 subnets are supported", item)
		}
		out[name] = p.Masked()
	}
	return out, nil
}

// parseLinks parses "us-eu=30ms,eu-ap=60ms" into links: set parses each
// value into its pair's link.
func parseLinks(s string, links map[Pair]Link, set func(l *Link, v string) error) error {
	for _, item := range splitList(s) {
		k, v, ok := strings.Cut(item, "=")
		a, b, ok2 := strings.Cut(k, "-")
		if !ok || !ok2 || a == "" || b == "" {
			return fmt.Errorf("parse %q: want regionA-regionB=value", item)
		}
		p := MakePair(a, b)
		l := links[p]
		if err := set(&l, v); err != nil {
			return fmt.Errorf("parse %q: %w", item, err)
		}
		links[p] = l
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' || r == '\n' }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseConfig reads flags, each with an environment fallback WANEM_<FLAG>.
func parseConfig(args []string, getenv func(string) string) (Config, error) {
	fs := flag.NewFlagSet("wanem", flag.ContinueOnError)
	env := func(name, def string) string {
		if v := getenv("WANEM_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); v != "" {
			return v
		}
		return def
	}
	regions := fs.String("regions", env("regions", DefaultRegions), "region subnets, name=cidr,... (env WANEM_REGIONS)")
	delays := fs.String("delays", env("delays", DefaultDelays), "one-way delay per region pair, a-b=dur,... (env WANEM_DELAYS)")
	loss := fs.String("loss", env("loss", ""), "share of packets dropped per region pair, a-b=0.01,... (env WANEM_LOSS)")
	queue := fs.Uint("queue", 0, "NFQUEUE number (env WANEM_QUEUE, default 7)")
	maxq := fs.Uint("max-queue-len", 0, "packets the kernel may hold awaiting a verdict (env WANEM_MAX_QUEUE_LEN, default 65536)")
	chain := fs.String("chain", env("chain", ""), "filter-table chain owned by wanem (env WANEM_CHAIN, default RLWANEM)")
	hook := fs.String("hook", env("hook", ""), "chain that jumps to ours: auto, DOCKER-USER, FORWARD or OUTPUT (env WANEM_HOOK)")
	ipt := fs.String("iptables", env("iptables", ""), "iptables binary: auto, iptables, iptables-nft or iptables-legacy (env WANEM_IPTABLES)")
	seed := fs.Int64("seed", 0, "seed for loss decisions, 0 = time-based (env WANEM_SEED)")
	stats := fs.Duration("stats-interval", 0, "how often to log counters, negative = never (env WANEM_STATS_INTERVAL, default 10s)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	uintEnv := func(name string, v uint) (uint, error) {
		if v != 0 {
			return v, nil
		}
		s := env(name, "")
		if s == "" {
			return 0, nil
		}
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("parse WANEM_%s: %w", strings.ToUpper(strings.ReplaceAll(name, "-", "_")), err)
		}
		return uint(n), nil
	}
	var err error
	if *queue, err = uintEnv("queue", *queue); err != nil {
		return Config{}, err
	}
	if *queue > 65535 {
		return Config{}, fmt.Errorf("queue %d out of range", *queue)
	}
	if *maxq, err = uintEnv("max-queue-len", *maxq); err != nil {
		return Config{}, err
	}
	if *seed == 0 {
		if s := env("seed", ""); s != "" {
			if *seed, err = strconv.ParseInt(s, 10, 64); err != nil {
				return Config{}, fmt.Errorf("parse WANEM_SEED: %w", err)
			}
		}
	}
	if *stats == 0 {
		if s := env("stats-interval", ""); s != "" {
			if *stats, err = time.ParseDuration(s); err != nil {
				return Config{}, fmt.Errorf("parse WANEM_STATS_INTERVAL: %w", err)
			}
		}
	}
	cfg := Config{
		QueueNum: uint16(*queue), MaxQueueLen: uint32(*maxq), Chain: *chain, Hook: *hook,
		IPTables: *ipt, Seed: *seed, StatsInterval: *stats, Links: map[Pair]Link{},
	}
	if cfg.Regions, err = parseRegions(*regions); err != nil {
		return Config{}, err
	}
	err = parseLinks(*delays, cfg.Links, func(l *Link, v string) (err error) {
		l.Delay, err = time.ParseDuration(v)
		return err
	})
	if err != nil {
		return Config{}, err
	}
	err = parseLinks(*loss, cfg.Links, func(l *Link, v string) (err error) {
		l.Loss, err = strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
		if err == nil && strings.HasSuffix(v, "%") {
			l.Loss /= 100
		}
		return err
	})
	if err != nil {
		return Config{}, err
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
