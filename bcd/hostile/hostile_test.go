package hostile

import (
	"crypto/sha256"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

const nodeA = "node_hostile_a"

// suite is one node, its gateway and the authority, and what the subtests
// leave for the final checks.
type suite struct {
	t   *testing.T
	a   *authority
	ca  *nodeCA
	gw  *gateway
	n   *node
	cur *conn
	// refused maps each refused command to the code it was refused with:
	// every one must be in the journal at the end.
	refused map[string]agentv1.RejectCode
	// good are the commands that must have run, once each.
	good []string
	// attested is the attested command's envelope, replayed after a restart.
	attested *agentv1.CommandEnvelope
}

func (s *suite) command(id, kind string) *agentv1.Command {
	return &agentv1.Command{Id: id, NodeId: nodeA, Seq: 1, Kind: kind, Payload: s.n.payload(),
		NotAfter: ts(time.Now().Add(10 * time.Minute)), CreatedAt: ts(time.Now())}
}

// welcome is an honest Welcome: the server's time and the current bundle.
func (s *suite) welcome() *agentv1.Welcome {
	return &agentv1.Welcome{ServerTime: ts(time.Now()), SessionEpoch: 1, TrustBundle: &agentv1.TrustBundle{Version: 2, Signed: s.a.v2}}
}

// reconnect ends the session and waits for the node's next one, which
// gets w's Welcome.
func (s *suite) reconnect(t *testing.T, w func() *agentv1.Welcome) *conn {
	t.Helper()
	s.gw.setWelcome(w)
	k := s.gw.sessions()
	s.cur.close()
	s.cur = s.gw.session(t, k+1)
	return s.cur
}

// refuse sends env and requires the node to refuse it with code, the
// explanation containing words, and the plugin to have run nothing.
func (s *suite) refuse(t *testing.T, env *agentv1.CommandEnvelope, id string, code agentv1.RejectCode, words string) *agentv1.CommandUpdate {
	t.Helper()
	s.cur.command(env)
	u := s.cur.outcome(t, id, 1)
	require.Equal(t, agentv1.CommandState_COMMAND_STATE_REJECTED, u.GetState(), "%s: %v", id, u)
	require.Equal(t, code, u.GetRejectCode(), "%s: %s", id, u.GetMessage())
	require.Equal(t, strings.TrimPrefix(code.String(), "REJECT_CODE_"), u.GetReason(), "a reason is a bare code")
	require.Contains(t, u.GetMessage(), words)
	require.NotContains(t, s.n.ran(), id, "a refused command never runs")
	s.refused[id] = code
	return u
}

// run sends env and requires it to succeed, having run once.
func (s *suite) run(t *testing.T, env *agentv1.CommandEnvelope, id string) *agentv1.CommandUpdate {
	t.Helper()
	s.cur.command(env)
	u := s.cur.outcome(t, id, 1)
	require.Equal(t, agentv1.CommandState_COMMAND_STATE_SUCCEEDED, u.GetState(), "%s: %s %s", id, u.GetReason(), u.GetMessage())
	require.Equal(t, 1, count(s.n.ran(), id))
	s.good = append(s.good, id)
	return u
}

func count(ids []string, id string) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// The "Done when": every forgery a compromised gateway can try is
// refused by the node itself with the spec's code, journaled where the spec
// says ("The refusals other than BUSY make the command rejected, and the
// daemon journals them"), and the plugin's record shows nothing ran; a
// properly signed command does run.
func TestHostileGateway(t *testing.T) {
	t.Parallel()
	s := &suite{t: t, a: newAuthority(t), ca: newNodeCA(t), refused: map[string]agentv1.RejectCode{}}
	s.gw = newGateway(t, s.ca.gatewayTLS(t))
	s.n = newNode(t, trust.Identity{NodeID: nodeA}, s.ca, s.gw.addr, s.a.v1)
	s.gw.setWelcome(s.welcome)
	s.n.start()
	s.cur = s.gw.session(t, 1)
	require.Equal(t, int64(1), s.cur.hello.GetTrustVersion(), "Hello names the bundle held: the join answer's")
	// The first Welcome brings version 2, signed by a root of version 1,
	// which drops the old root: from here on the old root is removed.
	s.cur.condition(t, "TrustBundle", func(c *agentv1.NodeCondition) bool {
		return c.GetStatus() && c.GetMessage() == "trust bundle version 2"
	})

	t.Run("a properly signed command runs", func(t *testing.T) {
		s.run(t, sign(t, s.a.worker, s.command("cmd_good", "bcdcore.hold")), "cmd_good")
	})
	t.Run("an unsigned command", func(t *testing.T) {
		b, err := proto.Marshal(s.command("cmd_unsigned", "bcdcore.hold"))
		require.NoError(t, err)
		s.refuse(t, &agentv1.CommandEnvelope{Command: b}, "cmd_unsigned", agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "unsigned")
	})
	t.Run("a command signed by an unknown root", func(t *testing.T) {
		s.refuse(t, sign(t, s.a.attackerWorker, s.command("cmd_unknown_root", "bcdcore.hold")), "cmd_unknown_root",
			agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "not in trust bundle version 2")
	})
	t.Run("a command signed by an expired worker key", func(t *testing.T) {
		s.refuse(t, sign(t, s.a.expired, s.command("cmd_expired_key", "bcdcore.hold")), "cmd_expired_key",
			agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "outside its validity window")
	})
	t.Run("a command signed by a worker key of a removed root", func(t *testing.T) {
		s.refuse(t, sign(t, s.a.oldWorker, s.command("cmd_removed_root", "bcdcore.hold")), "cmd_removed_root",
			agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "not in trust bundle version 2")
	})
	t.Run("a command signed for another node", func(t *testing.T) {
		c := s.command("cmd_other_node", "bcdcore.hold")
		c.NodeId = "node_hostile_b"
		// Check 1 comes first: "the body names another node".
		s.refuse(t, sign(t, s.a.worker, c), "cmd_other_node", agentv1.RejectCode_REJECT_CODE_UNSUPPORTED, "names node")
	})
	t.Run("a command signed for another node, re-addressed to this one", func(t *testing.T) {
		c := s.command("cmd_readdressed", "bcdcore.hold")
		c.NodeId = "node_hostile_b"
		env := sign(t, s.a.worker, c)
		c.NodeId = nodeA
		env.Command, _ = proto.Marshal(c)
		s.refuse(t, env, "cmd_readdressed", agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "signature does not verify")
	})
	t.Run("a command whose payload was altered after signing", func(t *testing.T) {
		c := s.command("cmd_payload", "bcdcore.hold")
		env := sign(t, s.a.worker, c)
		c.Payload = []byte(`{"countFile":"/tmp/elsewhere"}`)
		env.Command, _ = proto.Marshal(c)
		s.refuse(t, env, "cmd_payload", agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "signature does not verify")
	})
	t.Run("a command whose kind was altered after signing", func(t *testing.T) {
		c := s.command("cmd_kind", "bcdcore.hold")
		env := sign(t, s.a.worker, c)
		c.Kind = "bcdcore.holdonce"
		env.Command, _ = proto.Marshal(c)
		s.refuse(t, env, "cmd_kind", agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "signature does not verify")
	})
	t.Run("a replay of a finished command is answered from the journal", func(t *testing.T) {
		env := sign(t, s.a.worker, s.command("cmd_replayed", "bcdcore.hold"))
		first := s.run(t, env, "cmd_replayed")
		s.cur.command(env)
		again := s.cur.outcome(t, "cmd_replayed", 2)
		require.Equal(t, agentv1.CommandState_COMMAND_STATE_SUCCEEDED, again.GetState())
		require.Equal(t, first.GetResult(), again.GetResult(), "the journal's answer")
		// A refused one is answered from the journal too.
		b, _ := proto.Marshal(s.command("cmd_unsigned", "bcdcore.hold"))
		s.cur.command(&agentv1.CommandEnvelope{Command: b})
		require.Equal(t, agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, s.cur.outcome(t, "cmd_unsigned", 2).GetRejectCode())
		// A marker behind them: once it is answered, so were they.
		s.run(t, sign(t, s.a.worker, s.command("cmd_marker", "bcdcore.hold")), "cmd_marker")
		require.Equal(t, 1, count(s.n.ran(), "cmd_replayed"), "nothing runs twice")
	})
	t.Run("a Welcome carrying a trust bundle of a lower version", func(t *testing.T) {
		lower := func() *agentv1.Welcome {
			w := s.welcome()
			w.TrustBundle = &agentv1.TrustBundle{Version: 1, Signed: s.a.v1}
			return w
		}
		c := s.reconnect(t, lower)
		require.Equal(t, int64(2), c.hello.GetTrustVersion())
		cd := c.condition(t, "TrustBundle", func(c *agentv1.NodeCondition) bool { return !c.GetStatus() })
		require.Equal(t, "rollback", cd.GetReason(), cd.GetMessage())
		require.Contains(t, cd.GetMessage(), "version 2 kept")
		// Version 1 still trusted the old root: taking it back would let
		// the removed root's worker key in.
		s.refuse(t, sign(t, s.a.oldWorker, s.command("cmd_after_rollback", "bcdcore.hold")), "cmd_after_rollback",
			agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "not in trust bundle version 2")
		// "logged once per distinct refusal": the same offer again is not.
		c = s.reconnect(t, lower)
		c.condition(t, "TrustBundle", func(c *agentv1.NodeCondition) bool { return c.GetReason() == "rollback" })
		require.Equal(t, 1, strings.Count(s.n.log.String(), "trust bundle refused"), s.n.log.String())
	})
	t.Run("a Welcome carrying the attacker's own trust bundle", func(t *testing.T) {
		c := s.reconnect(t, func() *agentv1.Welcome {
			w := s.welcome()
			w.TrustBundle = &agentv1.TrustBundle{Version: 99, Signed: s.a.attackerBundle}
			return w
		})
		cd := c.condition(t, "TrustBundle", func(c *agentv1.NodeCondition) bool { return c.GetReason() == "unverified" })
		require.False(t, cd.GetStatus())
		s.refuse(t, sign(t, s.a.attackerWorker, s.command("cmd_attacker_bundle", "bcdcore.hold")), "cmd_attacker_bundle",
			agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "not in trust bundle version 2")
		s.reconnect(t, s.welcome)
		require.Equal(t, int64(2), s.cur.hello.GetTrustVersion(), "the bundle held is still version 2")
	})
	t.Run("a Welcome whose server time makes an expired command look fresh", func(t *testing.T) {
		// "a Welcome claiming the time was 48 hours earlier made an
		// hour-expired command run": the offset is beyond maxClockSkew,
		// so the node keeps its own clock.
		c := s.reconnect(t, func() *agentv1.Welcome {
			w := s.welcome()
			w.ServerTime = ts(time.Now().Add(-48 * time.Hour))
			return w
		})
		cd := c.condition(t, "ClockSkew", func(c *agentv1.NodeCondition) bool { return c.GetStatus() })
		require.Equal(t, "refused", cd.GetReason())
		require.Regexp(t, `48h0m\d+s behind this node's clock`, cd.GetMessage())
		cmd := s.command("cmd_revived", "bcdcore.hold")
		cmd.CreatedAt, cmd.NotAfter = ts(time.Now().Add(-2*time.Hour)), ts(time.Now().Add(-time.Hour))
		s.refuse(t, sign(t, s.a.worker, cmd), "cmd_revived", agentv1.RejectCode_REJECT_CODE_EXPIRED, "not_after")
		s.reconnect(t, s.welcome)
		s.cur.condition(t, "ClockSkew", func(c *agentv1.NodeCondition) bool { return !c.GetStatus() })
	})
	t.Run("a forged spec", func(t *testing.T) {
		c := s.cur
		c.spec(signedSpec(t, s.a.attackerWorker, nodeA, 5, `{"holds":[{"gpu":"GPU-8","allocation":"alloc_evil","state":"live"}]}`))
		cd := c.condition(t, "NodeSpec", func(c *agentv1.NodeCondition) bool { return c.GetReason() == "unverified" })
		require.False(t, cd.GetStatus())
		require.Contains(t, cd.GetMessage(), "generation 5")
		// Unsigned: only the unsigned fields.
		c.spec(&agentv1.Spec{Generation: 6, Spec: []byte(`{}`)})
		c.condition(t, "NodeSpec", func(c *agentv1.NodeCondition) bool { return strings.Contains(c.GetMessage(), "unsigned") })
		// Signed, but the Spec claims another generation than its statement.
		sp := signedSpec(t, s.a.worker, nodeA, 3, `{}`)
		sp.Generation = 7
		c.spec(sp)
		c.condition(t, "NodeSpec", func(c *agentv1.NodeCondition) bool { return strings.Contains(c.GetMessage(), "generation 7") })
		// Signed for another node.
		c.spec(signedSpec(t, s.a.worker, "node_hostile_b", 8, `{}`))
		c.condition(t, "NodeSpec", func(c *agentv1.NodeCondition) bool { return strings.Contains(c.GetMessage(), "generation 8") })

		// A signed generation whose unsigned spec field was swapped: the
		// node applies the statement, and binds only what it says.
		good := signedSpec(t, s.a.worker, nodeA, 3, `{"holds":[{"gpu":"GPU-2","mig":"MIG-2a","allocation":"alloc_a","state":"live"},`+
			`{"gpu":"GPU-1","allocation":"alloc_a","state":"live"},{"gpu":"GPU-2","slot":"s1","allocation":"alloc_a","state":"live"},`+
			`{"gpu":"GPU-3","allocation":"alloc_gone","state":"released"}]}`)
		good.Spec = []byte(`{"holds":[{"gpu":"GPU-8","allocation":"alloc_evil","state":"live"}]}`)
		c.spec(good)
		cd = c.condition(t, "NodeSpec", func(c *agentv1.NodeCondition) bool { return c.GetStatus() })
		require.Equal(t, "node spec generation 3 applied", cd.GetMessage())
		ab := c.await(t, "an AllocationBound", func(m *agentv1.NodeMessage) bool { return m.GetAllocationBound() != nil }).GetAllocationBound()
		st, err := trust.DecodeAllocationBound(ab.GetStatement())
		require.NoError(t, err)
		require.Equal(t, trust.AllocationBound{Allocation: "alloc_a", NodeID: nodeA, GPUs: []string{"GPU-1", "GPU-2"}, Generation: 3}, st)
		require.NoError(t, trust.VerifyWith(c.peer.PublicKey, trust.PurposeAllocationBound, ab.GetStatement(), ab.GetNodeSig()),
			"signed by the key of the node certificate the session was opened with")
		require.Len(t, c.all(func(m *agentv1.NodeMessage) bool { return m.GetAllocationBound() != nil }), 1, "one per allocation with live holds")
	})
	t.Run("a rolled-back spec", func(t *testing.T) {
		c := s.cur
		c.spec(signedSpec(t, s.a.worker, nodeA, 2, `{}`))
		cd := c.condition(t, "NodeSpec", func(c *agentv1.NodeCondition) bool { return c.GetReason() == "stale" })
		require.Contains(t, cd.GetMessage(), "generation 2 is older than the applied generation 3")
		testutil.WaitFor(t, 30*time.Second, "the log to say the spec was not applied", func() bool {
			return strings.Contains(s.n.log.String(), "node spec not applied")
		})
		require.Equal(t, 1, strings.Count(s.n.log.String(), "node spec applied"), "a dropped spec is never logged as applied")
		next := s.reconnect(t, s.welcome)
		require.Equal(t, int64(3), next.hello.GetAppliedGeneration())
		// "it re-sends the latest generation's on a new session".
		ab := next.await(t, "the AllocationBound again", func(m *agentv1.NodeMessage) bool { return m.GetAllocationBound() != nil }).GetAllocationBound()
		st, err := trust.DecodeAllocationBound(ab.GetStatement())
		require.NoError(t, err)
		require.Equal(t, int64(3), st.Generation)
	})
	t.Run("an attested result verifies with exactly what was sent, and only for its command", func(t *testing.T) {
		env := sign(t, s.a.worker, s.command("cmd_attested", "bcdcore.attested"))
		s.attested = env
		u := s.run(t, env, "cmd_attested")
		st := s.statementOf(t, env, u)
		require.NoError(t, trust.VerifyResult(s.ca.pool, s.cur.peer, st, u.GetNodeSig(), time.Now()))

		other := sign(t, s.a.worker, s.command("cmd_attested_other", "bcdcore.attested"))
		moved := st
		moved.CommandID, moved.CommandDigest = "cmd_attested_other", trust.CommandDigest(other.GetCommand())
		require.ErrorIs(t, trust.VerifyResult(s.ca.pool, s.cur.peer, moved, u.GetNodeSig(), time.Now()), trust.ErrBadSignature)
		sameID := st
		sameID.CommandDigest = trust.CommandDigest(other.GetCommand())
		require.ErrorIs(t, trust.VerifyResult(s.ca.pool, s.cur.peer, sameID, u.GetNodeSig(), time.Now()), trust.ErrBadSignature)
		forged := st
		forged.State = "failed"
		require.ErrorIs(t, trust.VerifyResult(s.ca.pool, s.cur.peer, forged, u.GetNodeSig(), time.Now()), trust.ErrBadSignature)

		// A refusal of an attested kind is attested too.
		b, _ := proto.Marshal(s.command("cmd_attested_unsigned", "bcdcore.attested"))
		unsigned := &agentv1.CommandEnvelope{Command: b}
		r := s.refuse(t, unsigned, "cmd_attested_unsigned", agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "unsigned")
		require.NoError(t, trust.VerifyResult(s.ca.pool, s.cur.peer, s.statementOf(t, unsigned, r), r.GetNodeSig(), time.Now()))
	})
	t.Run("after a restart a replayed attested command is answered from the journal, signed the same way", func(t *testing.T) {
		require.NotNil(t, s.attested, "the attested subtest ran")
		s.n.stop()
		k := s.gw.sessions()
		s.n.start()
		s.cur = s.gw.session(t, k+1)
		require.Equal(t, int64(2), s.cur.hello.GetTrustVersion())
		require.Equal(t, int64(3), s.cur.hello.GetAppliedGeneration())
		// The gateway replays the stored bytes.
		s.cur.command(s.attested)
		u := s.cur.outcome(t, "cmd_attested", 1)
		require.Equal(t, agentv1.CommandState_COMMAND_STATE_SUCCEEDED, u.GetState())
		require.Equal(t, 1, count(s.n.ran(), "cmd_attested"), "not run again")
		require.NoError(t, trust.VerifyResult(s.ca.pool, s.cur.peer, s.statementOf(t, s.attested, u), u.GetNodeSig(), time.Now()),
			"the journal kept the command's digest, so the answer is signed for the same command bytes")
	})
	t.Run("every refusal is journaled and nothing refused ran", func(t *testing.T) {
		s.n.stop()
		j := s.n.journal()
		for id, code := range s.refused {
			rec, found, err := j.Get(id)
			require.NoError(t, err)
			require.True(t, found, "%s is journaled", id)
			require.Equal(t, journal.StateRejected, rec.State, id)
			require.Equal(t, strings.TrimPrefix(code.String(), "REJECT_CODE_"), rec.RejectCode, id)
		}
		ran := s.n.ran()
		slices.Sort(ran)
		want := append([]string(nil), s.good...)
		slices.Sort(want)
		require.Equal(t, want, ran, "the plugin ran exactly the properly signed commands, once each")
	})
}

// statementOf is what a consumer rebuilds from what the node sent: the
// command id, the digest of the exact command bytes it was sent, the node
// the session's certificate names, the state and the result's SHA-256
// (which must be the SHA-256 of the result bytes).
func (s *suite) statementOf(t *testing.T, env *agentv1.CommandEnvelope, u *agentv1.CommandUpdate) trust.ResultStatement {
	t.Helper()
	require.NotEmpty(t, u.GetNodeSig(), "an attested kind's outcome is signed")
	if len(u.GetResult()) > 0 {
		sum := sha256.Sum256(u.GetResult())
		require.Equal(t, sum[:], u.GetResultSha256())
	}
	id, err := trust.IdentityOf(s.cur.peer)
	require.NoError(t, err)
	state := strings.ToLower(strings.TrimPrefix(u.GetState().String(), "COMMAND_STATE_"))
	return trust.ResultStatement{CommandID: u.GetCommandId(), CommandDigest: trust.CommandDigest(env.GetCommand()), NodeID: id.NodeID,
		State: state, ResultSHA256: u.GetResultSha256()}
}
