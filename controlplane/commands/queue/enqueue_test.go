package queue_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/ids"
)

// "A command gets a cmd_… id and a per-node seq from nodes.next_cmd_seq in the
// enqueue transaction", and a new command publishes node.command.queued.
func TestEnqueueNewCommand(t *testing.T) {
	b := setup(t)
	cmd, dup := b.enqueue(t, b.params("refresh-after-gpu-swap-0412"))
	require.False(t, dup)
	require.True(t, ids.Valid(ids.Command, cmd.ID), cmd.ID)
	require.Equal(t, int64(1), cmd.Seq)
	require.Equal(t, queue.Pending, cmd.State)
	require.Equal(t, b.tenant.ID, cmd.TenantID)
	require.Equal(t, "test.refresh", cmd.Kind)
	require.True(t, cmd.Flags.RetrySafe)
	require.Equal(t, refreshKind.Lane, cmd.Lane)
	require.JSONEq(t, `{"sections":["gpus"],"rescan":true}`, string(cmd.Payload))
	require.Nil(t, cmd.SettledAt)

	ev := b.outbox(t, events.TopicCommandQueued)
	require.Equal(t, []map[string]any{{"nodeId": b.node.ID, "commandId": cmd.ID, "kind": "test.refresh", "state": "pending"}}, ev)

	got, err := b.q.Get(b.ctx, b.pool, b.node.ID, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, cmd.ID, got.ID)
	require.Equal(t, cmd.Seq, got.Seq)
}

// Without notAfter the command gets the default deadline; an empty payload
// is stored as {}.
func TestEnqueueDefaults(t *testing.T) {
	b := setup(t)
	p := b.params("")
	p.NotAfter = time.Time{}
	p.Payload = nil
	before := time.Now()
	cmd, _ := b.enqueue(t, p)
	require.JSONEq(t, `{}`, string(cmd.Payload))
	require.Equal(t, "", cmd.IdempotencyKey)
	require.WithinDuration(t, before.Add(queue.DefaultNotAfter), cmd.NotAfter, 5*time.Second)
	// Commands without a key never collide with one another.
	cmd2, dup := b.enqueue(t, p)
	require.False(t, dup)
	require.Equal(t, int64(2), cmd2.Seq)
}

// The issue: "seq gapless and unique under 50 concurrent enqueuers to one node".
func TestEnqueueSeqGaplessUnderConcurrency(t *testing.T) {
	b := setupPool(t, func(c *pgxpool.Config) { c.MaxConns = 52 })
	const n = 50
	seqs := make([]int64, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				cmd, _, err := b.q.Enqueue(b.ctx, tx, b.params(fmt.Sprintf("k-%d", i)))
				seqs[i] = cmd.Seq
				return err
			})
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i, s := range seqs {
		require.Equal(t, int64(i+1), s, "seqs must be 1..%d without gaps: %v", n, seqs)
	}
	node, err := b.q.GetNode(b.ctx, b.pool, "", b.node.ID)
	require.NoError(t, err)
	require.Equal(t, int64(n+1), node.NextCmdSeq)
	require.Len(t, b.outbox(t, events.TopicCommandQueued), n)
}

