package main_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/trust/auth"
)

// The shipped example stays a valid configuration.
func TestExampleConfigLoads(t *testing.T) {
	cfg, err := server.LoadConfig("server.example.yaml")
	require.NoError(t, err)
	require.NoError(t, cfg.Auth.Validate())
	_, err = auth.New(&cfg.Auth)
	require.NoError(t, err)
	require.NotNil(t, cfg.SupportBundles)
	require.Equal(t, ":7443", cfg.GRPCListen)
}
