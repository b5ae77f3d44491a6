// Command wanem emulates a wide-area network between the demo's regions.
//
// It owns the packet-level WAN of deploy/multiregion: it installs iptables
// NFQUEUE rules for traffic between the regions' subnets, holds each packet
// in user space for the one-way delay configured for its region pair (one
// FIFO per direction and a single timer, so ordering is kept and there is no
// goroutine per packet), drops the configured share, and removes its rules
// on exit and on start. It exists because this kernel has no netem.
//
// Usage (flags have WANEM_* environment fallbacks):
//
//	wanem --regions us=172.28.1.0/24,eu=172.28.2.0/24,ap=172.28.3.0/24 \
//	      --delays us-eu=30ms,eu-ap=60ms,us-ap=90ms --loss us-ap=0.01
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	nfqueue "github.com/florianl/go-nfqueue/v2"
	"github.com/mdlayher/netlink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, nil); err != nil {
		fmt.Fprintln(os.Stderr, "wanem:", err)
		os.Exit(1)
	}
}

// path is one direction between two regions.
type path struct {
	from, to string
	link     Link
	pkts     atomic.Uint64
	dropped  atomic.Uint64
}

// classifier maps an IPv4 packet to its directed path index.
type classifier struct {
	names   []string
	subnets []netip.Prefix
	index   map[[2]int]int
}

func newClassifier(cfg Config) (*classifier, []*path) {
	c := &classifier{names: cfg.regionNames(), index: map[[2]int]int{}}
	for _, n := range c.names {
		c.subnets = append(c.subnets, cfg.Regions[n])
	}
	var paths []*path
	for i, a := range c.names {
		for j, b := range c.names {
			if i == j {
				continue
			}
			c.index[[2]int{i, j}] = len(paths)
			paths = append(paths, &path{from: a, to: b, link: cfg.Links[MakePair(a, b)]})
		}
	}
	return c, paths
}

func (c *classifier) region(a netip.Addr) int {
	for i, p := range c.subnets {
		if p.Contains(a) {
			return i
		}
	}
	return -1
}

// classify returns the path of an IPv4 packet, or -1.
func (c *classifier) classify(pkt []byte) int {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return -1
	}
	src := netip.AddrFrom4([4]byte(pkt[12:16]))
	dst := netip.AddrFrom4([4]byte(pkt[16:20]))
	i, j := c.region(src), c.region(dst)
	if i < 0 || j < 0 || i == j {
		return -1
	}
	return c.index[[2]int{i, j}]
}

// run installs the rules, serves the queue until ctx ends, then removes the
// rules. ready, if not nil, is called once the rules are in place.
func run(ctx context.Context, args []string, getenv func(string) string, ready func()) error {
	cfg, err := parseConfig(args, getenv)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, ready)
}

func serve(ctx context.Context, cfg Config, ready func()) (err error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// iptables calls during cleanup must run even when ctx is already done.
	bg := context.WithoutCancel(ctx)
	ipt, err := pickIPTables(bg, cfg.IPTables)
	if err != nil {
		return err
	}
	hook := hookChain(bg, ipt, cfg.Hook)

	nf, err := nfqueue.Open(&nfqueue.Config{
		NfQueue:      cfg.QueueNum,
		MaxPacketLen: 64, // the IPv4 header is all we read
		MaxQueueLen:  cfg.MaxQueueLen,
		Copymode:     nfqueue.NfQnlCopyPacket,
		WriteTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		return fmt.Errorf("open nfqueue %d: %w", cfg.QueueNum, err)
	}
	defer nf.Close()
	if err := nf.SetOption(netlink.NoENOBUFS, true); err != nil {
		return fmt.Errorf("set NoENOBUFS: %w", err)
	}

	cls, paths := newClassifier(cfg)
	sched := newScheduler(len(paths))
	seed := uint64(cfg.Seed)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var verdictErrs atomic.Uint64

	release := func(id uint32) {
		if err := nf.SetVerdict(id, nfqueue.NfAccept); err != nil {
			verdictErrs.Add(1)
		}
	}
	qctx, cancelQueue := context.WithCancel(bg)
	defer cancelQueue()
	hookFn := func(a nfqueue.Attribute) int {
		if a.PacketID == nil {
			return 0
		}
		id := *a.PacketID
		p := -1
		if a.Payload != nil {
			p = cls.classify(*a.Payload)
		}
		if p < 0 { // not between two regions: let it go at once
			release(id)
			return 0
		}
		pt := paths[p]
		pt.pkts.Add(1)
		// The callback runs on the single netlink receive goroutine, so rng
		// needs no lock.
		if pt.link.Loss > 0 && rng.Float64() < pt.link.Loss {
			pt.dropped.Add(1)
			if err := nf.SetVerdict(id, nfqueue.NfDrop); err != nil {
				verdictErrs.Add(1)
			}
			return 0
		}
		if pt.link.Delay <= 0 {
			release(id)
			return 0
		}
		sched.add(p, id, time.Now(), pt.link.Delay)
		return 0
	}
	errFn := func(e error) int {
		if qctx.Err() != nil {
			return 1
		}
		var opErr *netlink.OpError
		if errors.As(e, &opErr) && opErr.Timeout() {
			return 0
		}
		log.Warn("nfqueue receive", "err", e)
		return 0
	}
	if err := nf.RegisterWithErrorFunc(qctx, hookFn, errFn); err != nil {
		return fmt.Errorf("register nfqueue: %w", err)
	}

	done := make(chan struct{})
	relDone := make(chan struct{})
	go func() {
		defer close(relDone)
		sched.releaser(done, time.Now, release)
	}()
	defer func() {
		// Remove the rules first so no new packet is queued, then release
		// what is held, then stop reading.
		if rerr := removeRules(bg, ipt, cfg.Chain); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove rules: %w", rerr))
		} else {
			log.Info("rules removed", "chain", cfg.Chain)
		}
		close(done)
		<-relDone
		cancelQueue()
	}()

	if err := installRules(bg, ipt, cfg, hook); err != nil {
		return err
	}
	log.Info("wanem running", "iptables", ipt.bin, "hook", hook, "chain", cfg.Chain, "queue", cfg.QueueNum)
	for _, p := range paths {
		log.Info("path", "from", p.from, "to", p.to, "delay", p.link.Delay, "loss", p.link.Loss)
	}
	if ready != nil {
		ready()
	}

	var tick <-chan time.Time
	if cfg.StatsInterval > 0 {
		t := time.NewTicker(cfg.StatsInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			attrs := []any{"held", sched.held(), "verdict_errors", verdictErrs.Load()}
			for _, p := range paths {
				attrs = append(attrs, p.from+"->"+p.to, fmt.Sprintf("%d/%d", p.pkts.Load(), p.dropped.Load()))
			}
			log.Info("stats (packets/dropped)", attrs...)
		}
	}
}
