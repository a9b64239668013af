package storetest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// Each call gets its own migrated database: a row written in one is absent
// from the other.
func TestDBIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := storetest.DB(t), storetest.DB(t)
	var nameA, nameB string
	require.NoError(t, a.QueryRow(ctx, `SELECT current_database()`).Scan(&nameA))
	require.NoError(t, b.QueryRow(ctx, `SELECT current_database()`).Scan(&nameB))
	require.NotEqual(t, nameA, nameB)
	_, err := a.Exec(ctx, `INSERT INTO tenants (id) VALUES ('tenant_x')`)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&n))
	require.Zero(t, n)
}