// The issue: "20 concurrent runs with one key make one command"; the spec: "A
// second enqueue with the same key returns the first command". The seq taken
// by each duplicate is given back, so the next new command follows without a gap.
func TestEnqueueSameKeyConcurrentMakesOneCommand(t *testing.T) {
	b := setupPool(t, func(c *pgxpool.Config) { c.MaxConns = 22 })
	const n = 20
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		idsS = map[string]int{}
		dups int
	)
	start := make(chan struct{})
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			<-start
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				cmd, dup, err := b.q.Enqueue(b.ctx, tx, b.params("same-key"))
				if err != nil {
					return err
				}
				mu.Lock()
				idsS[cmd.ID]++
				if dup {
					dups++
				}
				mu.Unlock()
				return nil
			})
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, idsS, 1, "every enqueue must return the same command")
	require.Equal(t, n-1, dups)
	var count int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM commands`).Scan(&count))
	require.Equal(t, 1, count)
	require.Len(t, b.outbox(t, events.TopicCommandQueued), 1, "only the new command publishes node.command.queued")

	next, dup := b.enqueue(t, b.params("another-key"))
	require.False(t, dup)
	require.Equal(t, int64(2), next.Seq, "duplicates must not leave a gap in the node's seq")
}

// "the same key for another kind is CONFLICT".
func TestEnqueueSameKeyOtherKindIsConflict(t *testing.T) {
	b := setup(t)
	first, _ := b.enqueue(t, b.params("reboot-0412"))
	p := b.params("reboot-0412")
	p.Kind = rebootKind.Kind
	p.Payload = nil
	qe := requireCode(t, b.enqueueErr(p), errcode.Conflict)
	require.Equal(t, first.ID, qe.Details["commandId"])
	require.True(t, errors.Is(qe, errcode.ErrConflict))

	again, dup := b.enqueue(t, b.params("reboot-0412"))
	require.True(t, dup)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, first.Seq, again.Seq)
}

// "Commands are durable rows in Postgres. They are queued in the caller's
// transaction": a rollback leaves neither the command nor its event, and
// does not consume a seq.
func TestEnqueueRollbackLeavesNothing(t *testing.T) {
	b := setup(t)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	cmd, _, err := b.q.Enqueue(b.ctx, tx, b.params("rolled-back"))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))

	_, err = b.q.Get(b.ctx, b.pool, b.node.ID, cmd.ID)
	requireCode(t, err, errcode.NotFound)
	require.Empty(t, b.outbox(t, events.TopicCommandQueued))
	require.Empty(t, b.readAll(t))

	next, _ := b.enqueue(t, b.params("rolled-back"))
	require.Equal(t, int64(1), next.Seq)
	require.NotEqual(t, cmd.ID, next.ID)
}

// A queued command and its event are invisible to others until the caller commits.
func TestEnqueueInvisibleUntilCommit(t *testing.T) {
	b := setup(t)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	cmd, _, err := b.q.Enqueue(b.ctx, tx, b.params("later"))
	require.NoError(t, err)

	_, err = b.q.Get(b.ctx, b.pool, b.node.ID, cmd.ID)
	requireCode(t, err, errcode.NotFound)
	items, _, err := b.q.List(b.ctx, b.pool, queue.ListParams{NodeID: b.node.ID})
	require.NoError(t, err)
	require.Empty(t, items)
	require.Empty(t, b.readAll(t))
	// The caller's own transaction sees it.
	_, err = b.q.Get(b.ctx, tx, b.node.ID, cmd.ID)
	require.NoError(t, err)

	require.NoError(t, tx.Commit(b.ctx))
	_, err = b.q.Get(b.ctx, b.pool, b.node.ID, cmd.ID)
	require.NoError(t, err)
	evs := b.readAll(t)
	require.Len(t, evs, 1)
	require.Equal(t, events.TopicCommandQueued, evs[0].Topic)
	require.Equal(t, b.tenant.ID, evs[0].TenantID)
}

// "It accepts an allowlist of kinds; any other kind is UNSUPPORTED" (at the
// queue: a kind the registry does not hold), and the payload is validated
// against the manifest's schema, INVALID_INPUT naming the failing field.
func TestEnqueueRefusesUnknownKindAndBadPayload(t *testing.T) {
	b := setup(t)
	p := b.params("x")
	p.Kind = "test.nonesuch"
	requireCode(t, b.enqueueErr(p), errcode.Unsupported)

	p = b.params("x")
	p.Payload = json.RawMessage(`{"sections":["gpus","cpus"]}`)
	qe := requireCode(t, b.enqueueErr(p), errcode.InvalidInput)
	require.Equal(t, "payload/sections/1", qe.Details["field"])
	require.Contains(t, qe.Message, "/sections/1")

	p = b.params("x")
	p.Payload = json.RawMessage(`{"rescan":"yes"}`)
	qe = requireCode(t, b.enqueueErr(p), errcode.InvalidInput)
	require.Equal(t, "payload/rescan", qe.Details["field"])

	p = b.params("x")
	p.NodeID = ""
	requireCode(t, b.enqueueErr(p), errcode.InvalidInput)

	var count int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM commands`).Scan(&count))
	require.Zero(t, count)
}

