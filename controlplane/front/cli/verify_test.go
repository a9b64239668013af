package cli_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/trust"
)

// "an attested diag.dcgm result verifies and a tampered one fails commands
// verify": the CLI checks the node's signature itself, against the node CA
// file the operator gives.
func TestCommandsVerify_AttestedResultVerifiesAndATamperedOneFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := servertest.Start(t, nil)
	j := r.Join(t, servertest.NodeA1)
	blk, _ := pem.Decode(j.KeyPEM)
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	require.NoError(t, err)

	var c queue.Command
	require.NoError(t, pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		c, _, err = r.Queue.Enqueue(ctx, tx, queue.EnqueueParams{TenantID: servertest.TenantA, NodeID: servertest.NodeA1, Kind: "diag.nvml"})
		return err
	}))
	result := []byte(`{"level":4,"pass":true,"tests":[{"name":"memory","result":"pass"}]}`)
	sum := sha256.Sum256(result)
	sig, err := trust.SignResult(k.(*ecdsa.PrivateKey), trust.ResultStatement{CommandID: c.ID, CommandDigest: trust.CommandDigest(c.CommandBytes),
		NodeID: servertest.NodeA1, State: "succeeded", ResultSHA256: sum[:]})
	require.NoError(t, err)
	_, ok, err := r.Queue.Transition(ctx, r.Pool, queue.Transition{CommandID: c.ID, NodeID: servertest.NodeA1, To: queue.Succeeded,
		Result: result, ResultBytes: result, ResultSHA256: sum[:], NodeSig: sig})
	require.NoError(t, err)
	require.True(t, ok)

	env := envFor(r, servertest.TokOps)
	ca := filepath.Join(r.CADir, "ca.pem")
	res := cliRun(ctx, env, "commands", "verify", c.ID, "nodeId="+servertest.NodeA1, "tenantId="+servertest.TenantA, "--node-ca", ca)
	require.Equal(t, cli.ExitOK, res.code, res.stdout+res.stderr)
	require.Contains(t, res.stdout, "verified: the node signed this result")

	// The digest is recomputed from the command's own bytes: a result moved
	// under another command's bytes is refused.
	var other queue.Command
	require.NoError(t, pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		other, _, err = r.Queue.Enqueue(ctx, tx, queue.EnqueueParams{TenantID: servertest.TenantA, NodeID: servertest.NodeA1, Kind: "diag.nvml", IdempotencyKey: "other"})
		return err
	}))
	_, err = r.Pool.Exec(ctx, `UPDATE commands SET command_bytes = $2 WHERE id = $1`, c.ID, other.CommandBytes)
	require.NoError(t, err)
	res = cliRun(ctx, env, "commands", "verify", c.ID, "nodeId="+servertest.NodeA1, "tenantId="+servertest.TenantA, "--node-ca", ca)
	require.Equal(t, cli.ExitCommandFailed, res.code, res.stdout+res.stderr)
	require.Contains(t, res.stdout, "not command "+c.ID)
	_, err = r.Pool.Exec(ctx, `UPDATE commands SET command_bytes = $2 WHERE id = $1`, c.ID, c.CommandBytes)
	require.NoError(t, err)

	// Tampered in the database: the result shown no longer is the one sent.
	_, err = r.Pool.Exec(ctx, `UPDATE commands SET result = '{"level":4,"pass":false}' WHERE id = $1`, c.ID)
	require.NoError(t, err)
	res = cliRun(ctx, env, "commands", "verify", c.ID, "nodeId="+servertest.NodeA1, "tenantId="+servertest.TenantA, "--node-ca", ca)
	require.Equal(t, cli.ExitCommandFailed, res.code, res.stdout+res.stderr)
	require.Contains(t, res.stdout, "NOT VERIFIED")

	// Both the result and its bytes forged: the node's signature fails.
	forged := []byte(`{"level":4,"pass":false}`)
	fs := sha256.Sum256(forged)
	_, err = r.Pool.Exec(ctx, `UPDATE commands SET result_bytes = $2, result_sha256 = $3 WHERE id = $1`, c.ID, forged, fs[:])
	require.NoError(t, err)
	res = cliRun(ctx, env, "commands", "verify", c.ID, "nodeId="+servertest.NodeA1, "tenantId="+servertest.TenantA, "--node-ca", ca, "--json")
	require.Equal(t, cli.ExitCommandFailed, res.code, res.stdout+res.stderr)
	require.Contains(t, res.stdout, `"verified": false`)
	require.Contains(t, res.stdout, "signature does not verify")
}
