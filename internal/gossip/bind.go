package gossip

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// Binding: a node listens on exactly the addresses its bind host names.
//
// memberlist binds an IP literal as given, but a name it does not
// resolve: it parses the host as an IP, gets none, and listens on every
// interface. So "localhost:7946" would listen on *:7946, reachable from
// every network the machine is on, while the name says this machine only.
// A Node resolves the host itself, with Config.Resolver, and binds every
// address the name resolves to and no other; it is advertised at the
// first. An empty host, 0.0.0.0 or :: is every interface, as named.
// Without a key, every address it binds and advertises must be loopback.

// resolveTimeout bounds the lookup of a bind or advertise host name.
const resolveTimeout = 10 * time.Second

// bindHosts returns the addresses host names: none for every interface
// (an empty or unspecified host, which binds "0.0.0.0" or "::" as given),
// an IP literal itself, else every address the name resolves to, in the
// resolver's order, without duplicates.
func bindHosts(ctx context.Context, r *net.Resolver, host string) (ips []net.IP, any bool, err error) {
	if host == "" {
		return nil, true, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}, ip.IsUnspecified(), nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := r.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, false, fmt.Errorf("resolve %q: %w", host, err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if a.Zone != "" {
			continue // a link-local address needs its zone, which a bind address cannot carry
		}
		if k := a.IP.String(); !seen[k] {
			seen[k] = true
			ips = append(ips, a.IP)
		}
	}
	if len(ips) == 0 {
		return nil, false, fmt.Errorf("resolve %q: no addresses", host)
	}
	for _, ip := range ips {
		if ip.IsUnspecified() {
			return nil, false, fmt.Errorf("resolve %q: resolves to %s, every interface: name it as such", host, ip)
		}
	}
	return ips, false, nil
}

// notLoopback returns the first of ips that is not a loopback address, or
// "" when they all are; any (every interface) is never loopback.
func notLoopback(ips []net.IP, any bool) string {
	if any {
		return "every interface"
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return ip.String()
		}
	}
	return ""
}

// bound is what a Node listens on and is advertised at.
type bound struct {
	transport *memberlist.NetTransport // nil when Config.Transport is set
	advertise string                   // IP for memberlist's AdvertiseAddr, "" for its default
}

// bind resolves c's bind and advertise hosts, refuses a keyless node on
// any address that is not loopback (ErrNoKey) unless c.Insecure, and
// listens on every bind address (unless c.Transport is set, whose own
// address is checked instead), its log lines rate-limited by lim.
func (c Config) bind(ctx context.Context, keyed bool, lim *logLimiter) (bound, error) {
	var b bound
	check := func(what, addr string, ips []net.IP, any bool) error {
		if keyed || c.Insecure {
			return nil
		}
		if bad := notLoopback(ips, any); bad != "" {
			return fmt.Errorf("%w: %w: %s %s is %s, not loopback", ErrConfig, ErrNoKey, what, addr, bad)
		}
		return nil
	}
	if c.AdvertiseAddr != "" {
		h, _, _ := splitHostPort(c.AdvertiseAddr)
		ips, any, err := bindHosts(ctx, c.Resolver, h)
		if err != nil {
			return b, fmt.Errorf("%w: advertise address: %w", ErrConfig, err)
		}
		if any {
			return b, fmt.Errorf("%w: advertise address %s names no single address", ErrConfig, c.AdvertiseAddr)
		}
		if err := check("advertise address", c.AdvertiseAddr, ips, false); err != nil {
			return b, err
		}
		b.advertise = ips[0].String()
	}
	if c.Transport != nil {
		if !keyed && !c.Insecure && c.AdvertiseAddr == "" {
			if ip, _, err := c.Transport.FinalAdvertiseAddr("", 0); err == nil && !ip.IsLoopback() {
				return b, fmt.Errorf("%w: %w: transport address %s is not loopback", ErrConfig, ErrNoKey, ip)
			}
		}
		return b, nil
	}
	h, p, _ := splitHostPort(c.BindAddr)
	ips, any, err := bindHosts(ctx, c.Resolver, h)
	if err != nil {
		return b, fmt.Errorf("%w: bind address: %w", ErrConfig, err)
	}
	if err := check("bind address", c.BindAddr, ips, any); err != nil {
		return b, err
	}
	nt, err := listenHosts(hostList(h, ips, any), p, newStdLogger(c.Logger, nil, lim))
	if err != nil {
		return b, fmt.Errorf("gossip: listen %s: %w", c.BindAddr, err)
	}
	b.transport = nt
	return b, nil
}

// hostList is what memberlist's transport binds for host, which resolved
// to ips (see bindHosts): each IP, or, for every interface, the host as
// given, an empty one as "0.0.0.0" (memberlist then advertises a private
// IP, not [::]).
func hostList(host string, ips []net.IP, any bool) []string {
	if any {
		if host == "" {
			host = "0.0.0.0"
		}
		return []string{host}
	}
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// listenHosts starts memberlist's UDP/TCP transport on every host (IP
// literals, or "0.0.0.0" or "::") at port p; port 0 picks one that is free
// on all of them, trying up to 10 times.
func listenHosts(hosts []string, p int, logger *log.Logger) (*memberlist.NetTransport, error) {
	var lastErr error
	for range 10 {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: hosts, BindPort: p, Logger: logger})
		if err == nil {
			return nt, nil
		}
		lastErr = err
		if p != 0 {
			break
		}
	}
	return nil, lastErr
}

// Listen returns memberlist's UDP/TCP transport bound to addr (host:port;
// port 0 picks a free one), for wrapping in a FaultTransport and passing as
// Config.Transport. A host name is resolved and every address it names is
// bound, as New does.
func Listen(addr string, logger *slog.Logger) (*memberlist.NetTransport, error) {
	h, p, err := splitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("gossip: listen %q: %w", addr, err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	ips, any, err := bindHosts(context.Background(), nil, h)
	if err != nil {
		return nil, fmt.Errorf("gossip: listen %q: %w", addr, err)
	}
	nt, err := listenHosts(hostList(h, ips, any), p, newStdLogger(logger, nil, nil))
	if err != nil {
		return nil, fmt.Errorf("gossip: listen %q: %w", addr, err)
	}
	return nt, nil
}
