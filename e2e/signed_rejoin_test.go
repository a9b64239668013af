package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// copyDir copies a directory tree (a stopped bcd's state directory).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o600)
	}))
}

// oldCertCreds are TLS credentials from a state directory's tls/ files.
func oldCertCreds(t *testing.T, state string) credentials.TransportCredentials {
	t.Helper()
	dir := filepath.Join(state, "tls")
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"))
	require.NoError(t, err)
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca))
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12})
}

// "A re-join supersedes the node's earlier certificate. A session with a
// superseded or revoked certificate is refused (PERMISSION_DENIED)"
// (docs/trust.md): after `bcd join` again, a bcd on the old certificate is
// refused, and so is a session opened with it directly; the re-joined
// node's session stays and runs a signed command.
func TestE2E_SignedOldCertificateRefusedAfterRejoin(t *testing.T) {
	c := newSignedCluster(t)
	n := c.signedNode()
	env := baseEnv(t)
	env["BCD_NVIDIA_SMI"] = "mock"
	n.configure(env)
	n.start()
	c.succeeded(c.run("inventory.refresh", map[string]any{}).GetId())

	// The old state directory, certificate and all, kept aside; then the
	// node joins again with a new token.
	n.stop()
	oldState := t.TempDir()
	copyDir(t, n.state, oldState)
	out, errs, code := n.bcd("join", "--token", c.srv.JoinToken(t, servertest.NodeA1), "--server", c.srv.Gateway,
		"--ca-file", filepath.Join(c.srv.CADir, "ca.pem"))
	require.Equal(t, 0, code, "bcd join again: %s", errs)
	require.Contains(t, out, "(commands must be signed)")
	n.start()
	c.nodeTrust()
	ended := strings.Count(n.logs.String(), "session ended")

	// A second bcd on the old certificate: every session it opens is refused.
	old := &node{c: c, state: oldState, boot: n.boot, config: n.config, logs: &lockedBuffer{}}
	t.Cleanup(func() {
		old.kill()
		if t.Failed() {
			t.Logf("old bcd logs:\n%s", old.logs.String())
		}
	})
	old.launch()
	testutil.WaitFor(t, 60*time.Second, "the old certificate's session to be refused", func() bool {
		return strings.Contains(old.logs.String(), "superseded")
	})
	require.Zero(t, old.sessions(), "no session opens on the old certificate")
	old.kill()

	// The same, seen on the wire: PERMISSION_DENIED, superseded.
	conn, err := grpc.NewClient(c.srv.Gateway, grpc.WithTransportCredentials(oldCertCreds(t, oldState)))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := agentv1.NewSessionClient(conn).Connect(ctx)
	require.NoError(t, err)
	_ = stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Hello{Hello: &agentv1.Hello{NodeId: servertest.NodeA1, Role: "node"}}})
	_, err = stream.Recv()
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "superseded")

	// The re-joined node kept its session and runs signed commands.
	c.succeeded(c.run("diag.nvml", map[string]any{"expectedCount": 8}).GetId())
	require.Equal(t, ended, strings.Count(n.logs.String(), "session ended"), "the re-joined node's session stayed open")
	out, errs, code = c.cli("nodes", "certs", servertest.NodeA1)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "superseded")
	require.Contains(t, out, "current")
}
