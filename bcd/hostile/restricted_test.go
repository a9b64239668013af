package hostile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// "A node whose current certificate carries allowed kinds (a discovery
// ramdisk, for example) only accepts those": the node refuses, itself, a
// kind its own certificate does not list, even one a trusted worker key
// signed, so a gateway that skips its dispatch check gains nothing.
func TestRestrictedIdentity_TheNodeRefusesKindsItsCertificateDoesNotList(t *testing.T) {
	t.Parallel()
	const id = "node_hostile_ramdisk"
	a, ca := newAuthority(t), newNodeCA(t)
	gw := newGateway(t, ca.gatewayTLS(t))
	n := newNode(t, trust.Identity{NodeID: id, AllowedKinds: []string{"bcdcore.hold"}}, ca, gw.addr, a.v1)
	gw.setWelcome(func() *agentv1.Welcome {
		return &agentv1.Welcome{ServerTime: ts(time.Now()), SessionEpoch: 1, TrustBundle: &agentv1.TrustBundle{Version: 2, Signed: a.v2}}
	})
	n.start()
	s := gw.session(t, 1)
	command := func(cmdID, kind string) *agentv1.Command {
		return &agentv1.Command{Id: cmdID, NodeId: id, Seq: 1, Kind: kind, Payload: n.payload(),
			NotAfter: ts(time.Now().Add(10 * time.Minute)), CreatedAt: ts(time.Now())}
	}

	s.command(sign(t, a.worker, command("cmd_not_allowed", "bcdcore.holdonce")))
	u := s.outcome(t, "cmd_not_allowed", 1)
	require.Equal(t, agentv1.CommandState_COMMAND_STATE_REJECTED, u.GetState())
	require.Equal(t, agentv1.RejectCode_REJECT_CODE_UNSUPPORTED, u.GetRejectCode())
	require.Contains(t, u.GetMessage(), `runs a restricted identity that does not accept "bcdcore.holdonce"`)

	s.command(sign(t, a.worker, command("cmd_allowed", "bcdcore.hold")))
	require.Equal(t, agentv1.CommandState_COMMAND_STATE_SUCCEEDED, s.outcome(t, "cmd_allowed", 1).GetState())
	require.Equal(t, []string{"cmd_allowed"}, n.ran(), "only the allowed kind ran")
}
