package server_test

import (
	"context"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/pgtest"
)

// New builds the server in steps and, when a step fails, closes what the
// earlier ones opened, newest first: here the last step (the browser API's
// CORS origins) fails after the database pool, the gateway's listener and
// both API listeners were opened, and afterwards every port is free again
// and no connection of the server's is left on its database.
func TestAFailedNewLeavesNothingOpen(t *testing.T) {
	ctx := context.Background()
	name := pgtest.Create(t)
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		return addr
	}
	cfg := server.DefaultConfig()
	cfg.DatabaseURL = "dbname=" + name + " application_name=bc-server-under-test"
	cfg.GRPCListen, cfg.HTTPListen = free(), free()
	cfg.Auth = servertest.AuthConfig()
	cfg.Gateway = server.GatewayConfig{Listen: free(), CADir: t.TempDir(), ServerHosts: []string{"127.0.0.1"}}
	cfg.Browser.CORSOrigins = []string{"*"}

	_, err := server.New(ctx, cfg, nil, nil)
	require.ErrorContains(t, err, "browser.corsOrigins")

	for _, addr := range []string{cfg.GRPCListen, cfg.HTTPListen, cfg.Gateway.Listen} {
		l, err := net.Listen("tcp", addr)
		require.NoError(t, err, "%s is free again after the failed New", addr)
		require.NoError(t, l.Close())
	}
	pool, err := pgxpool.NewWithConfig(ctx, pgtest.Config(t, name))
	require.NoError(t, err)
	defer pool.Close()
	var n int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'bc-server-under-test'`, name).Scan(&n))
	require.Zero(t, n, "the failed New's pool is closed")
}
