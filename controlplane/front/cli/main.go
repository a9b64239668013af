package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/internal/version"
)

// Exit codes.
const (
	// ExitOK: the call succeeded (and with --wait, the command succeeded).
	ExitOK = 0
	// ExitError: the call failed (an API error, a connection error).
	ExitError = 1
	// ExitUsage: the command line was wrong.
	ExitUsage = 2
	// ExitCommandFailed: with --wait, the command ended failed, rejected,
	// expired or cancelled, or the fleet run ended failed or cancelled.
	ExitCommandFailed = 3
)

// Env is how Main sees its process: arguments, streams and environment.
type Env struct {
	Args   []string
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	// IsTerminal says whether a stream is a terminal (a --wait progress bar
	// is redrawn in place on one); nil asks the operating system.
	IsTerminal func(io.Writer) bool
}

// OSEnv is the process's own Env.
func OSEnv() Env {
	return Env{Args: os.Args[1:], Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// app is one invocation's state.
type app struct {
	env        Env
	flags      Settings
	configPath string
	root       *cobra.Command
	settings   Settings
	conn       *grpc.ClientConn
}

// Main runs the CLI and returns its exit code. Tests call it in process.
func Main(ctx context.Context, env Env) int {
	a := &app{env: env}
	a.root = a.rootCommand()
	a.root.SetArgs(env.Args)
	a.root.SetOut(env.Stdout)
	a.root.SetErr(env.Stderr)
	err := a.root.ExecuteContext(ctx)
	if a.conn != nil {
		_ = a.conn.Close()
	}
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	code := ExitError
	if errors.As(err, &ee) {
		code = ee.code
	} else if strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag") ||
		strings.Contains(err.Error(), "flag needs an argument") || strings.HasPrefix(err.Error(), "invalid argument") {
		code = ExitUsage
	}
	if in, ok := apierr.Parse(errors.Unwrap(err)); ok {
		fmt.Fprintf(env.Stderr, "error: %s\n", in)
	} else if in, ok := apierr.Parse(err); ok {
		fmt.Fprintf(env.Stderr, "error: %s\n", in)
	} else if ee == nil || ee.err != nil {
		fmt.Fprintf(env.Stderr, "error: %v\n", err)
	}
	return code
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "better-compute",
		Short: "Run and follow node commands through the better-compute API",
		Long: `better-compute talks to the control plane's gRPC API.

  better-compute api commands.run tenantId=$TENANT nodeId=node_… kind=node.reboot idempotencyKey=reboot-0412
  better-compute commands run nodeId=node_… kind=diag.nvml --wait
  better-compute commands list nodeId=node_… state=failed
  better-compute commands watch

Endpoint and credentials come from flags, else the environment (BC_ENDPOINT,
BC_TOKEN, BC_TOKEN_FILE, BC_TENANT, BC_CA_CERT, BC_CERT, BC_KEY, BC_PLAINTEXT),
else the config file ($BC_CONFIG or ~/.config/better-compute/config.yaml, with
the keys endpoint, token, tokenFile, tenant, caCert, cert, key, plaintext).

Exit codes: 0 success; 1 the call failed; 2 usage; 3 with --wait, the command
ended failed, rejected, expired or cancelled, or the fleet run (runs) ended
failed or cancelled.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.Endpoint, "endpoint", "", "API endpoint host:port (http:// for plaintext) [BC_ENDPOINT]")
	pf.StringVar(&a.flags.Token, "token", "", "bearer token [BC_TOKEN]")
	pf.StringVar(&a.flags.TokenFile, "token-file", "", "file holding the bearer token [BC_TOKEN_FILE]")
	pf.StringVar(&a.flags.Tenant, "tenant", "", "tenant id used when a request leaves tenantId out [BC_TENANT]")
	pf.StringVar(&a.flags.CACert, "ca-cert", "", "PEM CA certificate that verifies the server [BC_CA_CERT]")
	pf.StringVar(&a.flags.Cert, "cert", "", "PEM client certificate for mTLS [BC_CERT]")
	pf.StringVar(&a.flags.Key, "key", "", "PEM client key for mTLS [BC_KEY]")
	pf.BoolVar(&a.flags.Plaintext, "plaintext", false, "connect without TLS (loopback only) [BC_PLAINTEXT]")
	pf.StringVar(&a.configPath, "config", "", "config file [BC_CONFIG]")
	root.AddCommand(a.apiCommand(), a.commandsCommand(), a.nodesCommand(), a.bundlesCommand(), a.historyCommand(), a.pkiCommand(), a.batchCommand(), a.metalCommand())
	root.AddCommand(a.poolsCommand(), a.locksCommand(), a.reconcilerCommand(), a.secretsCommand(), a.rolloutCommand(), a.runsCommand())
	root.AddCommand(a.kindsCommand(), a.fleetCommand())
	return root
}

// connect loads the settings and dials once per invocation.
func (a *app) connect(cmd *cobra.Command) (*grpc.ClientConn, error) {
	if a.conn != nil {
		return a.conn, nil
	}
	path, explicit := a.configPath, a.configPath != ""
	if !explicit {
		if p := a.env.Getenv("BC_CONFIG"); p != "" {
			path, explicit = p, true
		} else {
			path = defaultConfigPath(a.env.Getenv)
		}
	}
	s, err := loadSettings(path, explicit, a.env.Getenv, a.flags, func(name string) bool {
		f := cmd.Flags().Lookup(name)
		return f != nil && f.Changed
	})
	if err != nil {
		return nil, usageErr("%v", err)
	}
	a.settings = s
	conn, err := dial(s)
	if err != nil {
		return nil, err
	}
	a.conn = conn
	return conn, nil
}

// withTenant adds tenantId=<default tenant> when the request has such a
// field, the pairs leave it out and a default is configured. Not to
// nodes.createTenant, whose tenantId is the id of the tenant it creates (an
// id left out is made up by the server), not the tenant it acts in.
func (a *app) withTenant(m Method, pairs []string) []string {
	if a.settings.Tenant == "" || m.Desc.Input().Fields().ByJSONName("tenantId") == nil ||
		m.Desc.Input().FullName() == "bc.api.v1.CreateTenantRequest" {
		return pairs
	}
	for _, p := range pairs {
		if strings.HasPrefix(p, "tenantId=") || strings.HasPrefix(p, "tenant_id=") {
			return pairs
		}
	}
	return append([]string{"tenantId=" + a.settings.Tenant}, pairs...)
}

// call invokes a unary method with a request built from pairs.
func (a *app) call(cmd *cobra.Command, name string, pairs []string) (proto.Message, error) {
	m, err := FindMethod(name)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if m.Desc.IsStreamingServer() || m.Desc.IsStreamingClient() {
		return nil, usageErr("%s is a stream: use `better-compute commands watch`", m.Name)
	}
	conn, err := a.connect(cmd)
	if err != nil {
		return nil, err
	}
	req, err := BuildRequest(m.Desc.Input(), a.withTenant(m, pairs))
	if err != nil {
		return nil, usageErr("%s: %v", m.Name, err)
	}
	return invoke(cmd.Context(), conn, m, req)
}

func invoke(ctx context.Context, conn *grpc.ClientConn, m Method, req proto.Message) (proto.Message, error) {
	mt, err := messageType(m.Desc.Output())
	if err != nil {
		return nil, err
	}
	resp := mt.New().Interface()
	if err := conn.Invoke(ctx, m.FullMethod, req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// renderJSON is protojson with stable white space: protojson varies its
// spacing on purpose, and scripts diff and grep the CLI's output.
func renderJSON(m proto.Message, indent bool) ([]byte, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("rendering response: %w", err)
	}
	var buf bytes.Buffer
	if indent {
		err = json.Indent(&buf, b, "", "  ")
	} else {
		err = json.Compact(&buf, b)
	}
	if err != nil {
		return nil, fmt.Errorf("rendering response: %w", err)
	}
	return buf.Bytes(), nil
}

func (a *app) printJSON(m proto.Message) error {
	b, err := renderJSON(m, true)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(a.env.Stdout, string(b))
	return err
}

func (a *app) apiCommand() *cobra.Command {
	var list bool
	cmd := &cobra.Command{
		Use:   "api <service.method> [key=value ...]",
		Short: "Call any API method by its spec name; prints the JSON response",
		Long: `api calls one method of the public API. The method is the lower-camel
service name, a dot and the lower-camel method name, as in the spec:
commands.run maps to bc.api.v1.Commands/Run. Arguments are key=value pairs
named by the request's JSON field names; a value that parses as JSON is JSON
(payload={"rescan":true}), a dotted key reaches into a message
(payload.rescan=true). Run "better-compute api" alone to list the methods and
their fields.`,
		Example: `  better-compute api commands.run tenantId=$TENANT nodeId=node_… kind=node.reboot idempotencyKey=reboot-0412
  better-compute api commands.list tenantId=$TENANT nodeId=node_… state=failed limit=20`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || list {
				a.listMethods()
				return nil
			}
			resp, err := a.call(cmd, args[0], args[1:])
			if err != nil {
				return err
			}
			return a.printJSON(resp)
		},
	}
	cmd.Flags().BoolVar(&list, "list", false, "list the methods and their request fields")
	return cmd
}

func (a *app) listMethods() {
	width := 0
	for _, m := range Methods() {
		width = max(width, len(m.Name))
	}
	for _, m := range Methods() {
		kind := ""
		if m.Desc.IsStreamingServer() {
			kind = " (stream)"
		}
		fmt.Fprintf(a.env.Stdout, "%-*s  %s%s\n", width, m.Name, strings.Join(fieldNames(m.Desc.Input()), " "), kind)
	}
}
