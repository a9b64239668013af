package groupcommit

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// insertSet inserts its items (id, n) in one statement and answers each
// with the n it stored; calls counts how many times it ran and with how many.
func insertSet(calls chan<- int) SetFunc[[2]any, int] {
	return func(ctx context.Context, tx pgx.Tx, items [][2]any) ([]int, error) {
		calls <- len(items)
		ids, ns := make([]string, len(items)), make([]int, len(items))
		for i, it := range items {
			ids[i], ns[i] = it[0].(string), it[1].(int)
		}
		rows, err := tx.Query(ctx, `INSERT INTO gc_rows (id, n) SELECT * FROM unnest($1::text[], $2::int[]) RETURNING id, n`, ids, ns)
		if err != nil {
			return nil, err
		}
		got := map[string]int{}
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return nil, err
			}
			got[id] = n
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out := make([]int, len(items))
		for i, id := range ids {
			out[i] = got[id]
		}
		return out, nil
	}
}

// "One statement for the whole group": a group's Set items go to the Set's
// function in one call, each caller gets its own item's outcome, and none
// is answered before the commit (its row is visible from elsewhere when Do
// returns). Plain Do callers in the same group commit with them.
func TestSetItemsOfAGroupRunInOneCallAndEachGetsItsOwnOutcome(t *testing.T) {
	pool := setup(t)
	b := newBlocked(t, pool)
	calls := make(chan int, 64)
	set := NewSet(b.c, insertSet(calls))
	const n = 12
	outs := make([]int, n)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("s%d", i)
			outs[i], errs[i] = set.Do(context.Background(), [2]any{id, i * 10})
			if errs[i] == nil && !stored(t, pool, id) {
				t.Errorf("item %d answered before its row was committed", i)
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); errs[n] = b.c.Do(context.Background(), insert("plain", 1, nil)) }()
	b.waitQueued(t, n+1)
	b.unblock()
	require.NoError(t, <-b.first)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "item %d", i)
		require.Equal(t, i*10, outs[i], "item %d gets its own outcome", i)
	}
	require.NoError(t, errs[n])
	require.True(t, stored(t, pool, "plain"))
	require.Equal(t, n, <-calls, "every item of the group in one call")
	require.Empty(t, calls)
	require.Equal(t, 1, <-b.sizes)
	require.Equal(t, n+1, <-b.sizes, "Set items and a plain caller in one transaction")
}

// A call that fails is run again with each caller alone: the item that
// violates the CHECK gets its own error and nothing of it is stored; the
// others are stored and answered.
func TestASetCallThatFailsRunsEachItemAlone(t *testing.T) {
	pool := setup(t)
	b := newBlocked(t, pool)
	calls := make(chan int, 64)
	set := NewSet(b.c, insertSet(calls))
	const n = 5
	outs, errs := runItems(t, b, set, n, 2)
	requireOnlyBadFailed(t, pool, outs, errs, 2)
	require.Equal(t, n, <-calls, "first together")
	for range n {
		require.Equal(t, 1, <-calls, "then each alone")
	}
}

// runItems queues n items ("f0".., item i storing i+1; item bad stores -1,
// which violates the CHECK) behind the blocked worker, lets the group run
// and returns each caller's outcome.
func runItems(t *testing.T, b *blocked, set *Set[[2]any, int], n, bad int) ([]int, []error) {
	t.Helper()
	outs, errs := make([]int, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := i + 1
			if i == bad {
				v = -1
			}
			outs[i], errs[i] = set.Do(context.Background(), [2]any{fmt.Sprintf("f%d", i), v})
		}()
	}
	b.waitQueued(t, n)
	b.unblock()
	require.NoError(t, <-b.first)
	wg.Wait()
	return outs, errs
}

// requireOnlyBadFailed checks runItems' outcome when item bad failed: it
// got its own check violation and nothing of it is stored; every other item
// got its outcome and is stored.
func requireOnlyBadFailed(t *testing.T, pool *pgxpool.Pool, outs []int, errs []error, bad int) {
	t.Helper()
	var pe *pgconn.PgError
	require.ErrorAs(t, errs[bad], &pe)
	require.Equal(t, "23514", pe.Code, "its own check violation")
	require.False(t, stored(t, pool, fmt.Sprintf("f%d", bad)))
	for i := range outs {
		if i == bad {
			continue
		}
		require.NoError(t, errs[i], "item %d", i)
		require.Equal(t, i+1, outs[i])
		require.True(t, stored(t, pool, fmt.Sprintf("f%d", i)))
	}
}
