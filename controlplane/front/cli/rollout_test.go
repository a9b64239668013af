package cli_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server/servertest"
)

// better-compute rollout set|status|pause|resume against a real server:
// status shows per node its current version, the target and its state, in
// a table and as JSON; pause and resume say so; bad input names the field.
func TestRolloutCLI(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()

	res := cliRun(ctx, env, "pools", "set-node", "nodeId="+servertest.NodeA1, "pool=gpu-a")
	require.Equal(t, 0, res.code, res.stderr)
	release := base64.StdEncoding.EncodeToString([]byte(`{"body":"e30=","signatures":[{"keyId":"k","sig":"AAAA"}]}`))
	res = cliRun(ctx, env, "rollout", "set", "pool=gpu-a", "version=1.4.0", "packageUrl=https://releases.example/bcd-1.4.0.tar.gz",
		"packageSize=1234", "packageSha256="+strings.Repeat("ab", 32), "release="+release)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "pool gpu-a: target 1.4.0 (generation 1), running")
	require.Regexp(t, servertest.NodeA1+`\s+-\s+1\.4\.0\s+(pending|upgrading)`, res.stdout)

	res = cliRun(ctx, env, "rollout", "pause", "gpu-a", "reason=change freeze")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "PAUSED: change freeze")

	res = cliRun(ctx, env, "rollout", "status", "gpu-a", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `"paused": true`)
	require.Contains(t, res.stdout, `"target": "1.4.0"`)

	res = cliRun(ctx, env, "rollout", "resume", "gpu-a")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "running")

	// Issue 35: "rollout retry … retries failed nodes"; a node that did
	// not fail is refused, named.
	res = cliRun(ctx, env, "rollout", "retry", "gpu-a", "nodeId="+servertest.NodeA1)
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "INVALID_STATE")
	require.Contains(t, res.stderr, "node "+servertest.NodeA1+" has not failed or rolled back")
	res = cliRun(ctx, env, "rollout", "retry", "gpu-a")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "running; failures 0/1")
	res = cliRun(ctx, env, "rollout", "set", "pool=gpu-a", "version=1.4.0", "packageUrl=https://releases.example/bcd-1.4.0.tar.gz",
		"packageSize=1234", "packageSha256="+strings.Repeat("ab", 32), "release="+release, "maxFailures=3")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "failures 0/3")

	res = cliRun(ctx, env, "rollout", "set", "pool=gpu-a", "version=1.5.0", "packageUrl=ftp://x", "packageSize=1", "packageSha256="+strings.Repeat("ab", 32), "release="+release)
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "INVALID_INPUT")
	require.Contains(t, res.stderr, "packageUrl")

	res = cliRun(ctx, env, "rollout", "status", "gpu-b")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "NOT_FOUND")
	require.Contains(t, res.stderr, "rollout set")
}
