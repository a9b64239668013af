// Package mcp is bc-mcp: a Model Context Protocol server, on the official Go
// SDK, through which an agent reads nodes and commands, runs allowlisted
// read-only diagnostics (on one node, or on many as a fleet run) and
// proposes destructive batches and destructive fleet runs.
//
// It is an API client with its own agent principal: every tool calls
// bc-server's public gRPC API with the agent identity's bearer token, as
// the CLI does, and never the database. There is no approve tool, and the
// package calls no approve RPC: the CommandBatches client it holds has
// Create and Get only. People approve batches with their approver keys
// (`better-compute batch approve`), and the API refuses approvals from an
// agent principal whatever path it takes.
//
// Everything a tool returns is cleaned (control and format characters
// stripped, strings and large fields cut, URL queries redacted) and framed
// as untrusted data, since nodes write much of it.
package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// Defaults of Config.
var (
	// DefaultAllowlist is what exec_command runs without a batch: read-only
	// kinds only.
	DefaultAllowlist = []string{"diag.nvml", "inventory.refresh"}
	// DefaultBatchKinds is what exec_command runs only inside a batch that a
	// person must approve (the command is held until they do).
	DefaultBatchKinds = []string{"node.reboot"}
)

// More defaults of Config.
const (
	DefaultMaxFieldBytes = 8 << 10
	DefaultMaxStringLen  = 2048
	DefaultCallTimeout   = 30 * time.Second
	// listFieldBytes caps a command's result, progress and payload in
	// list_commands; get_command shows up to MaxFieldBytes.
	listFieldBytes = 1 << 10
	// maxListNodes bounds list_nodes' node ids, maxListCommands its page;
	// maxListRuns and maxListTargets bound the run tools' pages.
	maxListNodes    = 20
	maxListCommands = 50
	maxListRuns     = 50
	maxListTargets  = 200
)

// Config is what the MCP server needs beside its API connection.
type Config struct {
	// Tenant is the agent's tenant; every call names it.
	Tenant string
	// Allowlist is the kinds exec_command queues and create_fleet_run runs:
	// DefaultAllowlist when nil. Put only read-only kinds here.
	Allowlist []string
	// BatchKinds is the kinds exec_command queues only with a batchId whose
	// batch waits for (or has) people's approvals, and the kinds
	// propose_fleet_run proposes: DefaultBatchKinds when nil, none when
	// empty and non-nil.
	BatchKinds []string
	// MaxFieldBytes cuts a command's result, progress and payload and a
	// node's inventory to a preview when their JSON is larger, and says so.
	MaxFieldBytes int
	// MaxStringLen cuts every string to this many characters.
	MaxStringLen int
	// CallTimeout bounds each API call.
	CallTimeout time.Duration
	// Version is reported to MCP clients.
	Version string
	// Logger logs each tool call (the audit line); never stdout, which the
	// stdio transport owns.
	Logger hclog.Logger
}

// batchClient is the part of CommandBatches bc-mcp calls. Approve is
// deliberately absent, so no code path here can approve a batch.
type batchClient interface {
	Create(ctx context.Context, in *apiv1.CreateCommandBatchRequest, opts ...grpc.CallOption) (*apiv1.CommandBatch, error)
	Get(ctx context.Context, in *apiv1.GetCommandBatchRequest, opts ...grpc.CallOption) (*apiv1.CommandBatch, error)
}

// Server is the MCP server and the API clients its tools call.
type Server struct {
	cfg       Config
	logger    hclog.Logger
	nodes     apiv1.NodesClient
	commands  apiv1.CommandsClient
	batches   batchClient
	runs      runClient
	allow     []string
	batchOnly []string
	mcp       *gomcp.Server
}

