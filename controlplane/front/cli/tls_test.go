package cli_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/internal/testutil"
)

// TLS end to end: the server's certificate verified by --ca-cert, a client
// certificate (mTLS) as the identity, and a bearer token over TLS.
func TestTLSAndClientCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := testutil.WritePKI(t, dir, "robot.example.com")
	ca, srvCert, srvKey, cliCert, cliKey := p.CA, p.ServerCert, p.ServerKey, p.ClientCert, p.ClientKey
	r := servertest.Start(t, func(c *server.Config) {
		c.TLS = server.TLSConfig{Cert: srvCert, Key: srvKey, ClientCA: ca}
		c.Auth.Identities = append(c.Auth.Identities, auth.IdentityConfig{
			Name: "robot", Tenants: []string{servertest.TenantA}, CertCommonNames: []string{"robot.example.com"},
			Grants: []auth.Grant{{Permission: auth.PermNodesRead, Resource: "compute-node/*"}}})
	})
	ctx := context.Background()
	list := []string{"commands", "list", "tenantId=tenant_a", "nodeId=node_a1", "--endpoint", "https://" + r.GRPC, "--ca-cert", ca}

	res := cliRun(ctx, map[string]string{}, append(list, "--cert", cliCert, "--key", cliKey)...)
	require.Equal(t, cli.ExitOK, res.code, "client certificate: %s", res.stderr)

	res = cliRun(ctx, map[string]string{"BC_TOKEN": servertest.TokOps}, list...)
	require.Equal(t, cli.ExitOK, res.code, "bearer token over TLS: %s", res.stderr)

	res = cliRun(ctx, map[string]string{}, list...)
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "UNAUTHENTICATED")

	res = cliRun(ctx, map[string]string{}, append(list, "--cert", cliCert, "--key", cliKey, "--tenant", "x")...)
	require.Equal(t, cli.ExitOK, res.code, "an explicit tenantId beats --tenant: %s", res.stderr)

	res = cliRun(ctx, map[string]string{"BC_CERT": cliCert, "BC_KEY": cliKey},
		"api", "commands.run", "tenantId=tenant_a", "nodeId=node_a1", "kind=diag.nvml", "--endpoint", "https://"+r.GRPC, "--ca-cert", ca)
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "PERMISSION_DENIED", "the certificate's identity only reads")
}
