package nodehealth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/nodehealth"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// One rule, twice: Healthy (Go, one node's row) and UnhealthySQL (filters
// and counts at fleet size) must say the same of every node.
func TestHealthyAndUnhealthySQLAgree(t *testing.T) {
	db := storetest.DB(t)
	ctx := context.Background()
	cases := []struct {
		conds  string
		failed []string
		want   bool
	}{
		{`[]`, nil, true},
		{`null`, nil, true},
		{`[{"type":"TrustBundle","status":"True","reason":"accepted"},{"type":"NodeSpec","status":"True"}]`, nil, true},
		{`[{"type":"TrustBundle","status":"False","reason":"none"}]`, nil, true},
		{`[{"type":"TrustBundle","status":"False","reason":"rollback"}]`, nil, false},
		{`[{"type":"NodeSpec","status":"False","reason":"stale"}]`, nil, false},
		{`[{"type":"RebootRequired","status":"True","reason":"huge-pages"}]`, nil, false},
		{`[{"type":"RebootRequired","status":"False"}]`, nil, true},
		{`[{"type":"ClockSkew","status":"True","reason":"refused"}]`, nil, false},
		{`[{"type":"AcmeFirmwareStale","status":"True"}]`, nil, false},
		{`[{"type":"AcmeFirmwareStale","status":"Unknown"}]`, nil, true},
		{`[]`, []string{"row-remap.pending"}, false},
		{`[{"type":"GPUHealthy","status":"False"}]`, nil, false},
		{`[{"type":"GPUHealthy","status":"True"}]`, nil, true},
		{`[{"type":"FabricReady","status":"False"}]`, nil, false},
	}
	for i, c := range cases {
		got, err := nodehealth.Healthy([]byte(c.conds), c.failed)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "case %d (Go): %s %v", i, c.conds, c.failed)
		failed := c.failed
		if failed == nil {
			failed = []string{}
		}
		var unhealthy bool
		require.NoError(t, db.QueryRow(ctx, `SELECT `+nodehealth.UnhealthySQL("n.")+` FROM (SELECT $1::jsonb AS conditions, $2::text[] AS failed_checks) n`,
			c.conds, failed).Scan(&unhealthy), "case %d", i)
		require.Equal(t, !c.want, unhealthy, "case %d (SQL): %s %v", i, c.conds, c.failed)
	}
}

// The settle of a diag.nvml keeps its verdict on the node's row: the checks
// it failed, once each; a later pass clears them; an older diag settling
// late does not put its verdict back; a diag that judged nothing changes
// nothing.
func TestTheSettleOfADiagKeepsItsVerdictOnTheNode(t *testing.T) {
	db := storetest.DB(t)
	ctx := context.Background()
	reg, err := kinds.NewRegistry(kinds.FirstParty()...)
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	q.AlsoOnSettle(nodehealth.SettleHook)
	ten, err := q.CreateTenant(ctx, db, queue.Tenant{Name: "acme"})
	require.NoError(t, err)
	node, err := q.CreateNode(ctx, db, queue.Node{TenantID: ten.ID, ID: "node_a"})
	require.NoError(t, err)

	enqueue := func(i int) queue.Command {
		var c queue.Command
		require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var err error
			c, _, err = q.Enqueue(ctx, tx, queue.EnqueueParams{TenantID: ten.ID, NodeID: node.ID, Kind: nodehealth.DiagKind, IdempotencyKey: fmt.Sprintf("diag-%d", i)})
			return err
		}))
		return c
	}
	settle := func(c queue.Command, to queue.State, result any) {
		var raw json.RawMessage
		if result != nil {
			raw, err = json.Marshal(result)
			require.NoError(t, err)
		}
		_, changed, err := q.Transition(ctx, db, queue.Transition{CommandID: c.ID, NodeID: c.NodeID, To: to, Reason: "checks-failed", Result: raw})
		require.NoError(t, err)
		require.True(t, changed)
	}
	verdict := func() ([]string, bool) {
		var failed []string
		var checked *any
		var healthy bool
		require.NoError(t, db.QueryRow(ctx, `SELECT failed_checks, checked_at, NOT `+nodehealth.UnhealthySQL("")+` FROM nodes WHERE id = $1`, node.ID).Scan(&failed, &checked, &healthy))
		require.NotNil(t, checked)
		return failed, healthy
	}
	check := func(name, status string) map[string]any {
		return map[string]any{"check": name, "status": status, "reason": "test", "gpu": map[string]any{"index": 0, "busId": "0000:01:00.0"}}
	}

	older := enqueue(0)
	first := enqueue(1)
	settle(first, queue.Failed, map[string]any{"status": "fail", "checks": []any{
		check("nvml.init", "pass"), check("row-remap.pending", "fail"), check("ecc.uncorrectable", "fail"), check("row-remap.pending", "fail")}})
	failed, healthy := verdict()
	require.Equal(t, []string{"ecc.uncorrectable", "row-remap.pending"}, failed)
	require.False(t, healthy)

	pass := enqueue(2)
	settle(pass, queue.Succeeded, map[string]any{"status": "pass", "checks": []any{check("row-remap.pending", "pass")}})
	failed, healthy = verdict()
	require.Empty(t, failed)
	require.True(t, healthy)

	// Settled after the pass but queued before it: still the later settle,
	// so it is the latest verdict (the node ran it last).
	settle(older, queue.Failed, map[string]any{"status": "fail", "checks": []any{check("xid.recent", "fail")}})
	failed, _ = verdict()
	require.Equal(t, []string{"xid.recent"}, failed)

	// A diag that ended with no checks (expired before it ran) judged
	// nothing: the verdict stays.
	expired := enqueue(3)
	settle(expired, queue.Expired, nil)
	failed, _ = verdict()
	require.Equal(t, []string{"xid.recent"}, failed)
}