// New builds the MCP server over an API connection (see Dial).
func New(conn grpc.ClientConnInterface, cfg Config) (*Server, error) {
	if cfg.Tenant == "" {
		return nil, errors.New("no tenant: bc-mcp acts in one tenant (--tenant or BC_MCP_TENANT)")
	}
	if cfg.Allowlist == nil {
		cfg.Allowlist = DefaultAllowlist
	}
	if cfg.BatchKinds == nil {
		cfg.BatchKinds = DefaultBatchKinds
	}
	for _, k := range cfg.Allowlist {
		if slices.Contains(cfg.BatchKinds, k) {
			return nil, fmt.Errorf("kind %s is both allowlisted and batch-only", k)
		}
	}
	if cfg.MaxFieldBytes <= 0 {
		cfg.MaxFieldBytes = DefaultMaxFieldBytes
	}
	if cfg.MaxStringLen <= 0 {
		cfg.MaxStringLen = DefaultMaxStringLen
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &Server{
		cfg:       cfg,
		logger:    cfg.Logger.Named("mcp").With("tenant", cfg.Tenant),
		nodes:     apiv1.NewNodesClient(conn),
		commands:  apiv1.NewCommandsClient(conn),
		batches:   apiv1.NewCommandBatchesClient(conn),
		runs:      apiv1.NewFleetRunsClient(conn),
		allow:     slices.Clone(cfg.Allowlist),
		batchOnly: slices.Clone(cfg.BatchKinds),
	}
	s.mcp = gomcp.NewServer(&gomcp.Implementation{Name: "bc-mcp", Title: "better-compute nodes", Version: cfg.Version},
		&gomcp.ServerOptions{Instructions: s.instructions()})
	s.mcp.AddReceivingMiddleware(s.audit)
	s.addTools()
	return s, nil
}

// MCP returns the SDK server, for a transport to run.
func (s *Server) MCP() *gomcp.Server { return s.mcp }

// ServeStdio serves one client over stdin and stdout until it disconnects
// or ctx ends.
func (s *Server) ServeStdio(ctx context.Context) error {
	s.logger.Info("serving over stdio")
	if err := s.mcp.Run(ctx, &gomcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		return fmt.Errorf("stdio: %w", err)
	}
	return nil
}

func (s *Server) instructions() string {
	return "Tools for better-compute GPU nodes in tenant " + s.cfg.Tenant + ". " +
		"exec_command queues read-only diagnostics; poll get_command for the result. " +
		"Destructive work needs a batch: propose_command_batch records a proposal that people " +
		"approve with their own keys (you cannot approve it), and exec_command with its batchId " +
		"queues the work, held until they do. " +
		"create_fleet_run runs a read-only kind on many nodes (node ids, a pool, a label selector, conditions); " +
		"propose_fleet_run proposes a destructive one, which starts no node until people approve its batch. " +
		"Follow a run with get_fleet_run and list_fleet_run_targets. " + UntrustedNotice
}

// call bounds one API call.
func (s *Server) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.CallTimeout)
}

// apiError turns an API error into a tool error an agent can act on: the
// method, the spec's code and details, cleaned (the message may quote what
// a node sent).
func (s *Server) apiError(method string, err error) error {
	if in, ok := apierr.Parse(err); ok {
		return fmt.Errorf("%s: %s", method, cleanString(in.String(), s.cfg.MaxStringLen))
	}
	return fmt.Errorf("%s: %s", method, cleanString(err.Error(), s.cfg.MaxStringLen))
}

// audit logs each tool call: the principal (the HTTP token's name, or
// stdio), the tool, a digest of its arguments (not the arguments, which
// may be long), how long it took and whether it failed.
func (s *Server) audit(next gomcp.MethodHandler) gomcp.MethodHandler {
	return func(ctx context.Context, method string, req gomcp.Request) (gomcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		call, isCall := req.GetParams().(*gomcp.CallToolParamsRaw)
		if !isCall {
			return next(ctx, method, req)
		}
		principal := "stdio"
		if ex := req.GetExtra(); ex != nil && ex.TokenInfo != nil {
			principal = ex.TokenInfo.UserID
		}
		sum := sha256.Sum256(call.Arguments)
		start := time.Now()
		res, err := next(ctx, method, req)
		failed := err != nil
		if r, ok := res.(*gomcp.CallToolResult); ok && r.IsError {
			failed = true
		}
		s.logger.Info("tool call", "principal", principal, "tool", call.Name,
			"args_sha256", hex.EncodeToString(sum[:8]), "duration", time.Since(start), "failed", failed)
		return res, err
	}
}
