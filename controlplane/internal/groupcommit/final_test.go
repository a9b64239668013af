package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/pgtx"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// commits counts the COMMITs sent as statements of their own.
type commits struct{ n atomic.Int64 }

func (c *commits) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if d.SQL == "commit" {
		c.n.Add(1)
	}
	return ctx
}
func (c *commits) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// finalSet inserts its items in one statement sent through pgtx.SendFinal,
// reporting on finals whether each call held the transaction's Final, and
// fails with after (once the statement went out) when after is set.
func finalSet(finals chan<- bool, after error) SetFunc[[2]any, int] {
	return func(ctx context.Context, tx pgx.Tx, items [][2]any) ([]int, error) {
		finals <- pgtx.HasFinal(ctx)
		ids, ns := make([]string, len(items)), make([]int, len(items))
		for i, it := range items {
			ids[i], ns[i] = it[0].(string), it[1].(int)
		}
		got := map[string]int{}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO gc_rows (id, n) SELECT * FROM unnest($1::text[], $2::int[]) RETURNING id, n`, ids, ns).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id string
				var n int
				if err := rows.Scan(&id, &n); err != nil {
					return err
				}
				got[id] = n
			}
			return rows.Err()
		})
		if err := pgtx.SendFinal(ctx, tx, b); err != nil {
			return nil, err
		}
		if after != nil {
			return nil, after
		}
		out := make([]int, len(items))
		for i, id := range ids {
			out[i] = got[id]
		}
		return out, nil
	}
}

func finalSetup(t *testing.T) (*pgxpool.Pool, *commits) {
	t.Helper()
	t.Parallel()
	c := &commits{}
	pool := storetest.DBConfig(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = c })
	_, err := pool.Exec(context.Background(), `CREATE TABLE gc_rows (id text PRIMARY KEY, n int NOT NULL CHECK (n >= 0), k text)`)
	require.NoError(t, err)
	return pool, c
}

// The group's last Set sends its statement with the transaction's COMMIT
// (pgtx.SendFinal): the group commits without a COMMIT of its own, and each
// caller is answered with its outcome once its row is stored.
func TestTheLastSetOfAGroupCommitsWithItsStatement(t *testing.T) {
	pool, c := finalSetup(t)
	c.n.Store(0) // the database's set-up
	b := newBlockedWith(t, pool, Options{Begin: pgtx.Begin})
	finals := make(chan bool, 16)
	set := NewSet(b.c, finalSet(finals, nil))
	const n = 6
	outs, errs := runItems(t, b, set, n, -1)
	for i := range n {
		require.NoError(t, errs[i], "item %d", i)
		require.Equal(t, i+1, outs[i])
		require.True(t, stored(t, pool, fmt.Sprintf("f%d", i)))
	}
	require.True(t, <-finals, "the group's call held the Final")
	require.Empty(t, finals, "one call")
	require.Equal(t, int64(1), c.n.Load(), "one COMMIT statement: the first group's, a plain Do's")
	require.Equal(t, 1, <-b.sizes)
	require.Equal(t, n, <-b.sizes)
}

// A final statement that the database refuses commits nothing, and the
// group runs again with each caller alone and without a Final: the caller
// whose item failed gets the database's error, the others are stored.
func TestAFinalStatementThatFailsRunsEachCallerAloneWithoutIt(t *testing.T) {
	pool, _ := finalSetup(t)
	b := newBlockedWith(t, pool, Options{Begin: pgtx.Begin})
	finals := make(chan bool, 16)
	set := NewSet(b.c, finalSet(finals, nil))
	const n = 4
	outs, errs := runItems(t, b, set, n, 2)
	requireOnlyBadFailed(t, pool, outs, errs, 2)
	require.True(t, <-finals, "together, with the Final")
	for range n {
		require.False(t, <-finals, "then each alone, without it")
	}
}

// Work that fails after its final statement went out may have committed:
// no caller is acknowledged and none is run again (here the commit landed).
func TestWorkThatFailsAfterItsCommitWentOutAcknowledgesNoCaller(t *testing.T) {
	pool, _ := finalSetup(t)
	b := newBlockedWith(t, pool, Options{Begin: pgtx.Begin})
	finals := make(chan bool, 16)
	after := errors.New("failed after the statement")
	set := NewSet(b.c, finalSet(finals, after))
	const n = 3
	_, errs := runItems(t, b, set, n, -1)
	for i := range n {
		require.ErrorIs(t, errs[i], after, "item %d", i)
		require.True(t, stored(t, pool, fmt.Sprintf("f%d", i)), "its commit landed")
	}
	require.True(t, <-finals)
	require.Empty(t, finals, "not run again")
}
