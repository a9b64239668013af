package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/bindings"
	"github.com/better-compute/commands/controlplane/fleet/nodespecs"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/controlplane/trust/attest"
	"github.com/better-compute/commands/controlplane/trust/nodecerts"
	"github.com/better-compute/commands/controlplane/trust/signing"
	"github.com/better-compute/commands/controlplane/trust/trustbundle"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/nodespec"
)

// signedEnv is a control plane with command signing on: an authority, a
// published trust bundle relayed by the gateway from the database.
type signedEnv struct {
	*env
	auth   *signing.Authority
	bundle *trust.Bundle
}

func setupSigned(t *testing.T) *signedEnv {
	t.Helper()
	_, root, err := trust.NewEd25519()
	require.NoError(t, err)
	a, err := signing.New(root, signing.Options{})
	require.NoError(t, err)
	src := &lazySource{}
	e := setupWith(t, setupOptions{trust: src})
	src.set(trustbundle.NewSource(e.pool, time.Millisecond))
	content, err := trustbundle.Content(trustbundle.Settings{}, a.RootPublic())
	require.NoError(t, err)
	tb, err := trustbundle.Publish(e.ctx, e.pool, content, a, 0, time.Now())
	require.NoError(t, err)
	b, _, err := trust.VerifyBundle(tb.GetSigned(), nil, time.Now())
	require.NoError(t, err)
	e.q.SetSigner(a)
	return &signedEnv{env: e, auth: a, bundle: &b}
}

// lazySource is a trust bundle source set after the env (and its
// database) exists.
type lazySource struct {
	lock sync.Mutex
	src  *trustbundle.Source
}

func (l *lazySource) set(s *trustbundle.Source) { l.lock.Lock(); l.src = s; l.lock.Unlock() }

func (l *lazySource) Current(ctx context.Context) (*agentv1.TrustBundle, error) {
	l.lock.Lock()
	s := l.src
	l.lock.Unlock()
	if s == nil {
		return nil, nil
	}
	return s.Current(ctx)
}

// "bc-server with pki.commandSigning signs every command with a worker key
// the root certifies, at enqueue, and stores the signed bytes; the gateway
// relays those exact bytes and holds no signing key." and "JoinResponse and
// Welcome carry the trust bundle"
func TestGateway_SignedCommandsAndTheTrustBundleReachTheNode(t *testing.T) {
	e := setupSigned(t)
	d := fakedaemon.New(e.node.ID)
	d.Verify = func(env *agentv1.CommandEnvelope) error {
		_, err := trust.VerifyCommand(e.bundle, env, e.node.ID, time.Now())
		return err
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0))()
	w := d.Welcome()
	got, _, err := trust.VerifyBundle(w.GetTrustBundle().GetSigned(), nil, time.Now())
	require.NoError(t, err)
	require.Equal(t, e.bundle.Version, got.Version)

	c := e.enqueue("test.ctl", "signed")
	require.NotEmpty(t, c.Signature, "signed at enqueue")
	e.waitState(c.ID, queue.Succeeded)
	envs := d.Envelopes()
	require.Len(t, envs, 1)
	require.Equal(t, c.CommandBytes, envs[0].GetCommand(), "the stored bytes travel as stored")
	require.Equal(t, c.Signature, envs[0].GetSignature())
}

// A command stored before signing was on arrives unsigned, and a node that
// holds roots refuses it BAD_SIGNATURE without running it.
func TestGateway_UnsignedCommandIsRefusedByANodeWithRoots(t *testing.T) {
	e := setupSigned(t)
	e.q.SetSigner(nil)
	c := e.enqueue("test.ctl", "unsigned")
	require.Empty(t, c.Signature)
	d := fakedaemon.New(e.node.ID)
	d.Verify = func(env *agentv1.CommandEnvelope) error {
		_, err := trust.VerifyCommand(e.bundle, env, e.node.ID, time.Now())
		return err
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0))()
	got := e.waitState(c.ID, queue.Rejected)
	require.Equal(t, "BAD_SIGNATURE", got.Reason)
	require.NotEmpty(t, got.Message)
	require.Zero(t, d.Runs(c.ID))
}

func recordCert(t *testing.T, e *env, certPEM []byte) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, err := nodecerts.Record(e.ctx, tx, certPEM)
		return err
	}))
}

