package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrNotLocal is returned for a metricsListen that is neither a loopback
// address nor a unix socket: bcd's metrics are for the node's own agent
// (node_exporter's textfile, a local Prometheus agent), never the network.
var ErrNotLocal = errors.New("metricsListen must be a loopback address (127.0.0.1:9464, [::1]:9464, localhost:9464) or a unix socket (unix:/run/bcd/metrics.sock)")

// Parse splits a metricsListen value into a network and an address:
// "unix:PATH" is a unix socket, anything else a loopback host:port.
func Parse(listen string) (network, addr string, err error) {
	if p, ok := strings.CutPrefix(listen, "unix:"); ok {
		p = strings.TrimPrefix(p, "//")
		if p == "" {
			return "", "", fmt.Errorf("metricsListen %q: %w", listen, ErrNotLocal)
		}
		return "unix", p, nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", "", fmt.Errorf("metricsListen %q: %w", listen, ErrNotLocal)
	}
	if host == "localhost" {
		return "tcp", listen, nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", "", fmt.Errorf("metricsListen %q: %w", listen, ErrNotLocal)
	}
	return "tcp", listen, nil
}

// Listen binds listen (see Parse). A unix socket's directory is created
// (0750) when missing, a stale socket from an earlier run is removed first,
// and the socket is made 0660.
func Listen(listen string) (net.Listener, error) {
	network, addr, err := Parse(listen)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if err := os.MkdirAll(filepath.Dir(addr), 0o750); err != nil {
			return nil, fmt.Errorf("metricsListen: %w", err)
		}
		if err := os.Remove(addr); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("metricsListen: removing the old socket: %w", err)
		}
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("metricsListen: %w", err)
	}
	if network == "unix" {
		if err := os.Chmod(addr, 0o660); err != nil { //nolint:gosec // the metrics socket is for the node's scraper, which runs as another user
			_ = l.Close()
			return nil, fmt.Errorf("metricsListen: %w", err)
		}
	}
	return l, nil
}

// Serve serves /metrics on l until ctx ends, then closes it.
func (m *Metrics) Serve(ctx context.Context, logger hclog.Logger, l net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { //nolint:gosec // G118: this goroutine shuts the server down once ctx ends, so it needs a context of its own that ctx's end does not cut
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("serving metrics", "address", l.Addr().String())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		logger.Error("metrics listener failed", "error", err)
	}
	<-done
}
