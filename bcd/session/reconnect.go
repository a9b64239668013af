package session

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"
)

// Defaults for watching the gateway while the reconnect backoff runs.
const (
	// DefaultProbeEvery is how often a node checks, while it waits out its
	// backoff, whether a gateway that refused connections accepts them
	// again: at 250 ms (each check jittered by ±20%) a gateway that
	// listens again is seen within about 0.3 s, at the cost of one TCP
	// SYN (answered by a RST) per node and address every 250 ms while it
	// is down, nothing of TLS or gRPC.
	DefaultProbeEvery = 250 * time.Millisecond
	// DefaultReadyJitter bounds the random delay between seeing the
	// gateway accept connections again and opening the session. The
	// checks' own phases are already spread over DefaultProbeEvery across
	// a fleet, so the TLS handshakes and Hellos of thousands of nodes
	// arrive spread over about half a second rather than in the same
	// millisecond; the worst case (0.3 s to see it, 0.25 s of jitter)
	// stays well within the second the node has to be back.
	DefaultReadyJitter = 250 * time.Millisecond
	// probeTimeout bounds one check's TCP connect: a host that does not
	// answer at all (down, its SYNs dropped) counts as not accepting.
	probeTimeout = time.Second
	// resolveTimeout bounds resolving the gateway's name once per wait.
	resolveTimeout = 2 * time.Second
)

// waitOut waits d before the next session attempt, or less: when the
// gateway refused connections (or did not answer) during the wait and
// then accepts one again, it returns after at most ReadyJitter, so a
// node is back within about half a second of its gateway (or another
// address its name resolves to) listening again instead of after the rest
// of a backoff that grew during the outage. A gateway that accepts
// connections when the wait begins but failed the session (a TLS
// handshake the node refused, the node unknown to it, its database down)
// is checked once and then left alone until the backoff ends: the backoff
// is what keeps a broken server from being hammered. It reports whether
// it returned early.
func (c *Client) waitOut(ctx context.Context, d time.Duration) bool {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	addr := c.watchGateway(wctx)
	if addr == "" {
		<-wctx.Done()
		return false
	}
	jitter := time.Duration(0)
	if c.cfg.ReadyJitter > 0 {
		jitter = time.Duration(rand.Int64N(int64(c.cfg.ReadyJitter) + 1))
	}
	c.logger.Info("the gateway accepts connections again; reconnecting now", "address", addr, "jitter", jitter)
	t := time.NewTimer(jitter)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wctx.Done():
	}
	return true
}

// watchGateway checks the gateway's addresses until ctx ends. It returns
// the address that accepted a connection after every address had refused
// one (or not answered), or "" when ctx ended, when an address accepted at
// the first check (the gateway is reachable: the session failed for
// another reason) or when the address cannot be checked.
func (c *Client) watchGateway(ctx context.Context) string {
	network, addrs, err := probeTargets(ctx, c.cfg.Address)
	if err != nil {
		c.logger.Debug("not watching the gateway while waiting out the backoff", "error", err)
		return ""
	}
	for round := 0; ; round++ {
		start := time.Now()
		if addr := probe(ctx, network, addrs); addr != "" {
			if round == 0 {
				return ""
			}
			return addr
		}
		if ctx.Err() != nil {
			return ""
		}
		if round == 0 {
			c.logger.Debug("the gateway does not accept connections; watching for it to listen again", "addresses", addrs)
		}
		every := c.cfg.ProbeEvery
		every = every*4/5 + time.Duration(rand.Int64N(int64(every)*2/5+1))
		t := time.NewTimer(max(0, every-time.Since(start)))
		select {
		case <-ctx.Done():
			t.Stop()
			return ""
		case <-t.C:
		}
	}
}

// probe connects to every address at once and returns the first that
// accepted (closing the connection at once), or "" when none did.
func probe(ctx context.Context, network string, addrs []string) string {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	accepted := make(chan string, len(addrs))
	for _, a := range addrs {
		go func(a string) {
			var d net.Dialer
			conn, err := d.DialContext(pctx, network, a)
			if err != nil {
				accepted <- ""
				return
			}
			_ = conn.Close()
			accepted <- a
		}(a)
	}
	for range addrs {
		if a := <-accepted; a != "" {
			return a
		}
	}
	return ""
}

// probeTargets turns a gRPC target into the network and addresses to
// check, resolving a name to every address it has, as gRPC's resolver
// does.
func probeTargets(ctx context.Context, target string) (network string, addrs []string, err error) {
	network, host, port, err := parseTarget(target)
	if err != nil {
		return "", nil, err
	}
	if network == "unix" {
		return network, []string{host}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(rctx, host)
	if err != nil {
		return "", nil, fmt.Errorf("resolving %s: %w", host, err)
	}
	if len(ips) == 0 {
		return "", nil, errors.New("resolving " + host + ": no addresses")
	}
	for _, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip, port))
	}
	return "tcp", addrs, nil
}

// parseTarget splits a gRPC target (host:port, dns:///host:port,
// dns://authority/host:port, passthrough:///host:port, unix:path,
// unix:///path) into its network ("tcp" or "unix"), host (or socket path)
// and port. Other schemes are not checked: an error says which.
func parseTarget(target string) (network, host, port string, err error) {
	hostPort := target
	switch {
	case strings.HasPrefix(target, "unix:"):
		path := strings.TrimPrefix(strings.TrimPrefix(target, "unix:"), "//")
		if path == "" {
			return "", "", "", fmt.Errorf("target %q: no socket path", target)
		}
		return "unix", path, "", nil
	case strings.HasPrefix(target, "dns:"), strings.HasPrefix(target, "passthrough:"):
		rest := target[strings.Index(target, ":")+1:]
		if strings.HasPrefix(rest, "//") {
			// dns://authority/host:port: the host:port follows the authority.
			i := strings.Index(rest[2:], "/")
			if i < 0 {
				return "", "", "", fmt.Errorf("target %q: no host:port after the authority", target)
			}
			rest = rest[2+i+1:]
		}
		hostPort = rest
	case strings.Contains(target, "://"):
		return "", "", "", fmt.Errorf("target %q: its scheme is not one bcd can check (host:port, dns:, passthrough:, unix:)", target)
	}
	host, port, err = net.SplitHostPort(hostPort)
	if err != nil {
		return "", "", "", fmt.Errorf("target %q: %w", target, err)
	}
	if port == "" {
		return "", "", "", fmt.Errorf("target %q: no port", target)
	}
	if host == "" {
		host = "localhost"
	}
	return "tcp", host, port, nil
}
