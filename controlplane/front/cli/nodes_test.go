package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/front/join"
	"github.com/better-compute/commands/controlplane/server/servertest"
)

func TestNodesJoinTokenAndSpecs(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()

	res := cliRun(ctx, env, "nodes", "join-token", servertest.NodeA1, "role=discovery", `allowedKinds=["inventory.refresh"]`, "ttlSeconds=900")
	require.Equal(t, 0, res.code, res.stderr)
	var tok struct{ Token, NodeID, ExpiresAt string }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &tok))
	require.True(t, strings.HasPrefix(tok.Token, join.TokenPrefix), res.stdout)
	require.NotEmpty(t, tok.ExpiresAt)

	res = cliRun(ctx, envFor(r, servertest.TokRead), "nodes", "join-token", "tenantId="+servertest.TenantA, "nodeId="+servertest.NodeA1)
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "PERMISSION_DENIED")

	res = cliRun(ctx, env, "nodes", "set-spec", servertest.NodeA1, `spec={"holds":[{"gpu":"GPU-1","state":"live"}]}`)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `"generation": "1"`)
	file := filepath.Join(t.TempDir(), "spec.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"instances":[{"name":"vm-1","passthroughGpus":["GPU-2"]}]}`), 0o600))
	res = cliRun(ctx, env, "nodes", "set-spec", servertest.NodeA1, "--file", file)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `"generation": "2"`)
	res = cliRun(ctx, env, "nodes", "set-spec", servertest.NodeA1, `spec={"holds":[{"state":"live"}]}`)
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "INVALID_INPUT")

	res = cliRun(ctx, env, "nodes", "get-spec", servertest.NodeA1)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `"generation": "2"`)
	require.Contains(t, res.stdout, "vm-1")

	// The generic form reaches the same methods by reflection.
	res = cliRun(ctx, env, "api", "nodes.getSpec", "nodeId="+servertest.NodeA1)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "vm-1")
}

func TestNodesGetShowsInventoryAndConditions(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokRead)
	env["BC_TENANT"] = servertest.TenantA
	_, err := r.Pool.Exec(context.Background(), `UPDATE nodes SET inventory = $2, conditions = $3, trust_version = 4 WHERE id = $1`, servertest.NodeA1,
		`{"gpus":[{"uuid":"GPU-1"},{"uuid":"GPU-2"}],"hostname":"gpu-0412"}`,
		`[{"type":"RebootRequired","status":"True","reason":"HugePages","message":"1 GiB huge pages wait for a boot","since":"2026-01-02T03:04:05Z"}]`)
	require.NoError(t, err)

	res := cliRun(context.Background(), env, "nodes", "get", servertest.NodeA1)
	require.Equal(t, 0, res.code, res.stderr)
	for _, want := range []string{servertest.NodeA1, "IDENTITY", "full", "RebootRequired", "HugePages", "2026-01-02T03:04:05Z",
		"gpus", "2 items", `"gpu-0412"`} {
		require.Contains(t, res.stdout, want)
	}
	require.Regexp(t, `(?m)^TRUST\s+4$`, res.stdout, "the trust bundle version the node holds")

	res = cliRun(context.Background(), env, "nodes", "get", servertest.NodeA1, "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var n struct {
		Inventory  map[string]any
		Conditions []map[string]any
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &n))
	require.Len(t, n.Inventory["gpus"], 2)
	require.Equal(t, "RebootRequired", n.Conditions[0]["type"])
}

// nodes delete asks for --yes, then deletes the node: its pending command
// is cancelled (node-deleted) and the node is NOT_FOUND.
func TestNodesDelete(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	res := cliRun(ctx, env, "commands", "run", "nodeId="+servertest.NodeA1, "kind=diag.nvml", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var cmd struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &cmd))

	res = cliRun(ctx, env, "nodes", "delete", servertest.NodeA1)
	require.Equal(t, 2, res.code, res.stderr)
	require.Contains(t, res.stderr, "--yes")
	res = cliRun(ctx, envFor(r, servertest.TokRead), "nodes", "delete", "tenantId="+servertest.TenantA, servertest.NodeA1, "--yes")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "PERMISSION_DENIED")

	res = cliRun(ctx, env, "nodes", "delete", servertest.NodeA1, "--yes")
	require.Equal(t, 0, res.code, res.stderr)
	var out struct {
		NodeID            string
		CancelledCommands int
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
	require.Equal(t, servertest.NodeA1, out.NodeID)
	require.Equal(t, 1, out.CancelledCommands)

	res = cliRun(ctx, env, "nodes", "get", servertest.NodeA1)
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "NOT_FOUND")
	res = cliRun(ctx, env, "commands", "get", cmd.ID, "nodeId="+servertest.NodeA1, "--json")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "node-deleted")
}

// nodes list prints one line a node (NODE, POOL, ROLE, SESSION, VERSION,
// TRUST, LAST SEEN, CONDITIONS) and the same as nodes.list's JSON with --json.
func TestNodesListTableAndJSON(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokRead)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	_, err := r.Pool.Exec(ctx, `UPDATE nodes SET conditions = $2, daemon_version = '1.4.0', trust_version = 7, session_epoch = 1, session_gateway = 'gw-east-1'
		WHERE id = $1`, servertest.NodeA1, `[{"type":"GPUHealthy","status":"False","reason":"xid-79"}]`)
	require.NoError(t, err)
	// Apart, as the update above marks the session seen now.
	_, err = r.Pool.Exec(ctx, `UPDATE nodes SET session_opened_at = now() - interval '5 minutes', session_seen_at = now() - interval '3 minutes',
		session_closed_at = now() - interval '3 minutes' WHERE id = $1`, servertest.NodeA1)
	require.NoError(t, err)

	res := cliRun(ctx, env, "nodes", "list")
	require.Equal(t, 0, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 2, res.stdout)
	require.Equal(t, []string{"NODE", "POOL", "ROLE", "SESSION", "VERSION", "TRUST", "LAST", "SEEN", "CONDITIONS", "LABELS", "HEALTH"}, strings.Fields(lines[0]))
	require.Equal(t, []string{servertest.NodeA1, "default", "node", "disconnected", "1.4.0", "7", "3m", "ago", "GPUHealthy=False", "-", "unhealthy"}, strings.Fields(lines[1]))
	require.NotContains(t, res.stdout, servertest.NodeB1, "another tenant's node")

	res = cliRun(ctx, env, "nodes", "list", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var out struct {
		Items []struct {
			ID, Gateway, AgentVersion string
			Connected                 bool
			LastSeen                  string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	require.Len(t, out.Items, 1)
	require.Equal(t, servertest.NodeA1, out.Items[0].ID)
	require.Equal(t, "gw-east-1", out.Items[0].Gateway)
	require.Equal(t, "1.4.0", out.Items[0].AgentVersion)
	require.False(t, out.Items[0].Connected)
	require.NotEmpty(t, out.Items[0].LastSeen)

	res = cliRun(ctx, env, "nodes", "list", "cursor=nope")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "nextCursor")
}
