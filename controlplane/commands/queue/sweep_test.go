package queue_test

import (
	"testing"
	"time"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/stretchr/testify/require"
)

// "pending past not_after becomes expired (reason not_after); dispatched,
// acked or running past not_after plus the kind's timeout becomes failed
// (reason timeout) ... A kind that is no longer registered gets 15 minutes."
func TestSweep(t *testing.T) {
	b := setup(t)
	// Deadlines are moved into the past directly: the sweeper compares with
	// the database's clock.
	past := func(id string, ago time.Duration) {
		_, err := b.pool.Exec(b.ctx, `UPDATE commands SET not_after = now() - $2 * interval '1 microsecond' WHERE id = $1`, id, ago.Microseconds())
		require.NoError(t, err)
	}
	late, _ := b.enqueue(t, b.params("late"))
	past(late.ID, time.Second)
	onTime, _ := b.enqueue(t, b.params("on-time"))

	// test.refresh has a 1 minute timeout.
	within, _ := b.enqueue(t, b.params("within"))
	b.transition(t, queue.Transition{CommandID: within.ID, To: queue.Running})
	past(within.ID, 30*time.Second)
	overdue, _ := b.enqueue(t, b.params("overdue"))
	b.transition(t, queue.Transition{CommandID: overdue.ID, To: queue.Acked})
	past(overdue.ID, 2*time.Minute)

	// An unregistered kind gets 15 minutes.
	gone, _ := b.enqueue(t, b.params("gone"))
	b.transition(t, queue.Transition{CommandID: gone.ID, To: queue.Dispatched})
	_, err := b.pool.Exec(b.ctx, `UPDATE commands SET kind = 'test.retired' WHERE id = $1`, gone.ID)
	require.NoError(t, err)
	past(gone.ID, 10*time.Minute)
	goneLong, _ := b.enqueue(t, b.params("gone-long"))
	b.transition(t, queue.Transition{CommandID: goneLong.ID, To: queue.Dispatched})
	_, err = b.pool.Exec(b.ctx, `UPDATE commands SET kind = 'test.retired' WHERE id = $1`, goneLong.ID)
	require.NoError(t, err)
	past(goneLong.ID, 16*time.Minute)

	expired, failed, err := b.q.Sweep(b.ctx, b.pool, 0)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	require.Equal(t, late.ID, expired[0].ID)
	require.Equal(t, queue.Expired, expired[0].State)
	require.Equal(t, queue.ReasonNotAfter, expired[0].Reason)
	var failedIDs []string
	for _, c := range failed {
		require.Equal(t, queue.Failed, c.State)
		require.Equal(t, queue.ReasonTimeout, c.Reason)
		require.NotNil(t, c.SettledAt)
		failedIDs = append(failedIDs, c.ID)
	}
	require.ElementsMatch(t, []string{overdue.ID, goneLong.ID}, failedIDs)

	for id, st := range map[string]queue.State{onTime.ID: queue.Pending, within.ID: queue.Running, gone.ID: queue.Dispatched} {
		c, err := b.q.Get(b.ctx, b.pool, "", id)
		require.NoError(t, err)
		require.Equal(t, st, c.State)
	}
	require.Len(t, b.outbox(t, events.TopicCommandSettled), 3)

	// A second sweep finds nothing: each transition is published once.
	expired, failed, err = b.q.Sweep(b.ctx, b.pool, 0)
	require.NoError(t, err)
	require.Empty(t, expired)
	require.Empty(t, failed)
	require.Len(t, b.outbox(t, events.TopicCommandSettled), 3)
}
