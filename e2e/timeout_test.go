package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// "dispatched, acked or running past not_after plus the kind's timeout
// becomes failed (reason timeout)", end to end: a command of e2e.hangshort
// (timeout 3s) runs on the real bcd and hangs; bcd itself stops answering
// (SIGSTOP), as a wedged node would, so only the sweeper can settle it. It
// is failed with reason timeout once not_after (10s, the minimum) plus 3s
// has passed, publishes exactly one command.settled, and the node's late
// result, once bcd wakes and the hang is released, changes nothing.
func TestE2E_TimeoutBySweeperAndALateResultChangesNothing(t *testing.T) {
	c := newCluster(t)
	n := c.join()
	n.start()

	h := newHold(t)
	p, err := structpb.NewStruct(h.payload())
	require.NoError(t, err)
	ten := int32(10)
	queued := time.Now()
	cmd, err := c.api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1,
		Kind: kindHangShort, Payload: p, NotAfterSeconds: &ten})
	require.NoError(t, err)
	h.waitStarted(t)
	c.waitState(cmd.GetId(), "running")

	// The node wedges: bcd can neither report nor time the run out itself
	// (its own deadline, start plus the timeout plus a grace, would
	// otherwise come first).
	require.NoError(t, n.proc.Process.Signal(syscall.SIGSTOP))
	stopped := true
	t.Cleanup(func() {
		if stopped && n.proc != nil {
			_ = n.proc.Process.Signal(syscall.SIGCONT)
		}
	})

	got := c.waitState(cmd.GetId(), "failed")
	require.Equal(t, "timeout", got.GetReason())
	notAfter := got.GetNotAfter().AsTime()
	require.WithinDuration(t, queued.Add(10*time.Second), notAfter, 5*time.Second, "not_after is 10s after queueing")
	// The row's own clock: failed no earlier than not_after plus the kind's
	// timeout.
	var late bool
	require.NoError(t, c.srv.Pool.QueryRow(context.Background(),
		`SELECT settled_at >= not_after + interval '3 seconds' FROM commands WHERE id = $1`, cmd.GetId()).Scan(&late))
	require.True(t, late, "failed no earlier than not_after plus the 3s timeout")
	require.Equal(t, 1, c.settledCount(cmd.GetId()), "exactly one terminal state")
	swept := c.get(cmd.GetId())

	// Release the hang, wake bcd: the plugin's late outcome reaches bcd,
	// which finishes the command and reports it to the gateway.
	h.releaseNow(t)
	require.NoError(t, n.proc.Process.Signal(syscall.SIGCONT))
	stopped = false
	testutil.WaitFor(t, 30*time.Second, "bcd to finish the command itself", func() bool {
		for _, line := range strings.Split(n.logs.String(), "\n") {
			if strings.Contains(line, "command finished") && strings.Contains(line, cmd.GetId()) {
				return true
			}
		}
		return false
	})
	// bcd published that outcome before it logged it, so its report goes
	// out on the session before anything about the next command: once the
	// next command has succeeded, the gateway has handled the late report.
	next := newHold(t)
	next.releaseNow(t)
	after := c.run(kindHold, next.payload())
	c.waitState(after.GetId(), "succeeded")

	final := c.get(cmd.GetId())
	require.Equal(t, "failed", final.GetState(), "a late result from the node changes nothing")
	require.Equal(t, "timeout", final.GetReason())
	require.True(t, proto.Equal(swept.GetResult(), final.GetResult()), "the result is not overwritten: %v", final.GetResult())
	require.Equal(t, 1, c.settledCount(cmd.GetId()), "still exactly one terminal state")
	require.Equal(t, 1, h.runs(t), "it ran once")

	// The node did report an outcome of its own: bcd's journal holds it.
	n.stop()
	out, errs, code := n.bcd("journal", "--json")
	require.Equal(t, 0, code, errs)
	var j struct {
		Records []struct {
			ID     string          `json:"id"`
			State  string          `json:"state"`
			Result json.RawMessage `json:"result"`
		} `json:"records"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	var found bool
	for _, r := range j.Records {
		if r.ID == cmd.GetId() {
			found = true
			require.Contains(t, []string{"succeeded", "failed"}, r.State, "bcd finished it: %s", r.Result)
			t.Logf("bcd's own late outcome: %s %s; the control plane kept %s %v", r.State, r.Result, final.GetState(), final.GetResult())
		}
	}
	require.True(t, found, "bcd's journal holds %s: %s", cmd.GetId(), out)
}
