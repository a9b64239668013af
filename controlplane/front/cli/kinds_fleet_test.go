package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server/servertest"
)

// "Registered kinds are visible: kinds.list / kinds.get in the API, CLI
// …": the table names each kind with its digest and whether commands run
// takes it; get prints the whole digest and, with --schema, the schema; an
// unknown kind is NOT_FOUND.
func TestKindsCLI(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	ctx := context.Background()

	res := cliRun(ctx, env, "kinds", "list")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `(?m)^KIND\s+VERSION\s+DIGEST\s+LANE\s+TIMEOUT\s+ROLES\s+FLAGS\s+RUNNABLE\s+SOURCE`, res.stdout)
	require.Regexp(t, `(?m)^diag\.nvml\s+\S+ \(newest\)\s+[0-9a-f]{12}\s+\S+\s+\d+s\s+\S+\s+\S+\s+yes\s+first-party`, res.stdout)
	require.Regexp(t, `(?m)^gpu\.reset\s.*destructive.*no \(`, res.stdout, "a kind commands run does not take says why")

	res = cliRun(ctx, env, "kinds", "list", "--runnable", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var list struct {
		Items []struct {
			Name        string `json:"name"`
			APIRunnable bool   `json:"apiRunnable"`
			Allowlisted bool   `json:"allowlisted"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &list), res.stdout)
	require.NotEmpty(t, list.Items)
	for _, k := range list.Items {
		require.True(t, k.APIRunnable && k.Allowlisted, k.Name)
	}

	// The test server's kinds take no schema: --schema prints {} (any
	// payload object); kinds.get's payloadSchema is the real schema where
	// there is one (the API's test).
	res = cliRun(ctx, env, "kinds", "get", "inventory.refresh", "--schema")
	require.Equal(t, 0, res.code, res.stderr)
	require.JSONEq(t, `{}`, res.stdout)

	res = cliRun(ctx, env, "kinds", "get", "acme.flash")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "NOT_FOUND")
	require.Contains(t, res.stderr, "kindsDir")
}

// fleet prints fleet.summary: the counts, the signing warning of a server
// that signs nothing, and where to list each group.
func TestFleetCLI(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()

	res := cliRun(ctx, env, "fleet")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `(?m)^NODES \d+  connected \d+  healthy \d+  unhealthy \d+$`, res.stdout)
	require.Contains(t, res.stdout, "WARNING: commands go unsigned")
	require.Contains(t, res.stdout, "nodes list health=unhealthy")

	res = cliRun(ctx, env, "fleet", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var s struct {
		Nodes string `json:"nodes"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &s), res.stdout)
	require.NotEqual(t, "", s.Nodes, "protojson writes int64 as a string")
}
