package join_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/front/join"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// "Nodes carry a pool (a label set at create or join)": a join token's pool
// becomes the node's when it joins; a token without one keeps the node's;
// a pool outside the id grammar is refused naming the field.
func TestJoinTokenSetsTheNodesPool(t *testing.T) {
	b := setup(t)
	pool := func() string {
		var p string
		require.NoError(t, b.db.QueryRow(b.ctx, `SELECT pool FROM nodes WHERE id = $1`, b.node.ID).Scan(&p))
		return p
	}
	require.Equal(t, "default", pool())
	tok, err := b.svc.CreateToken(b.ctx, b.db, join.TokenRequest{NodeID: b.node.ID, Pool: "rack-7"})
	require.NoError(t, err)
	_, err = b.svc.Join(b.ctx, &agentv1.JoinRequest{Token: tok.Value, Csr: b.csr})
	require.NoError(t, err)
	require.Equal(t, "rack-7", pool())

	tok, err = b.svc.CreateToken(b.ctx, b.db, join.TokenRequest{NodeID: b.node.ID})
	require.NoError(t, err)
	_, err = b.svc.Join(b.ctx, &agentv1.JoinRequest{Token: tok.Value, Csr: b.csr})
	require.NoError(t, err)
	require.Equal(t, "rack-7", pool(), "a token without a pool keeps the node's")

	_, err = b.svc.CreateToken(b.ctx, b.db, join.TokenRequest{NodeID: b.node.ID, Pool: "a/b"})
	require.Equal(t, errcode.InvalidInput, errcode.CodeOf(err))
	require.Contains(t, err.Error(), "pool")
}
