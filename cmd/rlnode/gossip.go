package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/rlcluster/rlcluster/internal/api"
	"github.com/rlcluster/rlcluster/internal/api/status"
	"github.com/rlcluster/rlcluster/internal/gossip"
)

// gossipSettings returns the gossip node's configuration that the flags
// set, from gossip.DefaultWANConfig: all but the keys, the API address,
// the clock, the logger and the store's epoch, which run adds.
// parseConfig validates it.
func (c config) gossipSettings() gossip.Config {
	cfg := gossip.DefaultWANConfig()
	cfg.Name, cfg.Region = c.NodeName, c.Region
	cfg.BindAddr, cfg.AdvertiseAddr, cfg.Insecure = c.GossipAddr, c.GossipAdvertise, c.GossipInsecure
	cfg.FlushInterval, cfg.MaxStaleness, cfg.HeartbeatInterval = c.FlushInterval, c.MaxStaleness, c.HeartbeatInterval
	cfg.Suspicion, cfg.GuardMargin, cfg.JoinTimeout = c.BurstGuardSuspicion, c.BurstGuardMargin, c.JoinTimeout
	if cfg.GuardMargin == 0 {
		cfg.GuardMargin = -1 // the flag's 0 is none; gossip's zero is its default
	}
	if cfg.MaxStaleness == 0 {
		cfg.MaxStaleness = -1 // the flag's 0 is "no waiting"; gossip's zero is its default
	}
	if cfg.JoinTimeout == 0 {
		cfg.JoinTimeout = -1 // the flag's 0 is "never"; gossip's zero is its default
	}
	for _, s := range strings.Split(c.Join, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Join = append(cfg.Join, s)
		}
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(c.GossipAddr)
		cfg.Name = host + ":" + port
	}
	return cfg
}

// gossipStartErr explains a gossip configuration that Validate (in
// parseConfig) or New refused: without a key on an address that is not
// loopback (gossip.ErrNoKey: every address the bind and advertise hosts
// resolve to is checked, so a name such as "localhost" is judged by what
// it names), it says how to make one; a setting gossip's Validate refuses
// is named by its flag.
func gossipStartErr(err error) error {
	switch {
	case errors.Is(err, gossip.ErrNoKey):
		return fmt.Errorf("--gossip-addr/--gossip-advertise: %w; gossip there needs a key, "+
			"so that only members can join and report counts: make one with `head -c 32 /dev/urandom | base64` and give it to every node "+
			"with %s or --gossip-key-file (or --gossip-key); --gossip-insecure runs without one, for labs only", err, envName("gossip-key"))
	case errors.Is(err, gossip.ErrConfig):
		return errors.Join(flagErrors(err, gossip.ErrConfig, map[string]bool{})...)
	}
	return fmt.Errorf("start gossip: %w", err)
}

// gossipReady is the /readyz check of a node started with --join: not
// ready once --gossip-join-timeout has passed without reaching another
// region, nor, with the burst guard on (guarded), while the guard holds
// its decisions after its start or join until its region's other nodes
// count it (guard.View.Joining), so that a load balancer sends it
// nothing the guard would refuse as joining.
func gossipReady(n *gossip.Node, guarded bool, now func() time.Time) api.ReadyCheck {
	return api.ReadyCheck{Name: "gossip", Check: func(context.Context) error {
		if v := n.GuardView(now()); guarded && v.Joining > 0 && !v.Off() {
			return fmt.Errorf("joining: this region's other nodes may not count this node for %v more", v.Joining.Round(time.Millisecond))
		}
		if err := n.Ready(); err != nil {
			// The check's name already says "gossip: ": no second one.
			return fmt.Errorf("%s: check --join and --gossip-key", strings.TrimPrefix(err.Error(), "gossip: "))
		}
		return nil
	}}
}

// decodeGossipKey decodes a base64 AES key of 16, 24 or 32 bytes. The
// error never repeats the key.
func decodeGossipKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("not valid base64 (make one with: head -c 32 /dev/urandom | base64)")
	}
	if err := gossip.CheckKey(key); err != nil {
		return nil, err
	}
	return key, nil
}

// advertisedAPI returns the API address to show other nodes: the listen
// address, with an unspecified host (0.0.0.0, ::, empty) replaced by the
// gossip advertise or bind host when that one is specific.
func advertisedAPI(listen string, c config) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return listen
	}
	for _, a := range []string{c.GossipAdvertise, c.GossipAddr} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" {
			if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
				return net.JoinHostPort(h, port)
			}
		}
	}
	return listen
}

// cluster adapts a gossip.Node to status.Cluster, for the status page.
type cluster struct{ n *gossip.Node }

var _ status.Cluster = cluster{}

func (c cluster) Members() []status.Member {
	ms := c.n.Members()
	out := make([]status.Member, len(ms))
	for i, m := range ms {
		out[i] = status.Member{Name: m.Name, Region: m.Region, Addr: m.Addr, APIAddr: m.APIAddr,
			State: m.State, Since: m.Since, Local: m.Local}
	}
	return out
}

func (c cluster) ClockOffsets() map[string]time.Duration { return c.n.ClockOffsets() }

// watcher adapts a gossip.Accuracy to status.Watcher, for the status
// page's watched key.
type watcher struct{ a *gossip.Accuracy }

var _ status.Watcher = watcher{}

func (w watcher) Watch(ctx context.Context, key string) (status.Watch, error) {
	kw, err := w.a.Watch(ctx, key)
	out := status.Watch{Rule: kw.Label, Window: kw.Window, Limit: kw.Limit}
	for _, wc := range kw.Windows {
		sw := status.Window{Bucket: wc.Bucket, Start: wc.Start, Closed: wc.Closed, Total: wc.Total}
		for _, t := range wc.Regions {
			sw.Regions = append(sw.Regions, status.RegionCount{Region: t.Region, Count: t.Count})
		}
		out.Windows = append(out.Windows, sw)
	}
	return out, err
}

func (w watcher) Staleness() []status.StalenessSample {
	ss := w.a.Staleness()
	out := make([]status.StalenessSample, len(ss))
	for i, s := range ss {
		out[i] = status.StalenessSample{Time: s.Time, Ages: s.Ages}
	}
	return out
}
