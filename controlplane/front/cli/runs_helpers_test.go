package cli_test

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
)

// addNodes creates n nodes of tenant a, node_f01 onwards, and returns
// their ids in order.
func addNodes(t *testing.T, r *servertest.Running, n int) []string {
	t.Helper()
	var out []string
	for i := 1; i <= n; i++ {
		nd, err := r.Queue.CreateNode(context.Background(), r.Pool, queue.Node{ID: fmt.Sprintf("node_f%02d", i), TenantID: servertest.TenantA})
		require.NoError(t, err)
		out = append(out, nd.ID)
	}
	return out
}

// background runs the CLI in its own goroutine; tty says whether it sees
// its streams as terminals.
func background(env map[string]string, tty bool, args ...string) (*safeBuffer, *safeBuffer, <-chan result) {
	var out, errb safeBuffer
	done := make(chan result, 1)
	go func() {
		code := cli.Main(context.Background(), cli.Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] },
			IsTerminal: func(io.Writer) bool { return tty }})
		done <- result{code: code, stdout: out.String(), stderr: errb.String()}
	}()
	return &out, &errb, done
}

var runIDPattern = regexp.MustCompile(`run_[0-9A-Za-z]+`)

// runIDFrom waits for a run id to appear in what the CLI writes.
func runIDFrom(t *testing.T, b *safeBuffer) string {
	t.Helper()
	var id string
	testutil.WaitFor(t, 20*time.Second, "the CLI to name its run", func() bool {
		id = runIDPattern.FindString(b.String())
		return id != ""
	})
	return id
}

// openCommands are the run's commands that have not settled.
func openCommands(t *testing.T, r *servertest.Running, runID string) []queue.Command {
	t.Helper()
	items, _, err := r.Queue.ListTenant(context.Background(), r.Pool, queue.TenantListParams{TenantID: servertest.TenantA, RunID: runID, Limit: 200})
	require.NoError(t, err)
	var out []queue.Command
	for _, c := range items {
		if !c.State.Terminal() {
			out = append(out, c)
		}
	}
	return out
}

func runFinished(t *testing.T, r *servertest.Running, runID string) bool {
	t.Helper()
	var done bool
	require.NoError(t, r.Pool.QueryRow(context.Background(), `SELECT finished_at IS NOT NULL FROM fleet_runs WHERE id = $1`, runID).Scan(&done))
	return done
}

// driveRun plays the nodes of a run: each time the run has commands open
// it settles all of them at once (failed with check-failed for the nodes
// in fail, else succeeded), as the gateway would, through the server's
// queue and its settle hooks, until the run finishes. It returns the most
// commands it ever saw open at once.
func driveRun(t *testing.T, r *servertest.Running, runID string, fail map[string]bool) int {
	t.Helper()
	ctx := context.Background()
	most := 0
	for {
		var open []queue.Command
		testutil.WaitFor(t, 30*time.Second, "run "+runID+" to start a command or finish", func() bool {
			open = openCommands(t, r, runID)
			return len(open) > 0 || runFinished(t, r, runID)
		})
		if len(open) == 0 {
			return most
		}
		most = max(most, len(open))
		ts := make([]queue.Transition, len(open))
		for i, c := range open {
			ts[i] = queue.Transition{CommandID: c.ID, NodeID: c.NodeID, To: queue.Succeeded}
			if fail[c.NodeID] {
				ts[i].To, ts[i].Reason, ts[i].Message = queue.Failed, "check-failed", "ecc: 3 uncorrectable errors on GPU-1"
			}
		}
		require.NoError(t, pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
			_, err := r.Server.Queue().TransitionSet(ctx, tx, ts)
			return err
		}))
	}
}

// settle moves one command as the gateway would, through the server's
// queue, whose settle hooks move a fleet run's target.
func settle(t *testing.T, r *servertest.Running, c queue.Command, to queue.State, reason string) {
	t.Helper()
	_, ok, err := r.Server.Queue().Transition(context.Background(), r.Pool, queue.Transition{CommandID: c.ID, NodeID: c.NodeID, To: to, Reason: reason})
	require.NoError(t, err)
	require.True(t, ok, "transition of %s to %s landed", c.ID, to)
}
