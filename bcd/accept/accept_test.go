package accept

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

var now = time.Date(2026, 4, 12, 10, 0, 0, 0, time.UTC)

type trust struct {
	roots bool
	err   error
}

func (t trust) HasCommandSigningRoots() bool { return t.roots }
func (t trust) VerifyCommand(Command) error  { return t.err }

type batches struct {
	keys      bool
	err       error
	allowance bool
}

func (b batches) HasApproverKeys() bool           { return b.keys }
func (b batches) VerifyApproval(Command) error    { return b.err }
func (b batches) UnbatchedAllowed(time.Time) bool { return b.allowance }

type lanes map[kind.Lane]bool

func (l lanes) Free(x kind.Lane) bool { return l[x] }

var (
	echo   = kind.Manifest{Kind: "example.echo", Lane: kind.LaneControl, Roles: []string{"node", "discovery"}, Timeout: kind.Duration(time.Minute), Version: "1.0.0"}
	reboot = kind.Manifest{Kind: "node.reboot", Lane: kind.LaneControl, Roles: []string{"node"}, Timeout: kind.Duration(time.Minute), Version: "1.0.0",
		Flags: kind.Flags{Destructive: true, SelfTerminating: true}}
	wipe = kind.Manifest{Kind: "disk.wipe", Lane: kind.LaneBulk, Roles: []string{"discovery"}, Timeout: kind.Duration(time.Minute), Version: "1.0.0",
		Flags: kind.Flags{Destructive: true}}
)

// good is an input that passes every check.
func good() Input {
	return Input{
		Command: Command{ID: "cmd_1", NodeID: "node_a", Kind: "example.echo", NotAfter: now.Add(time.Minute),
			Envelope: &agentv1.CommandEnvelope{Signature: []byte("sig")}},
		NodeID:            "node_a",
		Role:              "node",
		Kinds:             map[string]kind.Manifest{echo.Kind: echo, reboot.Kind: reboot, wipe.Kind: wipe},
		AppliedGeneration: 5,
		Now:               now,
		Trust:             trust{roots: true},
		Batches:           batches{keys: true, allowance: false},
		Lanes:             lanes{kind.LaneControl: true, kind.LaneProvision: true, kind.LaneBulk: true},
	}
}

func TestCheck_AcceptsAGoodCommand(t *testing.T) {
	d := Check(good())
	require.True(t, d.Accepted, d.Reason)
	require.Empty(t, d.Code)
	require.Equal(t, "example.echo", d.Manifest.Kind)
	require.False(t, d.Journal())
}

func TestCheck_1_Unsupported(t *testing.T) {
	// "UNSUPPORTED: the body names another node, or the kind is unknown or
	// not allowed for its role"
	cases := []struct {
		name string
		mod  func(*Input)
	}{
		{"another node", func(in *Input) { in.Command.NodeID = "node_b" }},
		{"unknown kind", func(in *Input) { in.Command.Kind = "nope.nope" }},
		{"kind not allowed for the role", func(in *Input) { in.Command.Kind = "disk.wipe" }},
		{"restricted identity", func(in *Input) { in.AllowedKinds = []string{"inventory.refresh"} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := good()
			c.mod(&in)
			d := Check(in)
			require.False(t, d.Accepted)
			require.Equal(t, Unsupported, d.Code)
			require.NotEmpty(t, d.Reason)
			require.True(t, d.Journal(), "UNSUPPORTED is journaled")
		})
	}
	in := good()
	in.AllowedKinds = []string{"example.echo"}
	require.True(t, Check(in).Accepted, "a restricted identity accepts its allowed kinds")
}

func TestCheck_2_StaleGeneration(t *testing.T) {
	// "STALE_GENERATION: min_generation is ahead of the spec it applied; it
	// asks for the spec, waits until not_after, then rejects"
	in := good()
	in.Command.MinGeneration = 6
	d := Check(in)
	require.Equal(t, StaleGeneration, d.Code)
	require.True(t, d.WaitForSpec, "before not_after the daemon waits for the spec")
	require.False(t, d.Journal(), "a wait is not a refusal yet")

	in.Now = in.Command.NotAfter
	d = Check(in)
	require.Equal(t, StaleGeneration, d.Code)
	require.False(t, d.WaitForSpec, "at not_after it rejects")
	require.True(t, d.Journal())

	in = good()
	in.Command.MinGeneration = 5
	require.True(t, Check(in).Accepted, "min_generation equal to the applied one passes")
}

func TestCheck_3_Expired(t *testing.T) {
	// "EXPIRED: past not_after, in server time (the daemon keeps the offset
	// from Welcome.server_time)"
	in := good()
	in.Now = in.Command.NotAfter.Add(time.Second)
	d := Check(in)
	require.Equal(t, Expired, d.Code)
	require.True(t, d.Journal())

	// The node's clock is behind: in server time the command has expired.
	in = good()
	in.ServerOffset = 2 * time.Minute
	require.Equal(t, Expired, Check(in).Code)

	// The node's clock is ahead: in server time it has not.
	in = good()
	in.Now = in.Command.NotAfter.Add(time.Second)
	in.ServerOffset = -time.Minute
	require.True(t, Check(in).Accepted)
}

