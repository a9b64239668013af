package batches_test

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/internal/trust"
)

// "One approval per approver key; the requester cannot approve their own
// batch; an agent principal (the MCP server's) can never approve, whatever
// path it takes." — and a signature must be over the batch's statement by a
// quorum key.
func TestApprove_TheControlPlanesRefusals(t *testing.T) {
	ctx := context.Background()
	pool := storetest.DB(t)
	reg, err := kinds.NewRegistry()
	require.NoError(t, err)
	q := queue.New(reg, nil)
	ten, err := q.CreateTenant(ctx, pool, queue.Tenant{Name: "t"})
	require.NoError(t, err)
	keys := map[string]ed25519.PrivateKey{}
	var quorum batches.Quorum
	for _, n := range []string{"alice", "bob", "ops"} {
		pub, priv, err := trust.NewEd25519()
		require.NoError(t, err)
		keys[n] = priv
		quorum.Approvers = append(quorum.Approvers, trust.Approver{Name: n, PublicKey: pub})
	}
	quorum.Threshold = 2
	now := time.Now()
	var b batches.Batch
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		b, _, err = batches.Create(ctx, tx, quorum, batches.CreateParams{TenantID: ten.ID, Requester: "ops", Reason: "r",
			Scope: []batches.Leaf{{Subject: "node_1", Kind: "node.reboot"}}, IdempotencyKey: "k"}, now)
		return err
	}))
	require.Equal(t, batches.StateAwaiting, b.State)
	approve := func(key, principal string, agent bool, sig []byte) (batches.Batch, error) {
		var out batches.Batch
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			out, err = batches.Approve(ctx, tx, quorum, ten.ID, b.ID, trust.Ed25519KeyID(keys[key].Public().(ed25519.PublicKey)), sig, principal, agent, now)
			return err
		})
		return out, err
	}
	sign := func(k string) []byte { return trust.SignEd25519(keys[k], trust.PurposeBatchApproval, b.Statement) }
	codeOf := func(err error) string { return string(errcode.CodeOf(err)) }

	_, err = approve("alice", "mcp", true, sign("alice"))
	require.Equal(t, "PERMISSION_DENIED", codeOf(err), "an agent never approves")
	_, err = approve("ops", "someone", false, sign("ops"))
	require.ErrorContains(t, err, "cannot approve", "the requester's key does not count")
	_, err = approve("alice", "alice", false, sign("bob"))
	require.Equal(t, "INVALID_INPUT", codeOf(err), "a signature by another key")
	_, err = approve("alice", "alice", false, trust.SignEd25519(keys["alice"], trust.PurposeCommand, b.Statement))
	require.Equal(t, "INVALID_INPUT", codeOf(err), "a signature for another purpose")
	out, err := approve("alice", "alice", false, sign("alice"))
	require.NoError(t, err)
	require.Equal(t, 1, out.Needed())
	_, err = approve("alice", "alice", false, sign("alice"))
	require.Equal(t, "CONFLICT", codeOf(err), "one approval per key")
	out, err = approve("bob", "bob", false, sign("bob"))
	require.NoError(t, err)
	require.Equal(t, batches.StateApproved, out.State)

	// The same idempotency key returns the first batch.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		again, dup, err := batches.Create(ctx, tx, quorum, batches.CreateParams{TenantID: ten.ID, Requester: "ops", Reason: "r",
			Scope: []batches.Leaf{{Subject: "node_2", Kind: "node.reboot"}}, IdempotencyKey: "k"}, now)
		require.True(t, dup)
		require.Equal(t, b.ID, again.ID)
		return err
	}))
	// Without approver keys a batch is recorded for audit only.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rec, _, err := batches.Create(ctx, tx, batches.Quorum{}, batches.CreateParams{TenantID: ten.ID, Requester: "ops", Reason: "audit",
			Scope: []batches.Leaf{{Subject: "node_2", Kind: "node.reboot"}}}, now)
		require.Equal(t, batches.StateRecorded, rec.State)
		return err
	}))
}
