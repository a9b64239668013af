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
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/internal/flagcompat"
	"github.com/better-compute/commands/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cmdline is what the command line says: the flags bind to these fields,
// and set records which were given, so that only those override the config
// file.
type cmdline struct {
	fs *pflag.FlagSet

	configPath  string
	grpcListen  string
	httpListen  string
	databaseURL string
	authFile    string
	kindsDir    string
	tlsCert     string
	tlsKey      string
	clientCA    string
	gwListen    string
	caDir       string
	sweepEvery  time.Duration
	maxConns    int
	logLevel    string
	logJSON     bool
	shutdown    time.Duration
	components  []string
	showVersion bool
}

// newCmdline registers bc-server's flags: --double-dash, as bcd's and
// better-compute's (pflag), with the names the single-dash Go flags had.
func newCmdline() *cmdline {
	c := &cmdline{fs: pflag.NewFlagSet("bc-server", pflag.ContinueOnError)}
	fs := c.fs
	fs.StringVar(&c.configPath, "config", "", "config file (YAML)")
	fs.StringVar(&c.grpcListen, "grpc-listen", "", "API address (default "+server.DefaultGRPCListen+")")
	fs.StringVar(&c.httpListen, "http-listen", "", "health and metrics address (default "+server.DefaultHTTPListen+"; \"off\" disables)")
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL (default: the PG* variables)")
	fs.StringVar(&c.authFile, "auth-config", "", "identities and grants (YAML)")
	fs.StringVar(&c.kindsDir, "kinds-dir", "", "directory of third-party kind manifests")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "server certificate (PEM)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "server key (PEM)")
	fs.StringVar(&c.clientCA, "client-ca", "", "CA that verifies client certificates (PEM)")
	fs.StringVar(&c.gwListen, "gateway-listen", "", "node gateway address, Session and Join (e.g. "+server.DefaultGatewayListen+"; off when unset)")
	fs.StringVar(&c.caDir, "ca-dir", "", "node CA directory (ca.pem, ca-key.pem; created if missing)")
	fs.DurationVar(&c.sweepEvery, "sweep-interval", 0, "how often the CommandSweeper runs (default 5s)")
	fs.IntVar(&c.maxConns, "max-conns", 0, "database pool size (default 4 per CPU, at least 8)")
	fs.StringVar(&c.logLevel, "log-level", "", "trace, debug, info, warn, error")
	fs.BoolVar(&c.logJSON, "log-json", false, "log as JSON")
	fs.DurationVar(&c.shutdown, "shutdown-timeout", 0, "graceful stop bound (default 15s)")
	fs.StringSliceVar(&c.components, "components", nil, "the parts this process runs: api, gateway, sweeper, modules (default all; modules runs beside api); a gateway-only process reads no signing key")
	fs.BoolVarP(&c.showVersion, "version", "v", false, "print the version and exit")
	// pflag would print its own usage on -h and on every error; usage
	// below decides where it goes (stdout for --help, stderr for a mistake).
	fs.Usage = func() {}
	fs.SortFlags = false
	return c
}

// usage writes the synopsis and every flag.
func (c *cmdline) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: bc-server [--config FILE] [flags]\n\nRuns the control plane. Flags override the config file's settings.\n\nFlags:\n%s", c.fs.FlagUsages())
}

// parse reads args. A long flag spelt with one dash, as the Go flag package
// allowed (-config), still works for this release: it is read as its --
// spelling and warnings holds one line per such flag, naming the new form,
// so that an old unit file or script keeps starting bc-server and says the
// fix.
func (c *cmdline) parse(args []string) (warnings []string, err error) {
	args, rewrites := flagcompat.SingleDash(c.fs, args)
	for _, r := range rewrites {
		warnings = append(warnings, r.Warning())
	}
	return warnings, c.fs.Parse(args)
}

// apply sets on cfg what the flags given say; flags not given leave the
// config file's values.
func (c *cmdline) apply(cfg *server.Config) {
	set := func(name string) bool { return c.fs.Changed(name) }
	str := func(name string, dst *string, v string) {
		if set(name) {
			*dst = v
		}
	}
	str("grpc-listen", &cfg.GRPCListen, c.grpcListen)
	str("http-listen", &cfg.HTTPListen, c.httpListen)
	if cfg.HTTPListen == "off" {
		cfg.HTTPListen = ""
	}
	str("database-url", &cfg.DatabaseURL, c.databaseURL)
	str("auth-config", &cfg.AuthFile, c.authFile)
	str("kinds-dir", &cfg.KindsDir, c.kindsDir)
	str("tls-cert", &cfg.TLS.Cert, c.tlsCert)
	str("tls-key", &cfg.TLS.Key, c.tlsKey)
	str("client-ca", &cfg.TLS.ClientCA, c.clientCA)
	str("log-level", &cfg.LogLevel, c.logLevel)
	str("gateway-listen", &cfg.Gateway.Listen, c.gwListen)
	str("ca-dir", &cfg.Gateway.CADir, c.caDir)
	if set("sweep-interval") {
		cfg.Sweeper.Interval = server.Duration(c.sweepEvery)
	}
	if set("max-conns") {
		cfg.MaxConns = int32(c.maxConns)
	}
	if set("log-json") {
		cfg.LogJSON = c.logJSON
	}
	if set("shutdown-timeout") {
		cfg.ShutdownTimeout = server.Duration(c.shutdown)
	}
	if set("auth-config") {
		cfg.Auth.Identities = nil
	}
	if set("components") {
		cfg.Components = append([]string(nil), c.components...)
	}
}

// run parses flags over the config file and serves until ctx ends. --help
// and --version print to stdout and exit 0; a usage error exits 2.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCmdline()
	c.fs.SetOutput(io.Discard)
	warnings, err := c.parse(args)
	for _, w := range warnings {
		fmt.Fprintf(stderr, "bc-server: warning: %s\n", w)
	}
	if err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			c.usage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "bc-server: %v\n\n", err)
		c.usage(stderr)
		return 2
	}
	if c.fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bc-server: unexpected argument %q (bc-server takes only flags)\n\n", c.fs.Arg(0))
		c.usage(stderr)
		return 2
	}
	if c.showVersion {
		fmt.Fprintln(stdout, version.Version)
		return 0
	}
	cfg := server.DefaultConfig()
	if c.configPath != "" {
		var err error
		if cfg, err = server.LoadConfig(c.configPath); err != nil {
			fmt.Fprintf(stderr, "bc-server: %v\n", err)
			return 2
		}
	}
	c.apply(&cfg)

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
				if c.configPath != "" {
					fresh, err := server.LoadConfig(c.configPath)
					if err != nil {
						logger.Error("reload refused", "error", err)
						continue
					}
					if !c.fs.Changed("auth-config") {
						next.Auth, next.AuthFile = fresh.Auth, fresh.AuthFile
					}
				}
				if err := srv.ReloadAuth(next); err != nil {
					logger.Error("reload refused", "error", err)
				}
				if c.configPath != "" {
					if fresh, err := server.LoadConfig(c.configPath); err == nil {
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