func TestCheck_4_BadSignature(t *testing.T) {
	// "once the node's trust bundle holds command-signing roots, a command of
	// any kind without a valid signature"
	in := good()
	in.Command.Envelope = nil
	require.Equal(t, BadSignature, Check(in).Code, "unsigned, and not destructive: still refused")

	in = good()
	in.Trust = trust{roots: true, err: errors.New("chain does not verify")}
	d := Check(in)
	require.Equal(t, BadSignature, d.Code)
	require.Contains(t, d.Reason, "chain does not verify")
	require.True(t, d.Journal())

	// No roots: commands go unsigned, as in v0.1.
	for _, tr := range []Trust{nil, trust{roots: false, err: errors.New("unused")}} {
		in = good()
		in.Trust = tr
		in.Command.Envelope = nil
		require.True(t, Check(in).Accepted)
	}
}

func TestCheck_5_Batches(t *testing.T) {
	// "BATCH_UNAPPROVED or UNBATCHED_LIMIT: with approver keys, a destructive
	// command outside an approved batch"
	in := good()
	in.Command.Kind = "node.reboot"
	d := Check(in)
	require.Equal(t, UnbatchedLimit, d.Code, "no batch and no break-glass allowance")
	require.True(t, d.Journal())

	in.Batches = batches{keys: true, allowance: true}
	d = Check(in)
	require.True(t, d.Accepted, "the break-glass allowance admits it")
	require.True(t, d.UsesUnbatchedAllowance)

	in = good()
	in.Command.Kind = "node.reboot"
	in.Command.BatchID = "batch_1"
	in.Batches = batches{keys: true, err: errors.New("2 of 3 approvals")}
	d = Check(in)
	require.Equal(t, BatchUnapproved, d.Code)
	require.Contains(t, d.Reason, "batch_1")

	in.Batches = batches{keys: true}
	d = Check(in)
	require.True(t, d.Accepted, "an approved batch passes")
	require.True(t, d.UsesBatchLeaf, "the caller consumes the leaf")
	require.False(t, d.UsesUnbatchedAllowance)

	// Without approver keys a batch is for audit only.
	in = good()
	in.Command.Kind = "node.reboot"
	in.Batches = batches{keys: false}
	d = Check(in)
	require.True(t, d.Accepted)
	require.False(t, d.UsesBatchLeaf || d.UsesUnbatchedAllowance, "nothing to consume without approver keys")
	in.Batches = nil
	require.True(t, Check(in).Accepted)

	// Not destructive: no batch needed even with keys.
	in = good()
	require.True(t, Check(in).Accepted)
}

func TestCheck_6_Busy(t *testing.T) {
	// "BUSY: no credits" — and BUSY is not journaled.
	in := good()
	in.Lanes = lanes{kind.LaneControl: false, kind.LaneBulk: true}
	d := Check(in)
	require.Equal(t, Busy, d.Code)
	require.False(t, d.Journal(), "BUSY is not journaled")
	in.Lanes = nil
	require.True(t, Check(in).Accepted)
}

// failing makes input fail check n (1..6).
var failing = map[int]func(*Input){
	1: func(in *Input) { in.Command.NodeID = "node_other" },
	2: func(in *Input) { in.Command.MinGeneration = in.AppliedGeneration + 1 },
	3: func(in *Input) { in.Now = in.Command.NotAfter.Add(time.Hour) },
	4: func(in *Input) { in.Command.Envelope = nil },
	5: func(in *Input) { in.Command.Kind = "node.reboot" },
	6: func(in *Input) { in.Lanes = lanes{} },
}

var codeOf = map[int]Code{1: Unsupported, 2: StaleGeneration, 3: Expired, 4: BadSignature, 5: UnbatchedLimit, 6: Busy}

func TestCheck_SpecOrder(t *testing.T) {
	// "Before accepting a command, the daemon checks, in this order". For
	// every pair of checks i < j, a command failing both gets check i's code.
	for i := 1; i <= 6; i++ {
		for j := i + 1; j <= 6; j++ {
			in := good()
			failing[j](&in)
			failing[i](&in)
			d := Check(in)
			require.Equal(t, codeOf[i], d.Code, "failing checks %d and %d", i, j)
		}
	}
	// The example: failing checks 2 and 3 gets STALE_GENERATION, and
	// it is past not_after, so it is a final, journaled refusal.
	in := good()
	failing[2](&in)
	failing[3](&in)
	d := Check(in)
	require.Equal(t, StaleGeneration, d.Code)
	require.False(t, d.WaitForSpec)
	require.True(t, d.Journal())
	// Failing everything gets the first.
	in = good()
	for i := 6; i >= 1; i-- {
		failing[i](&in)
	}
	require.Equal(t, Unsupported, Check(in).Code)
}

func TestCode_Proto(t *testing.T) {
	for _, c := range []Code{Unsupported, StaleGeneration, Expired, BadSignature, BatchUnapproved, UnbatchedLimit, Busy} {
		p := c.Proto()
		require.NotEqual(t, agentv1.RejectCode_REJECT_CODE_UNSPECIFIED, p)
		require.Equal(t, c, CodeFromProto(p))
		require.Equal(t, "REJECT_CODE_"+string(c), p.String())
	}
	require.Equal(t, Code(""), CodeFromProto(agentv1.RejectCode_REJECT_CODE_UNSPECIFIED))
}