// "A re-join supersedes the node's earlier certificate: a session with a
// superseded or revoked certificate is refused and open sessions that use
// it are closed."
func TestGateway_SupersededCertificateClosesItsSessionAndIsRefused(t *testing.T) {
	e := setup(t, 1)
	id := trust.Identity{NodeID: e.node.ID, Role: "node"}
	connA, certA, _ := e.dialCert(id, 0)
	recordCert(t, e, certA)
	d := fakedaemon.New(e.node.ID)
	done := make(chan error, 1)
	go func() { done <- d.Run(e.ctx, connA) }()
	testutil.WaitFor(t, 10*time.Second, "welcome", func() bool { return d.Welcome() != nil })

	// The node re-joins: a new certificate is recorded.
	connB, certB, _ := e.dialCert(id, 0)
	recordCert(t, e, certB)
	select {
	case err := <-done:
		require.Error(t, err)
		require.Equal(t, codes.PermissionDenied, status.Code(errors.Unwrap(err)), err.Error())
	case <-time.After(15 * time.Second):
		t.Fatal("the session with the superseded certificate stayed open")
	}
	// The old certificate is refused; the new one works.
	err := fakedaemon.New(e.node.ID).Run(e.ctx, connA)
	require.Equal(t, codes.PermissionDenied, status.Code(errors.Unwrap(err)), "%v", err)
	d2 := fakedaemon.New(e.node.ID)
	defer e.run(d2, connB)()
	c := e.enqueue("test.ctl", "after-rejoin")
	e.waitState(c.ID, queue.Succeeded)
}

func TestGateway_RevokedCertificateClosesItsSession(t *testing.T) {
	e := setup(t, 1)
	conn, certPEM, _ := e.dialCert(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0)
	recordCert(t, e, certPEM)
	d := fakedaemon.New(e.node.ID)
	done := make(chan error, 1)
	go func() { done <- d.Run(e.ctx, conn) }()
	testutil.WaitFor(t, 10*time.Second, "welcome", func() bool { return d.Welcome() != nil })
	var revoked []nodecerts.Cert
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		revoked, err = nodecerts.Revoke(e.ctx, tx, e.node.ID, "", "operator")
		return err
	}))
	require.Len(t, revoked, 1)
	select {
	case err := <-done:
		require.Equal(t, codes.PermissionDenied, status.Code(errors.Unwrap(err)), "%v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("the session with the revoked certificate stayed open")
	}
}

func signAllocationBound(t *testing.T, keyPEM []byte, ab trust.AllocationBound) *agentv1.NodeMessage {
	t.Helper()
	blk, _ := pem.Decode(keyPEM)
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	require.NoError(t, err)
	st, err := ab.Encode()
	require.NoError(t, err)
	sig, err := trust.SignWith(k.(*ecdsa.PrivateKey), trust.PurposeAllocationBound, st)
	require.NoError(t, err)
	return &agentv1.NodeMessage{Msg: &agentv1.NodeMessage_AllocationBound{AllocationBound: &agentv1.AllocationBound{Statement: st, NodeSig: sig}}}
}

// "The control plane marks that allocation active only once the node's
// AllocationBound verifies" — and a forged one is refused.
func TestGateway_AllocationBoundVerifiesAgainstTheNodesCertificate(t *testing.T) {
	e := setup(t, 1)
	spec := json.RawMessage(`{"holds":[{"gpu":"GPU-1","allocation":"alloc_a","state":"live"},{"gpu":"GPU-2","mig":"MIG-x","allocation":"alloc_b","state":"live"}]}`)
	parsed, err := nodespec.Parse(spec)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		g, err := nodespecs.Set(e.ctx, tx, e.node.ID, spec, nil)
		if err != nil {
			return err
		}
		return bindings.Pending(e.ctx, tx, e.node.ID, g.Generation, parsed)
	}))
	conn, _, keyPEM := e.dialCert(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0)
	_, _, otherKey := e.dialCert(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0)
	d := fakedaemon.New(e.node.ID)
	d.AfterHello = []*agentv1.NodeMessage{
		signAllocationBound(t, keyPEM, trust.AllocationBound{Allocation: "alloc_a", NodeID: e.node.ID, GPUs: []string{"GPU-1"}, Generation: 1}),
		// Forged: signed by another key than the session's certificate's.
		signAllocationBound(t, otherKey, trust.AllocationBound{Allocation: "alloc_b", NodeID: e.node.ID, GPUs: []string{"GPU-2"}, Generation: 1}),
	}
	defer e.run(d, conn)()
	var bs []bindings.Binding
	testutil.WaitFor(t, 10*time.Second, "both bindings decided", func() bool {
		bs, err = bindings.List(e.ctx, e.pool, e.node.ID)
		require.NoError(t, err)
		return len(bs) == 2 && bs[0].State != bindings.StatePending && bs[1].State != bindings.StatePending
	})
	require.Equal(t, bindings.StateBound, bs[0].State, bs[0].Reason)
	require.Equal(t, bindings.StateRefused, bs[1].State)
	require.Contains(t, bs[1].Reason, "signature")
}

