package gateway_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// recordingExchanger answers every request with one sealed blob and
// records the node the gateway named.
type recordingExchanger struct {
	mu    sync.Mutex
	nodes []string
}

func (x *recordingExchanger) Exchange(_ context.Context, nodeID string, req *agentv1.SecretRequest) *agentv1.SecretResponse {
	x.mu.Lock()
	x.nodes = append(x.nodes, nodeID)
	x.mu.Unlock()
	return &agentv1.SecretResponse{RequestId: req.GetRequestId(), CommandId: req.GetCommandId(),
		Secrets: []*agentv1.SealedSecret{{Ref: req.GetRefs()[0], Sealed: []byte("sealed-bytes")}}}
}

func secretRequest(id string) *agentv1.NodeMessage {
	return &agentv1.NodeMessage{Msg: &agentv1.NodeMessage_SecretRequest{SecretRequest: &agentv1.SecretRequest{
		RequestId: id, CommandId: "cmd_x", Refs: []string{"bmc-password"}, PublicKey: make([]byte, 32), KemId: 0x20}}}
}

// The gateway relays a SecretRequest to the exchange under the session's
// own node (its certificate's), and the sealed answer back on the session.
func TestGateway_RelaysASecretExchangeUnderTheSessionsNode(t *testing.T) {
	x := &recordingExchanger{}
	e := setupWith(t, setupOptions{secrets: x})
	conn := e.dial(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0)
	d := fakedaemon.New(e.node.ID)
	d.AfterHello = []*agentv1.NodeMessage{secretRequest("r1")}
	defer e.run(d, conn)()
	testutil.WaitFor(t, 10*time.Second, "the secret response", func() bool { return len(d.SecretResponses()) == 1 })
	resp := d.SecretResponses()[0]
	require.Equal(t, "r1", resp.GetRequestId())
	require.Equal(t, []byte("sealed-bytes"), resp.GetSecrets()[0].GetSealed())
	x.mu.Lock()
	defer x.mu.Unlock()
	require.Equal(t, []string{e.node.ID}, x.nodes)
}

// Without a secrets key the gateway answers secrets-unavailable, saying
// what the server lacks, and the session goes on.
func TestGateway_WithoutSecretsAnExchangeIsUnavailable(t *testing.T) {
	e := setup(t, 1)
	conn := e.dial(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0)
	d := fakedaemon.New(e.node.ID)
	d.AfterHello = []*agentv1.NodeMessage{secretRequest("r1")}
	defer e.run(d, conn)()
	testutil.WaitFor(t, 10*time.Second, "the secret response", func() bool { return len(d.SecretResponses()) == 1 })
	resp := d.SecretResponses()[0]
	require.Equal(t, "secrets-unavailable", resp.GetError())
	require.Contains(t, resp.GetMessage(), "secrets.keyFile")
	require.Empty(t, resp.GetSecrets())
}
