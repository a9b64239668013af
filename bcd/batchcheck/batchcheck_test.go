package batchcheck

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

const node = "node_batch"

var payload = []byte(`{"countFile":"/tmp/x"}`)

// fixture is a node's trust bundle holding a 2-of-3 quorum and an
// allowance, a batch approved by two of the three, and a clock the test
// moves.
type fixture struct {
	t                 testing.TB
	dir               string
	store             *truststore.Store
	clock             *trust.Clock
	now               time.Time
	alice, bob, carol ed25519.PrivateKey
	tree              *trust.Tree
	approval          []byte
	notAfter          time.Time
}

func key(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := trust.NewEd25519()
	require.NoError(t, err)
	return k
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func newFixture(t testing.TB, perHour int, scope ...trust.Leaf) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), now: time.Now().UTC().Truncate(time.Second), alice: key(t), bob: key(t), carol: key(t)}
	f.clock = &trust.Clock{Now: func() time.Time { return f.now }}
	root := key(t)
	wire, err := trust.SignBundle(trust.Bundle{Version: 1, IssuedAt: f.now.Add(-time.Minute), Roots: []trust.Root{{PublicKey: pub(root)}},
		Approvers:         []trust.Approver{{Name: "alice", PublicKey: pub(f.alice)}, {Name: "bob", PublicKey: pub(f.bob)}, {Name: "carol", PublicKey: pub(f.carol)}},
		ApprovalThreshold: 2, UnbatchedDestructivePerHour: perHour}, root)
	require.NoError(t, err)
	f.store, err = truststore.Open(f.dir, nil, nil)
	require.NoError(t, err)
	require.NoError(t, f.store.AcceptJoin(wire, f.now))
	if len(scope) == 0 {
		sum := sha256.Sum256(payload)
		scope = []trust.Leaf{{Subject: node, Kind: "node.reboot"}, {Subject: "node_other", Kind: "node.reboot"}, {Subject: node, Kind: "gpu.reset", PayloadSHA256: sum[:]}}
	}
	f.tree, err = trust.NewTree(scope)
	require.NoError(t, err)
	f.notAfter = f.now.Add(time.Hour)
	f.approval = f.approve("batch_1", f.alice, f.bob)
	return f
}

// approve signs batch's statement over the fixture's tree with keys.
func (f *fixture) approve(batch string, keys ...ed25519.PrivateKey) []byte {
	st, err := trust.BatchStatement{BatchID: batch, TreeSize: f.tree.Size(), RootHash: hex.EncodeToString(f.tree.Root()), NotAfter: f.notAfter, Requester: "dave"}.Encode()
	require.NoError(f.t, err)
	s := trust.Signed{Body: st}
	for _, k := range keys {
		s.Signatures = append(s.Signatures, trust.SignApproval(k, st))
	}
	return s.Encode()
}

func (f *fixture) open() *Checker {
	f.t.Helper()
	c, err := Open(f.dir, Config{Store: f.store, NodeID: node, Clock: f.clock})
	require.NoError(f.t, err)
	return c
}

// command is id on the leaf for kind, in batch_1.
func (f *fixture) command(id, kind string) accept.Command {
	f.t.Helper()
	sum := sha256.Sum256(payload)
	i, ok := f.tree.Index(node, kind, sum[:])
	require.True(f.t, ok)
	p, err := f.tree.Proof(i)
	require.NoError(f.t, err)
	return accept.Command{ID: id, NodeID: node, Kind: kind, Payload: payload, BatchID: "batch_1",
		Envelope: &agentv1.CommandEnvelope{BatchApproval: f.approval, LeafIndex: int64(i), InclusionProof: p}}
}

// accept is what the daemon does for an accepted batched command.
func (f *fixture) accept(c *Checker, cmd accept.Command) {
	f.t.Helper()
	require.NoError(f.t, c.VerifyApproval(cmd))
	code, err := c.Consume(cmd, false, f.clock.ServerNow())
	require.NoError(f.t, err)
	require.Empty(f.t, code)
}