// "The node must be visible to your tenant (NOT_FOUND otherwise)": unknown,
// another tenant's, and deleted nodes are all NOT_FOUND.
func TestEnqueueNodeNotVisibleIsNotFound(t *testing.T) {
	b := setup(t)
	p := b.params("x")
	p.NodeID = ids.NewNode()
	requireCode(t, b.enqueueErr(p), errcode.NotFound)

	other, err := b.q.CreateTenant(b.ctx, b.pool, queue.Tenant{Name: "other"})
	require.NoError(t, err)
	p = b.params("x")
	p.TenantID = other.ID
	qe := requireCode(t, b.enqueueErr(p), errcode.NotFound)
	require.NotContains(t, qe.Message, b.tenant.ID)

	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error { _, err := b.q.DeleteNode(b.ctx, tx, b.node.ID); return err }))
	requireCode(t, b.enqueueErr(b.params("x")), errcode.NotFound)
}

// "A node whose current certificate carries allowed kinds ... only accepts
// those. The command queue refuses other kinds at enqueue with INVALID_STATE
// ("runs a restricted identity that does not accept …")".
func TestEnqueueRestrictedIdentity(t *testing.T) {
	b := setup(t)
	ramdisk, err := b.q.CreateNode(b.ctx, b.pool, queue.Node{TenantID: b.tenant.ID, Role: "discovery", AllowedKinds: []string{"test.wipe"}})
	require.NoError(t, err)

	p := b.params("x")
	p.NodeID = ramdisk.ID
	qe := requireCode(t, b.enqueueErr(p), errcode.InvalidState)
	require.Contains(t, qe.Message, "runs a restricted identity that does not accept test.refresh")
	require.Equal(t, "restricted-identity", qe.Reason)

	p.Kind, p.Payload = wipeKind.Kind, nil
	cmd, _ := b.enqueue(t, p)
	require.Equal(t, int64(1), cmd.Seq, "a refused enqueue takes no seq")

	// Lifting the restriction lets every kind through.
	require.NoError(t, b.q.SetAllowedKinds(b.ctx, b.pool, ramdisk.ID, nil))
	p = b.params("y")
	p.NodeID = ramdisk.ID
	b.enqueue(t, p)
}

// "node.reboot without a batchId is INVALID_STATE with details: { reason:
// 'batch-required', kind }" once the quorum is on.
func TestEnqueueBatchRequired(t *testing.T) {
	b := setup(t)
	p := b.params("reboot-0412")
	p.Kind, p.Payload = rebootKind.Kind, nil
	b.q.RequireBatches(true)
	qe := requireCode(t, b.enqueueErr(p), errcode.InvalidState)
	require.Equal(t, map[string]string{"reason": "batch-required", "kind": "test.reboot"}, qe.Details)

	p.BatchID = ids.NewBatch()
	cmd, _ := b.enqueue(t, p)
	require.Equal(t, p.BatchID, cmd.BatchID)
	require.True(t, cmd.Flags.Destructive)

	p.IdempotencyKey, p.BatchID = "bad-batch", "nope"
	requireCode(t, b.enqueueErr(p), errcode.InvalidInput)
}

// "BMC kinds run on a site agent ...: the manifests' role allowlists say
// so, and the control plane routes by them": a kind whose manifest does not
// name the node's role is INVALID_STATE at enqueue, takes no seq, and the
// error names both roles.
func TestEnqueueRefusesAKindTheNodesRoleDoesNotRun(t *testing.T) {
	b := setup(t)
	site, err := b.q.CreateNode(b.ctx, b.pool, queue.Node{TenantID: b.tenant.ID, Role: "site"})
	require.NoError(t, err)
	p := b.params("on-site")
	p.NodeID = site.ID
	qe := requireCode(t, b.enqueueErr(p), errcode.InvalidState)
	require.Equal(t, "role-not-allowed", qe.Reason)
	require.Equal(t, "site", qe.Details["role"])
	require.Equal(t, "node,discovery", qe.Details["roles"])
	require.Contains(t, qe.Message, "runs role site, and test.refresh runs only on role node or discovery")

	// The wipe runs on discovery only: a node-role node refuses it too.
	p = b.params("wipe-on-node")
	p.Kind, p.Payload = wipeKind.Kind, nil
	qe = requireCode(t, b.enqueueErr(p), errcode.InvalidState)
	require.Equal(t, "role-not-allowed", qe.Reason)

	cmd, _ := b.enqueue(t, b.params("on-node"))
	require.Equal(t, int64(1), cmd.Seq, "the refused enqueues took no seq")
}
