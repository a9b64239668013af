package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/better-compute/commands/controlplane/commands/queue"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// "A command travels as an envelope: the exact command bytes as stored":
// the bytes are made once in the enqueue transaction, hold what the command
// was queued with, and every read (and a duplicate enqueue) returns the same
// bytes rather than a new marshalling.
func TestEnqueueStoresTheCommandBytes(t *testing.T) {
	b := setup(t)
	p := b.params("bytes")
	nb := time.Now().Add(time.Minute)
	p.NotBefore, p.MinGeneration = &nb, 3
	cmd, _ := b.enqueue(t, p)
	require.NotEmpty(t, cmd.CommandBytes)
	require.Nil(t, cmd.Signature, "unsigned until a command-signing authority is configured")
	require.Nil(t, cmd.WorkerCert)

	var pc agentv1.Command
	require.NoError(t, proto.Unmarshal(cmd.CommandBytes, &pc))
	require.Equal(t, cmd.ID, pc.GetId())
	require.Equal(t, b.node.ID, pc.GetNodeId())
	require.Equal(t, cmd.Seq, pc.GetSeq())
	require.Equal(t, "test.refresh", pc.GetKind())
	require.JSONEq(t, `{"sections":["gpus"],"rescan":true}`, string(pc.GetPayload()))
	require.True(t, cmd.NotAfter.Equal(pc.GetNotAfter().AsTime()))
	require.True(t, cmd.NotBefore.Equal(pc.GetNotBefore().AsTime()))
	require.Equal(t, int64(3), pc.GetMinGeneration())
	require.Equal(t, "bytes", pc.GetIdempotencyKey())
	require.True(t, cmd.CreatedAt.Equal(pc.GetCreatedAt().AsTime()))

	got, err := b.q.Get(b.ctx, b.pool, b.node.ID, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, cmd.CommandBytes, got.CommandBytes)
	wire, err := queue.WireBytes(got)
	require.NoError(t, err)
	require.Equal(t, cmd.CommandBytes, wire, "the wire bytes are the stored ones")
	dup, isDup := b.enqueue(t, p)
	require.True(t, isDup)
	require.Equal(t, cmd.CommandBytes, dup.CommandBytes)
}

// A row queued before migration 0003 has no stored bytes; WireBytes
// marshals its columns exactly as the stored bytes would have been made.
func TestWireBytesOfARowWithoutStoredBytes(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("old-row"))
	_, err := b.pool.Exec(b.ctx, `UPDATE commands SET command_bytes = NULL WHERE id = $1`, cmd.ID)
	require.NoError(t, err)
	old, err := b.q.Get(b.ctx, b.pool, b.node.ID, cmd.ID)
	require.NoError(t, err)
	require.Nil(t, old.CommandBytes)
	wire, err := queue.WireBytes(old)
	require.NoError(t, err)
	require.Equal(t, cmd.CommandBytes, wire)
}

// A signature needs the bytes it covers and the certificate that made it.
func TestSignatureColumnsNeedTheBytesAndACertificate(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("sig"))
	_, err := b.pool.Exec(b.ctx, `UPDATE commands SET signature = '\x01' WHERE id = $1`, cmd.ID)
	require.ErrorContains(t, err, "commands_signature_has_cert")
	_, err = b.pool.Exec(b.ctx, `UPDATE commands SET command_bytes = NULL, signature = '\x01', worker_cert = '\x02' WHERE id = $1`, cmd.ID)
	require.ErrorContains(t, err, "commands_signature_has_bytes")
	_, err = b.pool.Exec(b.ctx, `UPDATE commands SET signature = '\x01', worker_cert = '\x02' WHERE id = $1`, cmd.ID)
	require.NoError(t, err)
	got, err := b.q.Get(b.ctx, b.pool, b.node.ID, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, []byte{1}, got.Signature)
	require.Equal(t, []byte{2}, got.WorkerCert)
}

// Rank is the database's bc_state_rank, state for state: Go and SQL never
// disagree on which report may land.
func TestStateRankIsTheDatabases(t *testing.T) {
	b := setup(t)
	for _, s := range queue.States {
		var rank int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT bc_state_rank($1)`, string(s)).Scan(&rank))
		require.Equal(t, rank, s.Rank(), "rank of %s", s)
	}
	require.Zero(t, queue.State("bogus").Rank())
}
