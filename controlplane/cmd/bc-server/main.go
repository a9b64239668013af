// Command bc-server runs the control plane: the public API (commands.run, get,
// list, cancel, events.watch and nodes) with gRPC reflection and health;
// /healthz, /readyz and /metrics over HTTP; with --gateway-listen, the node
// gateway (sessions and join); and the CommandSweeper.
//
//	bc-server --config /etc/better-compute/server.yaml
//	bc-server --grpc-listen 127.0.0.1:7443 --auth-config auth.yaml --database-url postgres://…
//	bc-server … --gateway-listen :7444 --ca-dir /var/lib/bc-controlplane/node-ca
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run parses flags over the config file and serves until ctx ends.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bc-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		configPath  = fs.String("config", "", "config file (YAML)")
		grpcListen  = fs.String("grpc-listen", "", "API address (default "+server.DefaultGRPCListen+")")
		httpListen  = fs.String("http-listen", "", "health and metrics address (default "+server.DefaultHTTPListen+"; \"off\" disables)")
		databaseURL = fs.String("database-url", "", "PostgreSQL URL (default: the PG* variables)")
		authFile    = fs.String("auth-config", "", "identities and grants (YAML)")
		kindsDir    = fs.String("kinds-dir", "", "directory of third-party kind manifests")
		tlsCert     = fs.String("tls-cert", "", "server certificate (PEM)")
		tlsKey      = fs.String("tls-key", "", "server key (PEM)")
		clientCA    = fs.String("client-ca", "", "CA that verifies client certificates (PEM)")
		gwListen    = fs.String("gateway-listen", "", "node gateway address, Session and Join (e.g. "+server.DefaultGatewayListen+"; off when unset)")
		caDir       = fs.String("ca-dir", "", "node CA directory (ca.pem, ca-key.pem; created if missing)")
		sweepEvery  = fs.Duration("sweep-interval", 0, "how often the CommandSweeper runs (default 5s)")
		maxConns    = fs.Int("max-conns", 0, "database pool size (default 4 per CPU, at least 8)")
		logLevel    = fs.String("log-level", "", "trace, debug, info, warn, error")
		logJSON     = fs.Bool("log-json", false, "log as JSON")
		shutdown    = fs.Duration("shutdown-timeout", 0, "graceful stop bound (default 15s)")
		showVersion = fs.Bool("version", false, "print the version and exit")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: bc-server [flags]\n\nFlags override the config file's settings.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stderr, version.Version)
		return 0
	}
	cfg := server.DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = server.LoadConfig(*configPath); err != nil {
			fmt.Fprintf(stderr, "bc-server: %v\n", err)
			return 2
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	str := func(name string, dst *string, v string) {
		if set[name] {
			*dst = v
		}
	}
	str("grpc-listen", &cfg.GRPCListen, *grpcListen)
	str("http-listen", &cfg.HTTPListen, *httpListen)
	if cfg.HTTPListen == "off" {
		cfg.HTTPListen = ""
	}
	str("database-url", &cfg.DatabaseURL, *databaseURL)
	str("auth-config", &cfg.AuthFile, *authFile)
	str("kinds-dir", &cfg.KindsDir, *kindsDir)
	str("tls-cert", &cfg.TLS.Cert, *tlsCert)
	str("tls-key", &cfg.TLS.Key, *tlsKey)
	str("client-ca", &cfg.TLS.ClientCA, *clientCA)
	str("log-level", &cfg.LogLevel, *logLevel)
	str("gateway-listen", &cfg.Gateway.Listen, *gwListen)
	str("ca-dir", &cfg.Gateway.CADir, *caDir)
	if set["sweep-interval"] {
		cfg.Sweeper.Interval = server.Duration(*sweepEvery)
	}
	if set["max-conns"] {
		cfg.MaxConns = int32(*maxConns)
	}
	if set["log-json"] {
		cfg.LogJSON = *logJSON
	}
	if set["shutdown-timeout"] {
		cfg.ShutdownTimeout = server.Duration(*shutdown)
	}
	if set["auth-config"] {
		cfg.Auth.Identities = nil
	}

	logger := hclog.New(&hclog.LoggerOptions{
		Name: "bc-server", Level: hclog.LevelFromString(cfg.LogLevel), JSONFormat: cfg.LogJSON, Output: stderr,
		TimeFormat: time.RFC3339,
	})
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	srv, err := server.New(startCtx, cfg, nil, logger)
	cancel()
	if err != nil {
		logger.Error("cannot start", "error", err)
		return 1
	}
	// SIGHUP re-reads the identities (the config file's auth section or the
	// auth file), so that tokens and grants change without a restart.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				next := cfg
				if *configPath != "" {
					fresh, err := server.LoadConfig(*configPath)
					if err != nil {
						logger.Error("reload refused", "error", err)
						continue
					}
					if !set["auth-config"] {
						next.Auth, next.AuthFile = fresh.Auth, fresh.AuthFile
					}
				}
				if err := srv.ReloadAuth(next); err != nil {
					logger.Error("reload refused", "error", err)
				}
				if *configPath != "" {
					if fresh, err := server.LoadConfig(*configPath); err == nil {
						if err := srv.ReloadPKI(ctx, fresh.PKI); err != nil {
							logger.Error("pki reload refused", "error", err)
						}
					}
				}
				if err := srv.ReloadKinds(next.KindsDir); err != nil {
					logger.Error("kinds reload refused", "error", err)
				}
			}
		}
	}()
	if err := srv.Run(ctx); err != nil {
		logger.Error("stopped with an error", "error", err)
		return 1
	}
	return 0
}