// "a (batch, leaf) is consumed once": a second command naming the same
// batch and leaf is refused, also after a restart, and the one that ran may
// be redelivered (a crash before it was journaled).
func TestChecker_ALeafIsConsumedOnceAndItSurvivesARestart(t *testing.T) {
	f := newFixture(t, 0)
	c := f.open()
	require.True(t, c.HasApproverKeys())
	first := f.command("cmd_1", "node.reboot")
	require.NoError(t, c.VerifyApproval(first))
	require.NoError(t, c.VerifyApproval(first), "verifying consumes nothing")
	f.accept(c, first)

	replay := f.command("cmd_2", "node.reboot")
	require.ErrorIs(t, c.VerifyApproval(replay), ErrLeafConsumed)
	code, err := c.Consume(replay, false, f.now)
	require.Equal(t, accept.BatchUnapproved, code)
	require.ErrorIs(t, err, ErrLeafConsumed)

	// Another leaf of the same batch is its own.
	f.accept(c, f.command("cmd_3", "gpu.reset"))

	again := f.open()
	require.ErrorIs(t, again.VerifyApproval(replay), ErrLeafConsumed, "the ledger survives a restart")
	require.NoError(t, again.VerifyApproval(first), "the command that ran on it may be redelivered")
	f.accept(again, first)
	st, err := os.Stat(filepath.Join(f.dir, FileName))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

// The checks VerifyBatch makes, through the node's path: the node's own id
// and the SHA-256 of the payload it received, never what it is handed.
func TestChecker_TheNodeComputesItsOwnLeaf(t *testing.T) {
	f := newFixture(t, 0)
	c := f.open()
	cmd := f.command("cmd_1", "gpu.reset")
	cmd.Payload = []byte(`{"countFile":"/tmp/y"}`)
	require.ErrorIs(t, c.VerifyApproval(cmd), trust.ErrNotInBatch, "a payload altered from the one the leaf binds")

	other, err := Open(f.dir, Config{Store: f.store, NodeID: "node_other", Clock: f.clock})
	require.NoError(t, err)
	require.ErrorIs(t, other.VerifyApproval(f.command("cmd_1", "node.reboot")), trust.ErrNotInBatch, "the leaf of another node")

	cmd = f.command("cmd_1", "node.reboot")
	cmd.Envelope.BatchApproval = nil
	require.ErrorIs(t, c.VerifyApproval(cmd), ErrNoApproval)
	cmd.Envelope = nil
	require.ErrorIs(t, c.VerifyApproval(cmd), ErrNoApproval)
	cmd = f.command("cmd_1", "node.reboot")
	cmd.Envelope.LeafIndex = -1
	require.ErrorIs(t, c.VerifyApproval(cmd), trust.ErrNotInBatch)
	cmd = f.command("cmd_1", "node.reboot")
	cmd.Envelope.BatchApproval = f.approve("batch_1", f.alice)
	require.ErrorIs(t, c.VerifyApproval(cmd), trust.ErrTooFewApprovals)
}

// Of two commands racing for one leaf, exactly one consumes it.
func TestChecker_TwoCommandsOnOneLeafOneWins(t *testing.T) {
	f := newFixture(t, 0)
	c := f.open()
	cmds := make([]accept.Command, 8)
	for i := range cmds {
		cmds[i] = f.command(fmt.Sprintf("cmd_%d", i), "node.reboot")
		require.NoError(t, c.VerifyApproval(cmds[i]), "before any is consumed, all verify")
	}
	var wg sync.WaitGroup
	codes := make([]accept.Code, len(cmds))
	for i, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = c.Consume(cmd, false, f.now)
		}()
	}
	wg.Wait()
	won := 0
	for _, code := range codes {
		if code == "" {
			won++
		} else {
			require.Equal(t, accept.BatchUnapproved, code)
		}
	}
	require.Equal(t, 1, won)
}

