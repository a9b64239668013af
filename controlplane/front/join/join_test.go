package join_test

import (
	"context"
	"testing"
	"time"

	"github.com/better-compute/commands/internal/trust"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/join"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/trust/pki"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

type bundle struct {
	ctx  context.Context
	db   *pgxpool.Pool
	svc  *join.Service
	q    *queue.Queue
	node queue.Node
	csr  []byte
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	pool := storetest.DB(t)
	reg, err := kinds.NewRegistry()
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ten, err := q.CreateTenant(ctx, pool, queue.Tenant{})
	require.NoError(t, err)
	node, err := q.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID})
	require.NoError(t, err)
	ca, err := pki.NewCA("test")
	require.NoError(t, err)
	_, csr, err := trust.NewKeyAndCSR(node.ID)
	require.NoError(t, err)
	return &bundle{ctx: ctx, db: pool, svc: join.New(pool, q, ca, nil, nil), q: q, node: node, csr: csr}
}

func TestTokenIsStoredHashedAndJoinsOnce(t *testing.T) {
	b := setup(t)
	db := b.db
	tok, err := b.svc.CreateToken(b.ctx, db, join.TokenRequest{NodeID: b.node.ID, AllowedKinds: []string{"diag.nvml"}})
	require.NoError(t, err)
	var stored int
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM join_tokens WHERE token_sha256 = $1 AND node_id = $2`, join.Hash(tok.Value), b.node.ID).Scan(&stored))
	require.Equal(t, 1, stored)
	require.NoError(t, db.QueryRow(b.ctx, `SELECT count(*) FROM join_tokens WHERE position($1::bytea IN token_sha256) > 0`, []byte(tok.Value)).Scan(&stored))
	require.Zero(t, stored, "the token itself is never stored")

	resp, err := b.svc.Join(b.ctx, &agentv1.JoinRequest{Token: tok.Value, Csr: b.csr})
	require.NoError(t, err)
	require.Equal(t, b.node.ID, resp.GetNodeId())
	n, err := b.q.GetNode(b.ctx, db, "", b.node.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"diag.nvml"}, n.AllowedKinds)

	_, err = b.svc.Join(b.ctx, &agentv1.JoinRequest{Token: tok.Value, Csr: b.csr})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}

func TestBadCSRLeavesTheTokenUsable(t *testing.T) {
	b := setup(t)
	db := b.db
	tok, err := b.svc.CreateToken(b.ctx, db, join.TokenRequest{NodeID: b.node.ID})
	require.NoError(t, err)
	_, err = b.svc.Join(b.ctx, &agentv1.JoinRequest{Token: tok.Value, Csr: []byte("not a csr")})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = b.svc.Join(b.ctx, &agentv1.JoinRequest{Token: tok.Value, Csr: b.csr})
	require.NoError(t, err)
}

func TestExpiredUnknownAndDeletedAreRefused(t *testing.T) {
	b := setup(t)
	db := b.db
	tok, err := b.svc.CreateToken(b.ctx, db, join.TokenRequest{NodeID: b.node.ID, TTL: time.Minute})
	require.NoError(t, err)
	_, err = db.Exec(b.ctx, `UPDATE join_tokens SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	_, err = b.svc.Join(b.ctx, &agentv1.JoinRequest{Token: tok.Value, Csr: b.csr})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "expired")
	_, err = b.svc.Join(b.ctx, &agentv1.JoinRequest{Token: join.TokenPrefix + "guess", Csr: b.csr})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "unknown")

	_, err = b.svc.CreateToken(b.ctx, db, join.TokenRequest{NodeID: "node_nope"})
	require.ErrorIs(t, err, join.ErrNodeNotFound)
	_, err = b.svc.CreateToken(b.ctx, db, join.TokenRequest{NodeID: b.node.ID, TTL: join.MaxTTL + time.Second})
	require.Error(t, err)
}

// A token the node could never join with is refused when it is made, as
// INVALID_INPUT naming the field: a role outside the agent roles (node,
// discovery, site), a kind that is no kind name, a node id no certificate
// can carry.
func TestTokenRequestIsCheckedAgainstTheGrammar(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		req   join.TokenRequest
		field string
	}{
		{join.TokenRequest{NodeID: b.node.ID, Role: "admin"}, "role"},
		{join.TokenRequest{NodeID: b.node.ID, Role: "ROOT!"}, "role"},
		{join.TokenRequest{NodeID: b.node.ID, AllowedKinds: []string{"diag.nvml", "*"}}, "allowedKinds[1]"},
		{join.TokenRequest{NodeID: "node_ünïcode"}, "nodeId"},
		{join.TokenRequest{NodeID: ""}, "nodeId"},
		{join.TokenRequest{NodeID: b.node.ID, TTL: join.MaxTTL + time.Second}, "ttlSeconds"},
	} {
		_, err := b.svc.CreateToken(b.ctx, b.db, c.req)
		var ce *errcode.Error
		require.ErrorAs(t, err, &ce, "%+v", c.req)
		require.Equal(t, errcode.InvalidInput, ce.Code, "%+v", c.req)
		require.Equal(t, c.field, ce.Details["field"], "%+v", c.req)
	}
	for _, role := range []string{"node", "discovery", "site"} {
		_, err := b.svc.CreateToken(b.ctx, b.db, join.TokenRequest{NodeID: b.node.ID, Role: role})
		require.NoError(t, err, role)
	}
	var n int
	require.NoError(t, b.db.QueryRow(b.ctx, `SELECT count(*) FROM join_tokens WHERE role NOT IN ('node', 'discovery', 'site')`).Scan(&n))
	require.Zero(t, n)
}
