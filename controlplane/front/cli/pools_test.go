package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server/servertest"
)

// "better-compute shows pools, budgets, locks, the reconciler's plan": the
// pools, locks and reconciler groups print tables and, with --json, the
// API's JSON; a node moves between pools; a bad budget names its field; a
// read-only identity cannot set one.
func TestPoolsLocksReconcilerCLI(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()

	res := cliRun(ctx, env, "pools", "list")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "POOL")
	require.Contains(t, res.stdout, "default (defaults)", "every node starts in the default pool")

	res = cliRun(ctx, env, "pools", "set-node", "nodeId="+servertest.NodeA1, "pool=gpu-a")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "node "+servertest.NodeA1+" is in pool gpu-a")
	res = cliRun(ctx, env, "api", "nodes.get", "nodeId="+servertest.NodeA1)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `"pool": "gpu-a"`)

	res = cliRun(ctx, env, "pools", "set-budget", "pool=gpu-a", "maxConcurrent=2", "maxPerWindow=10", "windowSeconds=1800")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `gpu-a\s+1\s+0\s+2\s+0/10 per 1800s\s+0/3 per 3600s\s+closed`, res.stdout)

	res = cliRun(ctx, env, "pools", "get", "gpu-a", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var p struct {
		Name          string `json:"name"`
		MaxConcurrent int    `json:"maxConcurrent"`
		Configured    bool   `json:"configured"`
		Nodes         int    `json:"nodes"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &p), res.stdout)
	require.Equal(t, "gpu-a", p.Name)
	require.Equal(t, 2, p.MaxConcurrent)
	require.True(t, p.Configured)
	require.Equal(t, 1, p.Nodes)

	res = cliRun(ctx, env, "pools", "set-budget", "pool=gpu-a", "maxConcurrent=-1")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "INVALID_INPUT")
	require.Contains(t, res.stderr, "maxConcurrent")

	// Issue 35: set-budget changes only the fields given; maxConcurrent 0
	// needs stopAllMaintenance=true and says so.
	res = cliRun(ctx, env, "pools", "set-budget", "pool=gpu-a", "breakerFailures=5")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `gpu-a\s+1\s+0\s+2\s+0/10 per 1800s\s+0/5 per 3600s\s+closed`, res.stdout, "maxConcurrent and the window are kept")
	res = cliRun(ctx, env, "pools", "set-budget", "pool=gpu-b", "maxPerWindow=4")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `gpu-b\s+0\s+0\s+1\s+0/4 per 3600s`, res.stdout, "a new pool's maxConcurrent defaults to 1")
	res = cliRun(ctx, env, "pools", "set-budget", "pool=gpu-b", "maxConcurrent=0")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "INVALID_INPUT")
	require.Contains(t, res.stderr, "maxConcurrent 0 stops all disruptive maintenance in pool gpu-b")
	require.Contains(t, res.stderr, "stopAllMaintenance=true")
	res = cliRun(ctx, env, "pools", "set-budget", "pool=gpu-b", "maxConcurrent=0", "stopAllMaintenance=true")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `gpu-b\s+0\s+0\s+0\s+0/4 per 3600s`, res.stdout)
	res = cliRun(ctx, env, "pools", "set-budget", "pool=gpu-b")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "names no field to change")
	res = cliRun(ctx, env, "pools", "set-budget", "pool=gpu-b", "windowSeconds=30")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "windowSeconds 30 must be 60 to 2592000")

	res = cliRun(ctx, envFor(r, servertest.TokRead), "pools", "set-budget", "tenantId="+servertest.TenantA, "pool=gpu-a", "maxConcurrent=3")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "PERMISSION_DENIED")

	res = cliRun(ctx, env, "pools", "get", "nope")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "NOT_FOUND")

	res = cliRun(ctx, env, "locks", "list")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "NODE")
	res = cliRun(ctx, env, "locks", "list", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	require.JSONEq(t, `{}`, res.stdout)

	res = cliRun(ctx, env, "reconciler", "plan", "--all")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "WAITING FOR")
	res = cliRun(ctx, env, "reconciler", "batches", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	require.JSONEq(t, `{}`, res.stdout)

	res = cliRun(ctx, env, "pools", "--help")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "set-budget")
}
