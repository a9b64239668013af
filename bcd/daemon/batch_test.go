package daemon

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/batchcheck"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/lanes"
	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// quorum is a node's trust bundle with a 2-of-3 approver quorum and a
// break-glass allowance of one an hour, the batch check over it, and an
// approved batch whose one leaf is this node's bcdcore.destroy.
type quorum struct {
	checker  *batchcheck.Checker
	clock    *trust.Clock
	approval []byte
	proof    [][]byte
}

func newQuorum(t *testing.T) *quorum {
	t.Helper()
	keys := make([]ed25519.PrivateKey, 4)
	for i := range keys {
		_, k, err := trust.NewEd25519()
		require.NoError(t, err)
		keys[i] = k
	}
	root, alice, bob, carol := keys[0], keys[1], keys[2], keys[3]
	pub := func(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }
	wire, err := trust.SignBundle(trust.Bundle{Version: 1, IssuedAt: time.Now().Add(-time.Minute), Roots: []trust.Root{{PublicKey: pub(root)}},
		Approvers:         []trust.Approver{{Name: "alice", PublicKey: pub(alice)}, {Name: "bob", PublicKey: pub(bob)}, {Name: "carol", PublicKey: pub(carol)}},
		ApprovalThreshold: 2, UnbatchedDestructivePerHour: 1}, root)
	require.NoError(t, err)
	dir := t.TempDir()
	store, err := truststore.Open(dir, nil, nil)
	require.NoError(t, err)
	require.NoError(t, store.AcceptJoin(wire, time.Now()))
	q := &quorum{clock: &trust.Clock{}}
	q.checker, err = batchcheck.Open(dir, batchcheck.Config{Store: store, NodeID: nodeID, Clock: q.clock})
	require.NoError(t, err)
	tree, err := trust.NewTree([]trust.Leaf{{Subject: nodeID, Kind: "bcdcore.destroy"}})
	require.NoError(t, err)
	st, err := trust.BatchStatement{BatchID: "batch_1", TreeSize: tree.Size(), RootHash: hex.EncodeToString(tree.Root()),
		NotAfter: time.Now().Add(time.Hour), Requester: "dave"}.Encode()
	require.NoError(t, err)
	q.approval = trust.Signed{Body: st, Signatures: []trust.Signature{trust.SignApproval(alice, st), trust.SignApproval(carol, st)}}.Encode()
	q.proof, err = tree.Proof(0)
	require.NoError(t, err)
	return q
}

// batched is a bcdcore.destroy command on the batch's one leaf.
func (q *quorum) batched(id string, h holdFiles) accept.Command {
	c := cmd(id, "bcdcore.destroy", h)
	c.BatchID = "batch_1"
	c.Envelope = &agentv1.CommandEnvelope{BatchApproval: q.approval, InclusionProof: q.proof}
	return c
}

// raced is the checker as two commands see it that both passed check 5
// before either was consumed: the daemon's consumption must still let only
// one through.
type raced struct{ *batchcheck.Checker }

func (raced) VerifyApproval(accept.Command) error { return nil }
func (raced) UnbatchedAllowed(time.Time) bool     { return true }

// "a (batch, leaf) is consumed once", and only by a command that is
// accepted: a BUSY one consumes nothing, and of two that both passed the
// check, the one the daemon consumes second is refused BATCH_UNAPPROVED,
// journaled, and never runs. The same for the last of the break-glass
// allowance, UNBATCHED_LIMIT.
func TestSubmit_Check5ConsumesOnlyWhatIsAccepted(t *testing.T) {
	q := newQuorum(t)
	n := start(t, "", func(c *Config) {
		c.Batches, c.Clock, c.Lanes = q.checker, q.clock, lanes.Sizes{Control: 1}
	})
	ctx := context.Background()
	outcome := func(c accept.Command) Update {
		t.Helper()
		ch, err := n.d.Submit(ctx, c)
		require.NoError(t, err)
		return last(t, collect(t, ch))
	}

	// The control lane is full: BUSY, not journaled, nothing consumed.
	blocker := newHold(t, true)
	chBlock, err := n.d.Submit(ctx, cmd("cmd_blocker", "bcdcore.hold", blocker))
	require.NoError(t, err)
	blocker.waitStarted(t)
	busyHold := newHold(t, false)
	require.Equal(t, accept.Busy, outcome(q.batched("cmd_busy", busyHold)).RejectCode)
	blocker.release(t)
	require.Equal(t, journal.StateSucceeded, last(t, collect(t, chBlock)).State)
	testutil.WaitFor(t, 10*time.Second, "the control worker to return", func() bool { return n.d.Lanes().Free(kind.LaneControl) })

	h := newHold(t, false)
	require.Equal(t, journal.StateSucceeded, outcome(q.batched("cmd_batched", h)).State, "the BUSY command consumed nothing")
	require.Equal(t, 1, h.runs(t))
	require.Equal(t, 0, busyHold.runs(t))

	// The replay is refused at the check.
	replay := outcome(q.batched("cmd_replay", h))
	require.Equal(t, accept.BatchUnapproved, replay.RejectCode)
	require.Contains(t, replay.Message, "consumed by another command")

	// Two that both passed the check: the second is refused on consumption.
	n.d.cfg.Batches = raced{q.checker}
	lost := outcome(q.batched("cmd_lost_race", h))
	require.Equal(t, journal.StateRejected, lost.State)
	require.Equal(t, accept.BatchUnapproved, lost.RejectCode)
	require.Contains(t, lost.Message, "ran cmd_batched")
	rec, found, err := n.j.Get("cmd_lost_race")
	require.NoError(t, err)
	require.True(t, found, "the refusal is journaled")
	require.Equal(t, string(accept.BatchUnapproved), rec.RejectCode)
	dup := outcome(q.batched("cmd_lost_race", h))
	require.True(t, dup.Duplicate)
	require.Equal(t, accept.BatchUnapproved, dup.RejectCode, "a duplicate delivery gets the same answer")

	// The break-glass allowance (one an hour) the same way.
	u := newHold(t, false)
	require.Equal(t, journal.StateSucceeded, outcome(cmd("cmd_unbatched_1", "bcdcore.destroy", u)).State)
	over := outcome(cmd("cmd_unbatched_2", "bcdcore.destroy", u))
	require.Equal(t, accept.UnbatchedLimit, over.RejectCode)
	require.Contains(t, over.Message, "1 of 1 used in the last hour")
	_, found, err = n.j.Get("cmd_unbatched_2")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, 1, u.runs(t))
	require.Equal(t, 1, h.runs(t), "only cmd_batched ran on the leaf")
}
