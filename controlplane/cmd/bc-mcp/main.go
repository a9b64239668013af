// Command bc-mcp is the MCP server for agents (package controlplane/front/mcp): an
// API client of bc-server with its own agent principal. It serves over stdio
// by default, or streamable HTTP with bearer tokens of its own:
//
//	bc-mcp --endpoint bc.example:7443 --tenant tenant_a --token-file agent.token
//	bc-mcp … --http :8765 --http-tokens mcp-tokens.txt
//
// Settings come from flags, else BC_MCP_* variables; never from the CLI's
// config file or BC_TOKEN, so a person's token cannot become the agent's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/controlplane/front/mcp"
	"github.com/better-compute/commands/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses the flags and serves until the client leaves (stdio) or ctx
// ends. stdout belongs to the stdio transport: everything else goes to
// stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bc-mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var (
		endpoint    = fs.String("endpoint", env("BC_MCP_ENDPOINT", "localhost:7443"), "bc-server API host:port (http:// for plaintext) [BC_MCP_ENDPOINT]")
		tokenFile   = fs.String("token-file", env("BC_MCP_TOKEN_FILE", ""), "the agent identity's API bearer token [BC_MCP_TOKEN_FILE; or BC_MCP_TOKEN]")
		tenant      = fs.String("tenant", env("BC_MCP_TENANT", ""), "the tenant the agent works in [BC_MCP_TENANT]")
		caCert      = fs.String("ca-cert", env("BC_MCP_CA_CERT", ""), "CA that verifies bc-server (PEM) [BC_MCP_CA_CERT]")
		cert        = fs.String("cert", env("BC_MCP_CERT", ""), "client certificate for mTLS (PEM) [BC_MCP_CERT]")
		key         = fs.String("key", env("BC_MCP_KEY", ""), "client key for mTLS (PEM) [BC_MCP_KEY]")
		plaintext   = fs.Bool("plaintext", false, "no TLS to bc-server (loopback only) [BC_MCP_PLAINTEXT]")
		allowKinds  = fs.String("allow-kinds", strings.Join(mcp.DefaultAllowlist, ","), "kinds exec_command and create_fleet_run run, comma-separated: read-only kinds only")
		batchKinds  = fs.String("batch-kinds", strings.Join(mcp.DefaultBatchKinds, ","), "kinds exec_command runs only in a batch people approve, and propose_fleet_run proposes (empty: none)")
		maxField    = fs.Int("max-field-bytes", mcp.DefaultMaxFieldBytes, "cut a result, progress, payload or inventory over this many bytes of JSON")
		maxString   = fs.Int("max-string-len", mcp.DefaultMaxStringLen, "cut every string to this many characters")
		httpAddr    = fs.String("http", "", "serve streamable HTTP on host:port instead of stdio (\":PORT\" is loopback)")
		httpTokens  = fs.String("http-tokens", "", "bearer tokens MCP clients present over HTTP: NAME TOKEN or NAME sha256:HEX, one a line")
		httpMaxBody = fs.Int64("http-max-body", mcp.DefaultMaxBodyBytes, "largest HTTP request body in bytes")
		httpRemote  = fs.Bool("http-allow-remote", false, "allow a non-loopback --http address (needs TLS)")
		httpCert    = fs.String("http-tls-cert", "", "serve HTTPS with this certificate (PEM)")
		httpKey     = fs.String("http-tls-key", "", "serve HTTPS with this key (PEM)")
		logLevel    = fs.String("log-level", env("BC_MCP_LOG_LEVEL", "info"), "trace, debug, info, warn, error")
		logJSON     = fs.Bool("log-json", false, "log as JSON")
		showVersion = fs.Bool("version", false, "print the version and exit")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: bc-mcp --tenant TENANT --token-file FILE [flags]\n\nServes MCP over stdio unless --http is given.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stderr, version.Version)
		return 0
	}
	if v := getenv("BC_MCP_PLAINTEXT"); v != "" && !flagSet(fs, "plaintext") {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fmt.Fprintf(stderr, "bc-mcp: BC_MCP_PLAINTEXT=%q: %v\n", v, err)
			return 2
		}
		*plaintext = b
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "bc-mcp", Level: hclog.LevelFromString(*logLevel), Output: stderr, JSONFormat: *logJSON})

	token := getenv("BC_MCP_TOKEN")
	if *tokenFile != "" {
		var err error
		if token, err = mcp.ReadToken(*tokenFile); err != nil {
			logger.Error("cannot read the API token", "error", err)
			return 2
		}
	}
	conn, err := mcp.Dial(mcp.APISettings{Endpoint: *endpoint, Token: token, CACert: *caCert, Cert: *cert, Key: *key, Plaintext: *plaintext})
	if err != nil {
		logger.Error("cannot reach the API", "error", err)
		return 2
	}
	defer conn.Close()
	srv, err := mcp.New(conn, mcp.Config{Tenant: *tenant, Allowlist: list(*allowKinds), BatchKinds: list(*batchKinds),
		MaxFieldBytes: *maxField, MaxStringLen: *maxString, Version: version.Version, Logger: logger})
	if err != nil {
		logger.Error("bad configuration", "error", err)
		return 2
	}

	if *httpAddr == "" {
		if err := srv.ServeStdio(ctx); err != nil {
			logger.Error("serving stopped", "error", err)
			return 1
		}
		return 0
	}
	if *httpTokens == "" {
		logger.Error("--http needs --http-tokens")
		return 2
	}
	tokens, err := mcp.LoadTokens(*httpTokens)
	if err != nil {
		logger.Error("cannot load the HTTP tokens", "error", err)
		return 2
	}
	err = srv.ServeHTTP(ctx, mcp.HTTPConfig{Addr: *httpAddr, Tokens: tokens, MaxBodyBytes: *httpMaxBody,
		AllowRemote: *httpRemote, TLSCert: *httpCert, TLSKey: *httpKey},
		func(a net.Addr) { fmt.Fprintf(stderr, "bc-mcp: listening on %s\n", a) })
	if errors.Is(err, mcp.ErrRemoteRefused) {
		logger.Error("refusing to listen", "error", err)
		return 2
	}
	if err != nil {
		logger.Error("serving stopped", "error", err)
		return 1
	}
	return 0
}

// list splits a comma-separated flag; an empty flag is an empty, non-nil
// list (none), not the default.
func list(s string) []string {
	out := []string{}
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
