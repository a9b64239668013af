package events_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func write(t *testing.T, ctx context.Context, tx pgx.Tx, tenant, topic string, n int) {
	t.Helper()
	require.NoError(t, events.Write(ctx, tx, tenant, topic, map[string]any{"n": n}))
}

// Events are read in order from a cursor, filtered by tenant; a rolled-back
// transaction leaves none.
func TestWriteReadCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.DB(t)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		write(t, ctx, tx, "tenant_a", "x", 1)
		write(t, ctx, tx, "tenant_b", "x", 2)
		return nil
	}))
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	write(t, ctx, tx, "tenant_a", "x", 99)
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		write(t, ctx, tx, "tenant_a", "y", 3)
		return nil
	}))

	all, err := events.Read(ctx, pool, "", "", 0)
	require.NoError(t, err)
	require.Len(t, all, 3)
	var ns []int
	for _, e := range all {
		var p struct{ N int }
		require.NoError(t, json.Unmarshal(e.Payload, &p))
		ns = append(ns, p.N)
	}
	require.Equal(t, []int{1, 2, 3}, ns, "the rolled-back event must not appear")

	rest, err := events.Read(ctx, pool, "", all[0].Cursor, 0)
	require.NoError(t, err)
	require.Len(t, rest, 2)
	require.Equal(t, all[1].ID, rest[0].ID)

	a, err := events.Read(ctx, pool, "tenant_a", "", 0)
	require.NoError(t, err)
	require.Len(t, a, 2)
	require.Equal(t, "y", a[1].Topic)

	limited, err := events.Read(ctx, pool, "", "", 2)
	require.NoError(t, err)
	require.Len(t, limited, 2)

	head, err := events.Head(ctx, pool)
	require.NoError(t, err)
	none, err := events.Read(ctx, pool, "", head, 0)
	require.NoError(t, err)
	require.Empty(t, none)

	_, err = events.Read(ctx, pool, "", "garbage", 0)
	require.ErrorIs(t, err, events.ErrBadCursor)
}

// A transaction that took the lower event id but commits later must not
// fall behind a reader's cursor: the reader sees nothing until it commits,
// then both events in order.
func TestLateCommitIsNotLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.DB(t)

	early, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = early.Rollback(ctx) }()
	write(t, ctx, early, "", "early", 1) // takes id 1, stays open

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		write(t, ctx, tx, "", "late", 2) // takes id 2, commits first
		return nil
	}))

	got, err := events.Read(ctx, pool, "", "", 0)
	require.NoError(t, err)
	require.Empty(t, got, "nothing is readable while an older writer is open")

	require.NoError(t, early.Commit(ctx))
	got, err = events.Read(ctx, pool, "", "", 0)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []string{"early", "late"}, []string{got[0].Topic, got[1].Topic})
}

// The other interleaving: the later-committing writer got its transaction id
// first but its event id last. The reader may hand out the first commit's
// event, and still gets the other afterwards.
func TestCommitOrderAcrossXidOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.DB(t)

	b, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = b.Rollback(ctx) }()
	_, err = b.Exec(ctx, `SELECT pg_current_xact_id()`) // b's xid is the older one
	require.NoError(t, err)

	a, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = a.Rollback(ctx) }()
	write(t, ctx, a, "", "a", 1) // a's event gets id 1
	write(t, ctx, b, "", "b", 2) // b's event gets id 2
	require.NoError(t, a.Commit(ctx))

	got, err := events.Read(ctx, pool, "", "", 0)
	require.NoError(t, err)
	require.Empty(t, got, "b is older and still open")
	require.NoError(t, b.Commit(ctx))

	got, err = events.Read(ctx, pool, "", "", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	cursor := got[0].Cursor
	rest, err := events.Read(ctx, pool, "", cursor, 0)
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.ElementsMatch(t, []string{"a", "b"}, []string{got[0].Topic, rest[0].Topic})
}

// Follow delivers each committed event once, in order, woken by NOTIFY
// (with a poll far longer than the test's deadline, so the wake-up is the
// notification), and resumes from a cursor without loss.
func TestFollowWakesOnNotify(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := storetest.DB(t)

	got := make(chan events.Event, 16)
	done := make(chan error, 1)
	go func() {
		done <- events.Follow(ctx, pool, "", "", time.Hour, hclog.NewNullLogger(), func(e events.Event) error {
			select {
			case got <- e:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	recv := func() events.Event {
		select {
		case e := <-got:
			return e
		case <-time.After(20 * time.Second):
			t.Fatal("no event within 20s")
			return events.Event{}
		}
	}
	for i := range 3 {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			write(t, ctx, tx, "", "n", i)
			return nil
		}))
		e := recv()
		require.JSONEq(t, `{"n":`+string(rune('0'+i))+`}`, string(e.Payload))
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	// Resume from the second event's cursor in a new follower.
	all, err := events.Read(context.Background(), pool, "", "", 0)
	require.NoError(t, err)
	require.Len(t, all, 3)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	resumed := make(chan events.Event, 4)
	go func() {
		_ = events.Follow(ctx2, pool, "", all[1].Cursor, time.Hour, nil, func(e events.Event) error {
			resumed <- e
			return nil
		})
	}()
	select {
	case e := <-resumed:
		require.Equal(t, all[2].ID, e.ID)
	case <-time.After(20 * time.Second):
		t.Fatal("resumed follower got nothing")
	}
}

// The poll fallback: an event that becomes readable only when an older
// transaction without events ends sends no NOTIFY; the poll still delivers it.
func TestFollowPollFallback(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := storetest.DB(t)

	blocker, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = blocker.Exec(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)

	got := make(chan events.Event, 1)
	go func() {
		_ = events.Follow(ctx, pool, "", "", 50*time.Millisecond, nil, func(e events.Event) error {
			got <- e
			return nil
		})
	}()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		write(t, ctx, tx, "", "held", 1)
		return nil
	}))
	require.NoError(t, blocker.Rollback(ctx)) // no NOTIFY from this
	select {
	case e := <-got:
		require.Equal(t, "held", e.Topic)
	case <-time.After(20 * time.Second):
		t.Fatal("the poll did not deliver the held event")
	}
}

func TestParseCursor(t *testing.T) {
	tx, id, err := events.ParseCursor("")
	require.NoError(t, err)
	require.Zero(t, tx)
	require.Zero(t, id)
	tx, id, err = events.ParseCursor("123.45")
	require.NoError(t, err)
	require.Equal(t, uint64(123), tx)
	require.Equal(t, int64(45), id)
	for _, bad := range []string{"x", "1", "1.", ".1", "1.-1", "a.b", "1.2.3"} {
		_, _, err := events.ParseCursor(bad)
		require.ErrorIs(t, err, events.ErrBadCursor, bad)
	}
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"", "0.0", "123.45", "18446744073709551615.9223372036854775807", "1.-1", "x.y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tx, id, err := events.ParseCursor(s)
		if err != nil {
			return
		}
		if s == "" {
			return
		}
		require.GreaterOrEqual(t, id, int64(0))
		tx2, id2, err := events.ParseCursor(fmtCursor(tx, id))
		require.NoError(t, err)
		require.Equal(t, tx, tx2)
		require.Equal(t, id, id2)
	})
}
