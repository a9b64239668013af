package e2e

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// trustingNode is a node that keeps its trust bundle as bcd does
// (bcd/truststore, persisted in a state dir) and verifies every command
// against it before running it.
type trustingNode struct {
	id    string
	store *truststore.Store
	d     *fakedaemon.Daemon

	lock    sync.Mutex
	refused []error
}

func newTrustingNode(t *testing.T, r *servertest.Running, id string) (*trustingNode, servertest.Joined) {
	t.Helper()
	st, err := truststore.Open(t.TempDir(), nil, nil)
	require.NoError(t, err)
	j := r.Join(t, id)
	require.NoError(t, st.AcceptJoin(j.Response.GetTrustBundle().GetSigned(), time.Now()))
	n := &trustingNode{id: id, store: st}
	n.d = fakedaemon.New(id)
	n.d.OnWelcome = func(w *agentv1.Welcome) {
		if _, err := st.Offer(w.GetTrustBundle().GetSigned(), time.Now()); err != nil {
			n.lock.Lock()
			n.refused = append(n.refused, err)
			n.lock.Unlock()
		}
	}
	n.d.Verify = func(env *agentv1.CommandEnvelope) error {
		_, err := trust.VerifyCommand(st.Bundle(), env, id, time.Now())
		return err
	}
	return n, j
}

func (n *trustingNode) refusals() []error {
	n.lock.Lock()
	defer n.lock.Unlock()
	return append([]error(nil), n.refused...)
}

func writeKey(t *testing.T, dir, name string) (string, ed25519.PublicKey) {
	t.Helper()
	pub, priv, err := trust.NewEd25519()
	require.NoError(t, err)
	p, err := trust.MarshalPrivateKeyPEM(priv)
	require.NoError(t, err)
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, p, 0o600))
	return path, pub
}

// The rotation procedure of docs/trust.md, run as written: announce the
// next root, switch to it, retire the old one, each a reload; a node that
// stays online takes every step's bundle and keeps running signed
// commands; a node offline through the rotation refuses the new bundle
// (no root it trusts signed it), says so, and takes it when it re-joins.
func TestE2E_RootRotationWhileNodesAreOnline(t *testing.T) {
	dir := t.TempDir()
	r1, _ := writeKey(t, dir, "root1.pem")
	r2, _ := writeKey(t, dir, "root2.pem")
	r := servertest.Start(t, func(c *server.Config) { c.PKI.CommandSigning = r1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	online, j := newTrustingNode(t, r, servertest.NodeA1)
	conn, err := grpc.NewClient(r.Gateway, grpc.WithTransportCredentials(j.Creds))
	require.NoError(t, err)
	defer conn.Close()
	go func() { _ = online.d.Run(ctx, conn) }()
	testutil.WaitFor(t, 10*time.Second, "welcome", func() bool { return online.d.Welcome() != nil })
	offline, jB := newTrustingNode(t, r, servertest.NodeB1)
	v1 := online.store.Version()

	runSigned := func(key string) {
		t.Helper()
		var c queue.Command
		require.NoError(t, pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
			var err error
			c, _, err = r.Server.Queue().Enqueue(ctx, tx, queue.EnqueueParams{TenantID: servertest.TenantA, NodeID: servertest.NodeA1, Kind: "inventory.refresh", IdempotencyKey: key})
			return err
		}))
		testutil.WaitFor(t, 15*time.Second, "command "+key+" to settle", func() bool {
			got, err := r.Queue.Get(ctx, r.Pool, servertest.NodeA1, c.ID)
			require.NoError(t, err)
			return got.State.Terminal()
		})
		got, err := r.Queue.Get(ctx, r.Pool, servertest.NodeA1, c.ID)
		require.NoError(t, err)
		require.Equal(t, queue.Succeeded, got.State, "%s: %s %s", key, got.Reason, got.Message)
	}
	step := func(name string, pc serverconfig.PKIConfig) {
		t.Helper()
		before := online.store.Version()
		require.NoError(t, r.Server.ReloadPKI(ctx, pc), name)
		testutil.WaitFor(t, 20*time.Second, name+": the online node takes the new bundle", func() bool { return online.store.Version() > before })
		runSigned(name)
	}
	runSigned("before")
	// 1. Announce, 2. switch, 3. retire (docs/trust.md).
	step("announce", serverconfig.PKIConfig{CommandSigning: r1, CommandSigningRoots: []string{r2}})
	step("switch", serverconfig.PKIConfig{CommandSigning: r2, CommandSigningRoots: []string{r1}})
	step("retire", serverconfig.PKIConfig{CommandSigning: r2})
	require.Empty(t, online.refusals())
	require.Greater(t, online.store.Version(), v1)
	require.Len(t, online.store.Bundle().Roots, 1)

	// The node that was offline holds version 1 and only the old root: the
	// bundle its next Welcome brings is signed by the new root alone, so it
	// refuses it and keeps refusing the new root's commands.
	require.Equal(t, v1, offline.store.Version())
	connB, err := grpc.NewClient(r.Gateway, grpc.WithTransportCredentials(jB.Creds))
	require.NoError(t, err)
	defer connB.Close()
	bctx, bcancel := context.WithCancel(ctx)
	bdone := make(chan struct{})
	go func() { defer close(bdone); _ = offline.d.Run(bctx, connB) }()
	testutil.WaitFor(t, 10*time.Second, "the offline node's welcome", func() bool { return offline.d.Welcome() != nil })
	require.NotEmpty(t, offline.refusals(), "a bundle no trusted root signed is refused")
	require.ErrorIs(t, offline.refusals()[0], trust.ErrUnknownKey)
	require.Equal(t, v1, offline.store.Version())
	bcancel()
	<-bdone

	// It re-joins (bcd join with a new token) and gets the new bundle.
	again := r.Join(t, servertest.NodeB1)
	require.NoError(t, offline.store.AcceptJoin(again.Response.GetTrustBundle().GetSigned(), time.Now()))
	require.Equal(t, online.store.Version(), offline.store.Version())
}
