package api_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/groupcommit"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// "commands.run shares commits among concurrent callers, each caller
// answered after its group's commit": eight callers wait behind the one
// busy worker and go out as one transaction. Each that succeeds is
// answered only once its command is committed (read from another
// connection as the answer arrives); the caller whose idempotency key
// names another kind's command gets its own CONFLICT and the one whose
// batch does not exist its own INVALID_INPUT, while the others commit
// without them; a bad payload is refused before it joins any group.
func TestRun_ConcurrentCallersShareACommitAndKeepTheirOwnErrors(t *testing.T) {
	t.Parallel()
	var sizesLock sync.Mutex
	var sizes []int
	b := setup(t, func(c *api.Config) {
		c.RunGroup = groupcommit.Options{Workers: 1, Observe: func(n int) {
			sizesLock.Lock()
			defer sizesLock.Unlock()
			sizes = append(sizes, n)
		}}
	})
	taken, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml", IdempotencyKey: "taken"})
	require.NoError(t, err)

	release := b.api.HoldRunGroup(t)
	// Refused before joining: it is answered while the worker is still held.
	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "inventory.refresh",
		Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"bogus": structpb.NewBoolValue(true)}}})
	requireCode(t, err, errcode.InvalidInput)

	const good = 6
	type answer struct {
		cmd *apiv1.Command
		err error
		// committed says the command was in the database, read from
		// another connection, the moment the answer arrived.
		committed bool
	}
	answers := make([]answer, good+2)
	var wg sync.WaitGroup
	for i := range answers {
		req := &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: []string{nodeA1, nodeA2}[i%2], Kind: "diag.nvml", IdempotencyKey: fmt.Sprintf("g-%d", i)}
		switch i {
		case good:
			req.Kind, req.IdempotencyKey = "node.reboot", "taken" // names diag.nvml's command
		case good + 1:
			req.BatchId = "batch_01M8ZZZZZZZZZZZZZZZZZZZZZZ" // no such batch
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd, err := b.run(t, tokOps, req)
			a := answer{cmd: cmd, err: err}
			if err == nil {
				_, gerr := b.queue.Get(context.Background(), b.pool, req.NodeId, cmd.GetId())
				a.committed = gerr == nil
			}
			answers[i] = a
		}()
	}
	testutil.WaitFor(t, 10*time.Second, "every caller queued for the group", func() bool { return b.api.RunGroupWaiting() == len(answers) })
	var before int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM commands`).Scan(&before))
	require.Equal(t, 1, before, "nothing of the waiting callers is stored before their group runs")
	release()
	wg.Wait()

	for i := range good {
		require.NoError(t, answers[i].err, "caller %d", i)
		require.True(t, answers[i].committed, "caller %d was answered before its command was committed", i)
	}
	in := requireCode(t, answers[good].err, errcode.Conflict)
	require.Equal(t, taken.GetId(), in.Details["commandId"], "its own conflict names the command its key holds")
	in = requireCode(t, answers[good+1].err, errcode.InvalidInput)
	require.Equal(t, "batch-not-found", in.Details["reason"])
	var after int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM commands`).Scan(&after))
	require.Equal(t, 1+good, after, "the six good callers' commands and nothing of the two that failed")
	sizesLock.Lock()
	defer sizesLock.Unlock()
	// The six good callers and the CONFLICT one went out in one
	// EnqueueSet (its own error wrote nothing and cost the others no
	// rollback); the one whose batch check failed ran on its own and was
	// taken out of the group.
	require.Equal(t, good+1, sizes[len(sizes)-1], "the good callers committed together")
}
