package secrets_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/trust/secrets"
	"github.com/better-compute/commands/internal/sealed"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

var bmcKind = kind.Manifest{Kind: "test.bmc", Lane: kind.LaneControl, Timeout: kind.Duration(time.Minute), Roles: []string{"site"}, Version: "1.0.0"}

type env struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	q      *queue.Queue
	store  *secrets.PGStore
	tenant string
	node   string
	other  string
}

func setup(t *testing.T) *env {
	ctx := context.Background()
	pool := storetest.DB(t)
	reg, err := kinds.NewRegistry(bmcKind)
	require.NoError(t, err)
	q := queue.New(reg, nil)
	ten, err := q.CreateTenant(ctx, pool, queue.Tenant{Name: "t"})
	require.NoError(t, err)
	n1, err := q.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID, Role: "site"})
	require.NoError(t, err)
	n2, err := q.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID, Role: "site"})
	require.NoError(t, err)
	key, err := secrets.NewKey(bytes.Repeat([]byte{7}, 32))
	require.NoError(t, err)
	return &env{ctx: ctx, pool: pool, q: q, store: &secrets.PGStore{Pool: pool, Key: key}, tenant: ten.ID, node: n1.ID, other: n2.ID}
}

func (e *env) enqueue(t *testing.T, node string, refs ...string) queue.Command {
	var c queue.Command
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		c, _, err = e.q.Enqueue(e.ctx, tx, queue.EnqueueParams{TenantID: e.tenant, NodeID: node, Kind: bmcKind.Kind, SecretRefs: refs})
		return err
	}))
	return c
}

func (e *env) move(t *testing.T, c queue.Command, to queue.State) {
	t.Helper()
	_, _, err := e.q.Transition(e.ctx, e.pool, queue.Transition{CommandID: c.ID, NodeID: c.NodeID, To: to, Reason: "test"})
	require.NoError(t, err)
}

