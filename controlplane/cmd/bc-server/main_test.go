package main_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"github.com/better-compute/commands/internal/trust"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/better-compute/commands/internal/pgtest"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

const authYAML = `identities:
  - name: admin
    tenants: ["*"]
    tokens: [admin-token]
    grants:
      - permission: "*"
        resource: "*"
  - name: ops
    tenants: [tenant_demo]
    tokens: [ops-token]
    grants:
      - permission: "compute:nodes:*"
        resource: "compute-node/*"
`

var servingLine = regexp.MustCompile(`serving: grpc=(\S+) http=(\S+) gateway=(\S+)`)

// The server binary and the CLI binary, end to end: start with flags, come
// ready, serve the spec's command line, stop cleanly on SIGTERM.
func TestServerAndCLIBinaries(t *testing.T) {
	server := testutil.BuildBinary(t, "./controlplane/cmd/bc-server")
	cli := testutil.BuildBinary(t, "./controlplane/cmd/better-compute")
	db := pgtest.Create(t)
	dir := t.TempDir()
	authFile := filepath.Join(dir, "auth.yaml")
	require.NoError(t, os.WriteFile(authFile, []byte(authYAML), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := exec.CommandContext(ctx, server, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--database-url", "dbname="+db, "--auth-config", authFile, "--shutdown-timeout", "5s",
		"--gateway-listen", "127.0.0.1:0", "--ca-dir", filepath.Join(dir, "node-ca"), "--sweep-interval", "1s")
	stderr, err := srv.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, srv.Start())
	exited := make(chan error, 1)
	addrs := make(chan []string, 1)
	var (
		logMu sync.Mutex
		logs  []string
	)
	t.Cleanup(func() {
		if t.Failed() {
			logMu.Lock()
			defer logMu.Unlock()
			t.Logf("bc-server's log:\n%s", strings.Join(logs, "\n"))
		}
	})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logs = append(logs, sc.Text())
			logMu.Unlock()
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				addrs <- m[1:]
			}
		}
		exited <- srv.Wait()
	}()
	var grpcAddr, httpAddr, gatewayAddr string
	select {
	case a := <-addrs:
		grpcAddr, httpAddr, gatewayAddr = a[0], a[1], a[2]
	case err := <-exited:
		t.Fatalf("bc-server exited before serving: %v", err)
	case <-ctx.Done():
		t.Fatal("bc-server did not start")
	}
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	run := func(token string, args ...string) []byte {
		t.Helper()
		c := exec.CommandContext(ctx, cli, args...)
		c.Env = []string{"BC_ENDPOINT=http://" + grpcAddr, "BC_TOKEN=" + token, "HOME=" + dir}
		out, err := c.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return out
	}
	run("admin-token", "api", "nodes.createTenant", "tenantId=tenant_demo", "name=Demo")
	run("admin-token", "api", "nodes.create", "tenantId=tenant_demo", "nodeId=node_demo")
	out := run("ops-token", "api", "commands.run", "tenantId=tenant_demo", "nodeId=node_demo", "kind=node.reboot", "idempotencyKey=reboot-0412")
	var cmd map[string]any
	require.NoError(t, json.Unmarshal(out, &cmd), "%s", out)
	require.Equal(t, "pending", cmd["state"])
	require.Regexp(t, "^cmd_", cmd["id"])

	// The gateway: the node CA was created, and a join token from the CLI
	// buys a node certificate at the gateway without a client certificate.
	caPEM, err := os.ReadFile(filepath.Join(dir, "node-ca", "ca.pem"))
	require.NoError(t, err)
	out = run("admin-token", "nodes", "join-token", "tenantId=tenant_demo", "nodeId=node_demo")
	var tok map[string]any
	require.NoError(t, json.Unmarshal(out, &tok), "%s", out)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	conn, err := grpc.NewClient(gatewayAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)
	defer conn.Close()
	_, csr, err := trust.NewKeyAndCSR("node_demo")
	require.NoError(t, err)
	joined, err := agentv1.NewJoinClient(conn).Join(ctx, &agentv1.JoinRequest{Token: tok["token"].(string), Csr: csr})
	require.NoError(t, err)
	require.Equal(t, "node_demo", joined.GetNodeId())

	// SIGHUP re-reads the auth file: a new token works without a restart.
	require.NoError(t, os.WriteFile(authFile, []byte(authYAML+`  - name: late
    tenants: [tenant_demo]
    tokens: [late-token]
    grants:
      - permission: "compute:nodes:read"
        resource: "compute-node/*"
`), 0o600))
	require.NoError(t, srv.Process.Signal(syscall.SIGHUP))
	testutil.WaitFor(t, 30*time.Second, "the new token to work after SIGHUP", func() bool {
		c := exec.CommandContext(ctx, cli, "commands", "list", "tenantId=tenant_demo", "nodeId=node_demo")
		c.Env = []string{"BC_ENDPOINT=http://" + grpcAddr, "BC_TOKEN=late-token", "HOME=" + dir}
		return c.Run() == nil
	})

	require.NoError(t, srv.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "a clean exit on SIGTERM")
	case <-ctx.Done():
		t.Fatal("bc-server did not stop on SIGTERM")
	}
}
