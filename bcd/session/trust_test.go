package session_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/bcd/session"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// logBuffer collects a logger's lines for a test to read while it writes.
type logBuffer struct {
	lock sync.Mutex
	buf  bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.buf.String()
}

func withLog(b *logBuffer) func(*session.Config) {
	return func(c *session.Config) { c.Logger = hclog.New(&hclog.LoggerOptions{Output: b, Level: hclog.Debug}) }
}

// condition waits for a NodeStatus on s whose condition of type typ pred takes.
func condition(t *testing.T, s *gatewaySession, typ string, pred func(*agentv1.NodeCondition) bool) *agentv1.NodeCondition {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-s.recv:
			for _, c := range m.GetStatus().GetConditions() {
				if c.GetType() == typ && pred(c) {
					return c
				}
			}
		case <-deadline:
			t.Fatalf("no %s condition", typ)
			return nil
		}
	}
}

// A pushed generation below the applied one is dropped ("specs only move
// forward"), and bcd must say so: it logged "node spec applied:
// generation=3" while dropping generation 2.
func TestSession_AStaleSpecIsReportedAsNotApplied(t *testing.T) {
	var logs logBuffer
	r := newRig(t, 0, withLog(&logs))
	s := r.session()
	push := func(gen int64) {
		s.send <- &agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Spec{Spec: &agentv1.Spec{Generation: gen, Spec: []byte(`{}`)}}}
	}
	push(3)
	push(2)
	push(4)
	// The daemon logs an applied spec just after it stores it: wait for the
	// line, not only for the state, before reading the log.
	testutil.WaitFor(t, 30*time.Second, "generation 4 to be applied and logged", func() bool {
		return r.state.Generation() == 4 && strings.Contains(logs.String(), "node spec applied: generation=4 ")
	})
	out := logs.String()
	require.Equal(t, 2, strings.Count(out, "node spec applied"), "generations 3 and 4, never 2:\n%s", out)
	require.Contains(t, out, "node spec not applied: generation=2 applied_generation=3 reason=stale")
	require.Regexp(t, `node spec applied: generation=3 `, out)
	require.Regexp(t, `node spec applied: generation=4 `, out)

	push(1)
	cd := condition(t, s, conditions.TypeNodeSpec, func(c *agentv1.NodeCondition) bool {
		return strings.Contains(c.GetMessage(), "generation 1 is older than the applied generation 4")
	})
	require.False(t, cd.GetStatus())
	require.Equal(t, conditions.ReasonStale, cd.GetReason())
	require.Equal(t, int64(4), r.state.Generation())
}

// Without command-signing roots "the daemon keeps the offset from
// Welcome.server_time", however large, but a large one is still reported.
func TestSession_UnsignedModeKeepsALargeOffsetAndReportsIt(t *testing.T) {
	r := newRig(t, -48*time.Hour)
	s := r.session()
	cd := condition(t, s, conditions.TypeClockSkew, func(c *agentv1.NodeCondition) bool { return c.GetStatus() })
	require.Equal(t, conditions.ReasonApplied, cd.GetReason())
	require.Regexp(t, `48h0m\d+s behind this node's clock`, cd.GetMessage())
	require.Contains(t, cd.GetMessage(), "no command-signing roots")
	applied, refused := r.d.Clock().Offset()
	require.InDelta(t, float64(-48*time.Hour), float64(applied), float64(time.Minute))
	require.Zero(t, refused)
}

// "one trust.AllocationBound per allocation ... GPUs (sorted, unique
// physical GPU UUIDs)": a MIG instance's or a slot's hold binds its
// physical GPU; released holds and holds without an allocation bind
// nothing.
func TestAllocationBounds_OnePerAllocationWithItsPhysicalGPUs(t *testing.T) {
	doc := []byte(`{"holds":[
		{"gpu":"GPU-b","mig":"MIG-b1","allocation":"alloc_2","state":"live"},
		{"gpu":"GPU-a","allocation":"alloc_2","state":"live"},
		{"gpu":"GPU-b","slot":"s0","allocation":"alloc_2","state":"live"},
		{"gpu":"GPU-c","slot":"s1","allocation":"alloc_1","state":"live"},
		{"gpu":"GPU-d","allocation":"alloc_3","state":"released"},
		{"gpu":"GPU-e","state":"live"}]}`)
	got, err := session.AllocationBounds("node_x", 7, doc)
	require.NoError(t, err)
	require.Equal(t, []trust.AllocationBound{
		{Allocation: "alloc_1", NodeID: "node_x", GPUs: []string{"GPU-c"}, Generation: 7},
		{Allocation: "alloc_2", NodeID: "node_x", GPUs: []string{"GPU-a", "GPU-b"}, Generation: 7},
	}, got)
	none, err := session.AllocationBounds("node_x", 1, []byte(`{}`))
	require.NoError(t, err)
	require.Empty(t, none)
}