// "The control plane keeps secrets encrypted at rest under a key from a
// file": the row holds no plaintext, a row moved to another name does not
// open, and a server with another key says which key the row needs.
func TestPGStore_EncryptsAtRest(t *testing.T) {
	e := setup(t)
	const value = "bmc-pass-4f1c9a"
	m, err := e.store.Put(e.ctx, e.tenant, "bmc-password", []byte(value))
	require.NoError(t, err)
	require.Equal(t, len(value), m.ValueBytes)
	require.Equal(t, e.store.Key.ID, m.KeyID)

	var ct []byte
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT ciphertext FROM secrets WHERE name = 'bmc-password'`).Scan(&ct))
	require.NotContains(t, string(ct), value)
	got, err := e.store.Value(e.ctx, e.tenant, "bmc-password")
	require.NoError(t, err)
	require.Equal(t, value, string(got))

	_, err = e.pool.Exec(e.ctx, `INSERT INTO secrets (tenant_id, name, key_id, nonce, ciphertext, value_bytes) SELECT tenant_id, 'moved', key_id, nonce, ciphertext, value_bytes FROM secrets WHERE name = 'bmc-password'`)
	require.NoError(t, err)
	_, err = e.store.Value(e.ctx, e.tenant, "moved")
	require.ErrorContains(t, err, "does not decrypt (altered, or moved from another name)")

	other, err := secrets.NewKey(bytes.Repeat([]byte{9}, 32))
	require.NoError(t, err)
	_, err = (&secrets.PGStore{Pool: e.pool, Key: other}).Value(e.ctx, e.tenant, "bmc-password")
	require.ErrorContains(t, err, "is encrypted under key "+e.store.Key.ID)

	list, err := e.store.List(e.ctx, e.tenant)
	require.NoError(t, err)
	require.Len(t, list, 2)
	ok, err := e.store.Delete(e.ctx, e.tenant, "bmc-password")
	require.NoError(t, err)
	require.True(t, ok)
	_, err = e.store.Value(e.ctx, e.tenant, "bmc-password")
	require.ErrorIs(t, err, secrets.ErrNotFound)

	_, err = e.store.Put(e.ctx, e.tenant, "Bad Name", []byte("x"))
	require.ErrorIs(t, err, secrets.ErrInvalid)
	_, err = e.store.Put(e.ctx, e.tenant, "empty", nil)
	require.ErrorIs(t, err, secrets.ErrInvalid)
}

func TestLoadKeyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "k")
	require.NoError(t, os.WriteFile(p, []byte("0707070707070707070707070707070707070707070707070707070707070707\n"), 0o600))
	k, err := secrets.LoadKeyFile(p)
	require.NoError(t, err)
	raw, _ := secrets.NewKey(bytes.Repeat([]byte{7}, 32))
	require.Equal(t, raw.ID, k.ID, "hex and raw name the same key")
	require.NoError(t, os.Chmod(p, 0o644))
	_, err = secrets.LoadKeyFile(p)
	require.ErrorContains(t, err, "chmod 600")
	require.NoError(t, os.Chmod(p, 0o600))
	require.NoError(t, os.WriteFile(p, []byte("short"), 0o600))
	_, err = secrets.LoadKeyFile(p)
	require.ErrorContains(t, err, "head -c 32 /dev/urandom")
}

// "which node may fetch which secret (only a node that holds a live
// command naming that ref)", and the value reaches it sealed to its
// one-time key, bound to the node, the command and the ref.
func TestExchange_OnlyALiveCommandOfTheNodeThatNamesTheRef(t *testing.T) {
	e := setup(t)
	_, err := e.store.Put(e.ctx, e.tenant, "bmc-password", []byte("s3cret"))
	require.NoError(t, err)
	_, err = e.store.Put(e.ctx, e.tenant, "other-secret", []byte("nope"))
	require.NoError(t, err)
	x := &secrets.Exchanger{Pool: e.pool, Store: e.store}
	key, err := sealed.NewKey()
	require.NoError(t, err)
	ask := func(node string, c queue.Command, refs ...string) *agentv1.SecretResponse {
		return x.Exchange(e.ctx, node, &agentv1.SecretRequest{RequestId: "r1", CommandId: c.ID, Refs: refs, PublicKey: key.PublicKey(), KemId: sealed.KEMID})
	}

	c := e.enqueue(t, e.node, "bmc-password")
	require.Equal(t, []string{"bmc-password"}, queue.SecretRefsOf(c), "the refs are in the signed command bytes")
	resp := ask(e.node, c, "bmc-password")
	require.Equal(t, secrets.CodeDenied, resp.GetError(), "a pending command is not live: %s", resp.GetMessage())

	e.move(t, c, queue.Running)
	resp = ask(e.node, c, "bmc-password")
	require.Empty(t, resp.GetError(), resp.GetMessage())
	require.Len(t, resp.GetSecrets(), 1)
	require.NotContains(t, string(resp.GetSecrets()[0].GetSealed()), "s3cret")
	v, err := key.Open(e.node, c.ID, "bmc-password", resp.GetSecrets()[0].GetSealed())
	require.NoError(t, err)
	require.Equal(t, "s3cret", string(v))
	_, err = key.Open(e.other, c.ID, "bmc-password", resp.GetSecrets()[0].GetSealed())
	require.Error(t, err, "sealed for this node only")

	resp = ask(e.other, c, "bmc-password")
	require.Equal(t, secrets.CodeDenied, resp.GetError(), "another node's session")
	require.Contains(t, resp.GetMessage(), "holds no command")
	resp = ask(e.node, c, "other-secret")
	require.Equal(t, secrets.CodeDenied, resp.GetError(), "a ref the command does not name")
	require.Empty(t, resp.GetSecrets())

	e.move(t, c, queue.Succeeded)
	resp = ask(e.node, c, "bmc-password")
	require.Equal(t, secrets.CodeDenied, resp.GetError(), "a settled command")
	require.Contains(t, resp.GetMessage(), "is succeeded")

	gone := e.enqueue(t, e.node, "deleted-one")
	e.move(t, gone, queue.Dispatched)
	resp = ask(e.node, gone, "deleted-one")
	require.Equal(t, secrets.CodeNotFound, resp.GetError())
	require.Contains(t, resp.GetMessage(), "better-compute secrets put")
}

func TestEnqueue_RefusesABadSecretRef(t *testing.T) {
	e := setup(t)
	err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, _, err := e.q.Enqueue(e.ctx, tx, queue.EnqueueParams{TenantID: e.tenant, NodeID: e.node, Kind: bmcKind.Kind, SecretRefs: []string{"Not A Ref"}})
		return err
	})
	require.ErrorContains(t, err, "secretRefs: invalid secret ref")
}
