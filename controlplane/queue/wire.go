package queue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// MarshalCommand is c as the bytes it travels as: a bc.agent.v1.Command of
// the fields fixed at enqueue, deterministically marshalled. Enqueue stores
// its result in command_bytes, and the gateway sends those stored bytes;
// a signature covers exactly them, so nothing that changes after enqueue
// (the dispatch's session epoch, a cancel, attempts) may go in.
func MarshalCommand(c Command) ([]byte, error) {
	pc := &agentv1.Command{
		Id: c.ID, NodeId: c.NodeID, Seq: c.Seq, Kind: c.Kind, Payload: c.Payload,
		NotAfter: timestamppb.New(c.NotAfter), MinGeneration: c.MinGeneration,
		IdempotencyKey: c.IdempotencyKey, BatchId: c.BatchID, CreatedAt: timestamppb.New(c.CreatedAt),
	}
	if c.NotBefore != nil {
		pc.NotBefore = timestamppb.New(*c.NotBefore)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(pc)
	if err != nil {
		return nil, fmt.Errorf("marshalling command %s: %w", c.ID, err)
	}
	return b, nil
}

// WireBytes returns the bytes the gateway sends for c: the command_bytes
// stored at enqueue, or, for a row queued before they were stored
// (migration 0003), the same marshalling of its columns.
func WireBytes(c Command) ([]byte, error) {
	if len(c.CommandBytes) > 0 {
		return c.CommandBytes, nil
	}
	return MarshalCommand(c)
}

// storeCommandBytes records a new command's bytes in the enqueue
// transaction. They need the seq and created_at the insert handed out, so
// they cannot go in the insert itself; a later signature over them will be
// written by this statement too.
func (q *Queue) storeCommandBytes(ctx context.Context, tx pgx.Tx, cmd *Command) error {
	b, err := MarshalCommand(*cmd)
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `UPDATE commands SET command_bytes = $2 WHERE id = $1 AND command_bytes IS NULL`, cmd.ID, b)
	if err != nil {
		return fmt.Errorf("storing the bytes of command %s: %w", cmd.ID, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("storing the bytes of command %s: the new row is gone or already has them", cmd.ID)
	}
	cmd.CommandBytes = b
	return nil
}
