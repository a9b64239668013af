package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// TokAgent is the agent identity's token: it reads and runs commands on
// tenant_a's nodes and creates batches, and holds no approve grant.
const TokAgent = "agent-token"

// withAgent adds the agent identity to a servertest config.
func withAgent(c *server.Config) {
	c.Auth.Identities = append(c.Auth.Identities, auth.IdentityConfig{
		Name: "agent", Tenants: []string{servertest.TenantA}, Tokens: []string{TokAgent}, Agent: true,
		Grants: []auth.Grant{
			{Permission: auth.PermNodesRead, Resource: "compute-node/*"},
			{Permission: auth.PermNodesExec, Resource: "compute-node/*"},
			{Permission: "compute:batches:create", Resource: auth.TenantResource(servertest.TenantA)},
			{Permission: "compute:batches:read", Resource: auth.TenantResource(servertest.TenantA)},
			// Even granted, an agent principal never approves.
			{Permission: auth.PermBatchesApprove, Resource: auth.TenantResource(servertest.TenantA)},
		},
	})
}

// syncBuffer collects a subprocess's stderr for failure reports.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeFile writes content under a temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// mcpCommand is the built bc-mcp, talking to endpoint as the agent.
func mcpCommand(t *testing.T, endpoint string, extra ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	bin := testutil.BuildBinary(t, "./controlplane/cmd/bc-mcp")
	args := append([]string{"--endpoint", "http://" + endpoint, "--tenant", servertest.TenantA,
		"--token-file", writeFile(t, "agent.token", TokAgent+"\n"), "--log-level", "debug"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bc-mcp stderr:\n%s", stderr.String())
		}
	})
	return cmd, stderr
}

// connectStdio runs bc-mcp as a subprocess and connects an SDK client to
// it over stdio (the SDK's command transport).
func connectStdio(t *testing.T, endpoint string, extra ...string) (*gomcp.ClientSession, *syncBuffer) {
	t.Helper()
	cmd, stderr := mcpCommand(t, endpoint, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := gomcp.NewClient(&gomcp.Implementation{Name: "bc-mcp-test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &gomcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err, "connecting to bc-mcp; stderr:\n%s", stderr.String())
	t.Cleanup(func() { _ = cs.Close() })
	return cs, stderr
}

// call runs a tool and returns its result (IsError set for a tool error).
func call(t *testing.T, cs *gomcp.ClientSession, tool string, args map[string]any) *gomcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &gomcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err, "tools/call %s", tool)
	return res
}

// ok runs a tool that must succeed and returns its structured answer.
func ok(t *testing.T, cs *gomcp.ClientSession, tool string, args map[string]any) map[string]any {
	t.Helper()
	res := call(t, cs, tool, args)
	require.False(t, res.IsError, "%s failed: %s", tool, text(res))
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out))
	require.Contains(t, text(res), "<untrusted-data>", "%s's text is framed", tool)
	return out
}

// refused runs a tool that must fail and returns its error text.
func refused(t *testing.T, cs *gomcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	res := call(t, cs, tool, args)
	require.True(t, res.IsError, "%s should have failed: %s", tool, text(res))
	return text(res)
}

func text(res *gomcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*gomcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}
