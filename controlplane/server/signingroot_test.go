package server_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/trust"
)

// createRoot is the packaged config's pki section with the root under dir.
func createRoot(dir string) func(*server.Config) {
	return func(c *server.Config) {
		c.PKI.CommandSigning = filepath.Join(dir, "pki", "command-root.pem")
		c.PKI.CreateCommandSigning = true
	}
}

// startErr is server.New's error for cfg (nil: it started, and is closed).
func startErr(t *testing.T, cfg server.Config) error {
	t.Helper()
	cfg.GRPCListen, cfg.HTTPListen, cfg.Gateway.Listen, cfg.SupportBundles = "127.0.0.1:0", "", "", nil
	reg, err := kinds.NewRegistry(servertest.Manifests()...)
	require.NoError(t, err)
	srv, err := server.New(context.Background(), cfg, reg, hclog.NewNullLogger())
	if err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = srv.Run(ctx)
	}
	return err
}

func perm(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

// Issue 31: "The bc-server package ... create[s] the signing authority at
// install (or first start) on the control plane host, with the key's file
// mode and owner checked, and print[s] how to move the root offline". The
// first start with pki.createCommandSigning makes the root (0600 in a 0700
// directory, .pub 0644), signs with it, and logs which file to copy
// offline and what stays; the next start keeps that root, unchanged.
func TestServer_CreateCommandSigningMakesTheRootOnceAtFirstStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var logs syncBuffer
	r := servertest.StartLogged(t, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}), createRoot(dir))
	path := r.Config.PKI.CommandSigning

	require.Equal(t, os.FileMode(0o700), perm(t, filepath.Dir(path)))
	require.Equal(t, os.FileMode(0o600), perm(t, path))
	require.Equal(t, os.FileMode(0o644), perm(t, path+".pub"))
	pub, err := trust.LoadEd25519PublicKey(path + ".pub")
	require.NoError(t, err)
	id := trust.Ed25519KeyID(pub)

	out := logs.String()
	require.Contains(t, out, "created the command-signing root (pki.createCommandSigning): key_id="+id+" private_key="+path)
	require.Contains(t, out, "keep an offline copy now:\n  copy "+path+" (the private key, 0600) and "+path+".pub to offline storage")
	require.Contains(t, out, path+" stays on this host, readable by bc-server only")
	require.Contains(t, out, "give nodes "+path+".pub as trustAnchors")
	require.NotContains(t, out, "command signing is off")
	_, body := get(t, "http://"+r.HTTP+"/readyz")
	require.Equal(t, "ready\ncommand signing: on (root "+id[:12]+")\n", body)
	require.Equal(t, "1", signingMetric(t, r.HTTP))

	before, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, r.Stop())

	// The second start (a restart, a reinstall, an upgrade) keeps it.
	r2 := servertest.StartReplica(t, r, nil)
	_, body = get(t, "http://"+r2.HTTP+"/readyz")
	require.Equal(t, "ready\ncommand signing: on (root "+id[:12]+")\n", body)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "the root is never replaced")
	require.Equal(t, os.FileMode(0o600), perm(t, path))
	require.Equal(t, os.FileMode(0o644), perm(t, path+".pub"))
}

// "bc-server refuses to start ... when a private key file is group/world
// readable": the error names the file, the mode and the chmod; after the
// chmod it starts. This holds for a root bc-server made and for one an
// operator gave it.
func TestServer_RefusesAGroupOrWorldReadableSigningRoot(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, createRoot(t.TempDir()))
	require.NoError(t, r.Stop())
	path := r.Config.PKI.CommandSigning

	require.NoError(t, os.Chmod(path, 0o644))
	err := startErr(t, r.Config)
	require.EqualError(t, err, "pki.commandSigning: "+path+" is mode 0644: a private key must be readable by its owner only, and group or others can read or write this one; fix: chmod 0600 "+path)

	operators, path2 := servertest.Signing(t)
	require.NoError(t, os.Chmod(path2, 0o640))
	cfg := r.Config
	operators(&cfg)
	require.ErrorContains(t, startErr(t, cfg), path2+" is mode 0640")

	require.NoError(t, os.Chmod(path, 0o600))
	require.NoError(t, startErr(t, r.Config), "0600 is accepted")

	// The platform's approver key, one approval of every platform batch,
	// is checked the same way.
	_, approver := servertest.Signing(t)
	require.NoError(t, os.Chmod(approver, 0o644))
	cfg = r.Config
	cfg.PKI.PlatformApproverKey = approver
	require.EqualError(t, startErr(t, cfg), "modules: pki.platformApproverKey: "+approver+" is mode 0644: a private key must be readable by its owner only, and group or others can read or write this one; fix: chmod 0600 "+approver)
}

// A key owned by another user is refused (root may chown; elsewhere this
// case is skipped, and the signing package's test of the message runs as
// root in CI too).
func TestServer_RefusesASigningRootOwnedByAnotherUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	_, path := servertest.Signing(t)
	require.NoError(t, os.Chown(path, 65534, 65534))
	r := servertest.Start(t, nil)
	require.NoError(t, r.Stop())
	cfg := r.Config
	cfg.PKI.CommandSigning = path
	err := startErr(t, cfg)
	require.Error(t, err)
	require.Regexp(t, `^pki.commandSigning: `+regexp.QuoteMeta(path)+` is owned by uid 65534.*, but this process runs as uid 0 \(root\).*fix: chown root `+regexp.QuoteMeta(path), err.Error())
}

// pki.createCommandSigning never makes a second root: with the root gone
// but a trust bundle published (nodes trust that root), or the root gone
// and its .pub left (it was moved off the host), bc-server refuses to
// start and says what to do, and writes nothing.
func TestServer_CreateCommandSigningNeverReplacesARootNodesTrust(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, createRoot(t.TempDir()))
	require.NoError(t, r.Stop())
	path := r.Config.PKI.CommandSigning

	require.NoError(t, os.Rename(path, path+".moved"))
	err := startErr(t, r.Config)
	require.EqualError(t, err, "pki.commandSigning: "+path+" does not exist but its public key "+path+".pub does: the root was moved off this host; put it back (mode 0600, owned by the user bc-server runs as) for bc-server to sign, since pki.createCommandSigning never replaces a root that nodes may trust")
	require.NoFileExists(t, path)

	require.NoError(t, os.Rename(path+".pub", path+".pub.moved"))
	err = startErr(t, r.Config)
	require.Error(t, err)
	require.Regexp(t, `^pki.commandSigning: `+regexp.QuoteMeta(path)+` does not exist, and trust bundle version \d+ is already published: nodes trust the root that signed it, so pki.createCommandSigning makes no new one; copy that root here`, err.Error())
	require.NoFileExists(t, path)
	require.NoFileExists(t, path+".pub")
}
