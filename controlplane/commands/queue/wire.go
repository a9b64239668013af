package queue

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/internal/trust"
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
		SecretRefs: c.SecretRefs,
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

// SecretRefsOf returns the secretRefs in c's stored command bytes (there
// is no column: the signed bytes are where they live), nil for none.
func SecretRefsOf(c Command) []string {
	if len(c.CommandBytes) == 0 {
		return c.SecretRefs
	}
	var pc agentv1.Command
	if err := proto.Unmarshal(c.CommandBytes, &pc); err != nil {
		return nil
	}
	return pc.GetSecretRefs()
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

// Signer signs what the queue stores: commands at enqueue (and, through
// the same authority, node specs). controlplane/trust/signing implements it.
type Signer interface {
	Sign(p trust.Purpose, body []byte) (sig, cert []byte, err error)
}

// SetSigner turns command signing on (nil turns it off): every command
// queued after it is signed by the signer's worker key.
func (q *Queue) SetSigner(s Signer) {
	if s == nil {
		q.signer.Store(nil)
		return
	}
	q.signer.Store(&s)
}

// Signer is the signer commands are signed with, nil when unsigned.
func (q *Queue) Signer() Signer {
	if p := q.signer.Load(); p != nil {
		return *p
	}
	return nil
}
