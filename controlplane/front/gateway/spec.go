package gateway

import (
	"context"

	"github.com/better-compute/commands/controlplane/fleet/nodespecs"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// sendSpec pushes the node's newest spec generation when it is newer than
// have: at session start (have is the Hello's applied generation), when a
// new generation wakes the session, and on SpecRequest. The stored signed
// bytes travel as stored. When the database is away the push is due again
// on the next tick.
func (s *session) sendSpec(ctx context.Context, have int64) error {
	spec, err := nodespecs.Latest(ctx, s.g.pool, s.id.NodeID)
	if err != nil {
		s.specDue = true
		return s.dbErr(ctx, "reading the node spec", err)
	}
	s.g.outage.OK()
	s.specDue = false
	if spec.Generation == 0 || spec.Generation <= have {
		return nil
	}
	s.specSent = spec.Generation
	return s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Spec{Spec: &agentv1.Spec{
		Generation: spec.Generation, Spec: spec.Spec, Signature: spec.Signature, WorkerCert: spec.WorkerCert, Signed: spec.Signed,
	}}})
}