// "For attested kinds bcd signs its result with its node key ... The
// gateway stores it exactly as received", and the verifier refuses a
// tampered result and one moved to another command.
func TestGateway_AttestedResultStoredAsSentAndVerified(t *testing.T) {
	e := setup(t, 1)
	conn, certPEM, keyPEM := e.dialCert(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0)
	recordCert(t, e, certPEM)
	blk, _ := pem.Decode(keyPEM)
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	require.NoError(t, err)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action {
		return fakedaemon.Action{Kind: fakedaemon.Succeed, Result: json.RawMessage(`{"level":4, "pass":true}`)}
	}
	d.Attest = func(cmdBytes []byte, u *agentv1.CommandUpdate) {
		sum := sha256.Sum256(u.GetResult())
		sig, err := trust.SignResult(k.(*ecdsa.PrivateKey), trust.ResultStatement{CommandID: u.GetCommandId(), CommandDigest: trust.CommandDigest(cmdBytes),
			NodeID: e.node.ID, State: "succeeded", ResultSHA256: sum[:]})
		require.NoError(t, err)
		u.NodeSig = sig
	}
	defer e.run(d, conn)()
	c := e.enqueue("test.ctl", "attested")
	got := e.waitState(c.ID, queue.Succeeded)
	require.Equal(t, []byte(`{"level":4, "pass":true}`), got.ResultBytes, "stored exactly as received")
	require.NotEmpty(t, got.NodeSig)
	require.NoError(t, attest.NodeSignedResults(e.ctx, e.pool, e.ca.Pool(), attest.FromCommand(got)))

	tampered := attest.FromCommand(got)
	tampered.ResultBytes = []byte(`{"level":4, "pass":false}`)
	tampered.ResultSHA256 = nil
	require.Error(t, attest.NodeSignedResults(e.ctx, e.pool, e.ca.Pool(), tampered))
	other := e.enqueue("test.ctl", "other")
	moved := attest.FromCommand(got)
	moved.CommandID, moved.CommandBytes = other.ID, other.CommandBytes
	require.Error(t, attest.NodeSignedResults(e.ctx, e.pool, e.ca.Pool(), moved), "a result relayed for another command")
}

// "Progress reported after running reaches commands.get ... (throttled, at
// most about one write per second per command)": a burst of 200 steps is
// written at most a few times, and the newest step is the one stored.
func TestGateway_ProgressAfterRunningIsStoredThrottled(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action {
		return fakedaemon.Action{Kind: fakedaemon.Hang, Steps: 40, StepEvery: 25 * time.Millisecond}
	}
	// Count the row writes that change progress, in this test's own
	// database.
	_, err := e.pool.Exec(e.ctx, `
		CREATE TABLE progress_writes (at timestamptz DEFAULT now());
		CREATE FUNCTION count_progress() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO progress_writes DEFAULT VALUES; RETURN NULL; END $$;
		CREATE TRIGGER count_progress AFTER UPDATE OF progress ON commands
		  FOR EACH ROW WHEN (NEW.progress IS DISTINCT FROM OLD.progress) EXECUTE FUNCTION count_progress();`)
	require.NoError(t, err)
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0))()
	c := e.enqueue("test.ctl", "progress")
	e.waitState(c.ID, queue.Running)
	testutil.WaitFor(t, 10*time.Second, "the newest step to be stored", func() bool {
		got := e.get(c.ID)
		return strings.Contains(string(got.Progress), "step 40 of 40")
	})
	var writes int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM progress_writes`).Scan(&writes))
	require.Less(t, writes, 8, "40 steps were not written one by one")
}