// "may forget entries past the batch's deadline": the ledger forgets a
// leaf once its batch is past its deadline, and then refuses the batch
// even when the node's clock is set back.
func TestChecker_ForgetsPastTheDeadlineAndTheClockNeverGoesBack(t *testing.T) {
	f := newFixture(t, 0)
	c := f.open()
	f.accept(c, f.command("cmd_1", "node.reboot"))
	start := f.now

	// Past the deadline (and the skew VerifyBatch allows), another
	// consumption forgets batch_1's leaf.
	f.now = f.notAfter.Add(trust.DefaultClockSkew + time.Minute)
	f.notAfter = f.now.Add(time.Hour)
	later := f.command("cmd_later", "node.reboot")
	later.BatchID = "batch_2"
	later.Envelope.BatchApproval = f.approve("batch_2", f.alice, f.carol)
	f.accept(c, later)
	b, err := os.ReadFile(filepath.Join(f.dir, FileName))
	require.NoError(t, err)
	led, err := decodeLedger(b)
	require.NoError(t, err)
	require.Len(t, led.leaves, 1)
	require.Contains(t, led.leaves, leafKey{"batch_2", uint64(later.Envelope.GetLeafIndex())})

	// The clock set back to when batch_1 was fresh: batch_1's approval
	// verifies again at that time, but the ledger refuses it.
	f.now = start
	f.notAfter = start.Add(time.Hour)
	f.approval = f.approve("batch_1", f.alice, f.bob)
	replay := f.command("cmd_replay", "node.reboot")
	require.ErrorIs(t, f.open().VerifyApproval(replay), ErrBehindLedger)
}

// "UnbatchedAllowed(now) = the break-glass allowance
// unbatchedDestructivePerHour: a sliding hour of accepted unbatched
// destructive commands"; 0 allows none.
func TestChecker_TheBreakGlassAllowanceIsASlidingHour(t *testing.T) {
	f := newFixture(t, 2)
	c := f.open()
	use := func(id string) (accept.Code, error) {
		return c.Consume(accept.Command{ID: id, NodeID: node, Kind: "node.reboot"}, true, f.now)
	}
	t0 := f.now
	require.True(t, c.UnbatchedAllowed(f.now))
	code, err := use("cmd_u1")
	require.NoError(t, err)
	require.Empty(t, code)
	f.now = t0.Add(30 * time.Minute)
	code, err = use("cmd_u2")
	require.NoError(t, err)
	require.Empty(t, code)
	code, err = use("cmd_u2")
	require.NoError(t, err, "a redelivery consumes nothing more")
	require.Empty(t, code)
	require.False(t, c.UnbatchedAllowed(f.now))
	code, err = use("cmd_u3")
	require.Equal(t, accept.UnbatchedLimit, code)
	require.ErrorIs(t, err, ErrAllowanceSpent)

	// A restart remembers; an hour after the first, one is free again.
	c = f.open()
	require.False(t, c.UnbatchedAllowed(f.now))
	f.now = t0.Add(time.Hour + time.Second)
	require.True(t, c.UnbatchedAllowed(f.now))
	code, err = use("cmd_u3")
	require.NoError(t, err)
	require.Empty(t, code)
	require.False(t, c.UnbatchedAllowed(f.now))
	// A clock set back does not give the hour back.
	require.False(t, c.UnbatchedAllowed(t0.Add(-time.Hour)))

	none := newFixture(t, 0).open()
	require.False(t, none.UnbatchedAllowed(time.Now()), "0 allows none")
	code, _ = none.Consume(accept.Command{ID: "cmd_u", Kind: "node.reboot"}, true, time.Now())
	require.Equal(t, accept.UnbatchedLimit, code)
}

// A ledger that does not decode refuses every destructive command (fail
// closed) and says how to recover; the node still starts.
func TestChecker_AnUnreadableLedgerRefusesEveryDestructiveCommand(t *testing.T) {
	f := newFixture(t, 5)
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, FileName), []byte(`{"version":1,"clock":"2026-01-01T00:00:00Z","leaves":[{}]}`), 0o600))
	c := f.open()
	err := c.VerifyApproval(f.command("cmd_1", "node.reboot"))
	require.ErrorIs(t, err, ErrLedgerUnreadable)
	require.ErrorContains(t, err, "remove it")
	require.False(t, c.UnbatchedAllowed(f.now))
	code, _ := c.Consume(f.command("cmd_1", "node.reboot"), false, f.now)
	require.Equal(t, accept.BatchUnapproved, code)
}

// Without approver keys the checker says so, and check 5 records a batch
// for audit only.
func TestChecker_WithoutApproverKeys(t *testing.T) {
	store, err := truststore.Open(t.TempDir(), nil, nil)
	require.NoError(t, err)
	c, err := Open(t.TempDir(), Config{Store: store, NodeID: node})
	require.NoError(t, err)
	require.False(t, c.HasApproverKeys())
	require.False(t, c.UnbatchedAllowed(time.Now()))
}
