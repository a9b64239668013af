package gateway

import (
	"context"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// SecretExchanger answers a node's SecretRequest with values sealed to the
// one-time key in it, or a refusal; controlplane/trust/secrets.Exchanger is the
// real one. The gateway relays only sealed bytes.
type SecretExchanger interface {
	Exchange(ctx context.Context, nodeID string, req *agentv1.SecretRequest) *agentv1.SecretResponse
}

// secretRequest answers one SecretRequest on the session: the node is the
// session's (its certificate's), never one the request names.
func (s *session) secretRequest(ctx context.Context, req *agentv1.SecretRequest) error {
	var resp *agentv1.SecretResponse
	if s.g.opts.Secrets == nil {
		resp = &agentv1.SecretResponse{RequestId: req.GetRequestId(), CommandId: req.GetCommandId(),
			Error: "secrets-unavailable", Message: "this control plane holds no secrets key (server config secrets.keyFile)"}
	} else {
		resp = s.g.opts.Secrets.Exchange(ctx, s.id.NodeID, req)
	}
	return s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_SecretResponse{SecretResponse: resp}})
}
