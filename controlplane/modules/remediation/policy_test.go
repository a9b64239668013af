package remediation_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/modules/modulestest"
	"github.com/better-compute/commands/controlplane/modules/remediation"
	"github.com/better-compute/commands/internal/trust"
)

// "With approver keys configured, choose and document the policy": the
// platform's batches wait for people by default; with the platform's own
// approver key it counts as one approval (audited: a batch approval and an
// event), and people approve the rest of the quorum.
func TestPlatformBatchPolicy(t *testing.T) {
	platPub, platKey, err := trust.NewEd25519()
	require.NoError(t, err)
	alicePub, _, err := trust.NewEd25519()
	require.NoError(t, err)
	approvers := []trust.Approver{{Name: "platform", PublicKey: platPub}, {Name: "alice", PublicKey: alicePub}}
	for _, tc := range []struct {
		name      string
		threshold int
		key       bool
		awaiting  bool
		approvals int
	}{
		{"no platform key: waits for people", 2, false, true, 0},
		{"platform key, 2 of 2: one approval, a person's still needed", 2, true, true, 1},
		{"platform key, 1 of 2: approved by the platform", 1, true, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := remediation.ProvisionOptions{Engine: remediation.Options{
				Quorum: func() batches.Quorum { return batches.Quorum{Approvers: approvers, Threshold: tc.threshold} }}}
			if tc.key {
				opts.Engine.PlatformKey, opts.Engine.PlatformKeyName = platKey, "platform"
			}
			prov := remediation.NewProvision(opts)
			bench := modulestest.New(t, modulestest.Options{Kinds: kinds.FirstParty(), RequireBatches: true}, prov)
			ten := bench.Tenant(t, "acme")
			n := bench.Node(t, modulestest.Node{TenantID: ten})
			ctx, db := bench.Ctx, bench.Pool
			b := &bundle{ctx: ctx, pool: db, bench: bench, prov: prov, tenant: ten, node: n}
			b.report(t, inventory(true))
			rows := b.plan(t)
			require.Equal(t, remediation.StateRunning, rows[0].State)
			cmd := b.commands(t)[0]
			require.Equal(t, tc.awaiting, cmd.AwaitingApproval)
			bt, err := batches.Get(ctx, db, ten, rows[0].BatchID)
			require.NoError(t, err)
			require.Len(t, bt.Approvals, tc.approvals)
			if tc.awaiting {
				require.Equal(t, remediation.WaitAwaitingApproval, rows[0].WaitingReason)
				require.Contains(t, rows[0].WaitingMessage, "better-compute batch approve --batch "+bt.ID)
			} else {
				require.Equal(t, batches.StateApproved, bt.State)
			}
			var audited int
			require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = $1`, remediation.TopicPlatformApproved).Scan(&audited))
			require.Equal(t, tc.approvals, audited)
		})
	}
}
