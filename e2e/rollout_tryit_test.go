package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
)

// Issue 35: "the operator guide's section 10 … get[s] a 'try it on one
// machine' procedure that a test runs as written". The block runs with
// bash -e from the repository's root against a real bc-server whose
// pki.releaseKeys holds the procedure's $RELEASE_KEY, with better-compute
// and bc-fake-systemd as binaries on PATH and $BIN holding bcd-upgrader and
// bc-kind-upgrade: it builds 1.0.0 and 1.1.0 with go build, runs 1.0.0
// under bc-fake-systemd, signs and rolls out 1.1.0, and ends with the node
// upgraded and current pointing at versions/1.1.0.
func TestE2E_OperatorGuideTryRolloutProcedure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds bcd twice")
	}
	signing, _ := servertest.Signing(t)
	pub, key, err := trust.NewEd25519()
	require.NoError(t, err)
	keys := t.TempDir()
	releaseKey := filepath.Join(keys, "release.pem")
	kp, err := trust.MarshalPrivateKeyPEM(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(releaseKey, kp, 0o600))
	pp, err := trust.MarshalPublicKeyPEM(pub)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(releaseKey+".pub", pp, 0o644))
	c := newCluster(t, func(cfg *server.Config) {
		signing(cfg)
		cfg.PKI.ReleaseKeys = []string{releaseKey + ".pub"}
		cfg.Modules.Rollout.Interval = server.Duration(time.Second)
	})

	bin := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(bin, "plugins"), 0o755))
	installPlugin(t, testutil.BuildBinary(t, "./bcd/cmd/bcd-upgrader"), filepath.Join(bin, "bcd-upgrader"))
	installPlugin(t, testutil.BuildBinary(t, "./plugins/upgrade/cmd/bc-kind-upgrade"), filepath.Join(bin, "plugins", "bc-kind-upgrade"))
	path := toolPath(t, map[string]string{
		"better-compute":  testutil.BuildBinary(t, "./controlplane/cmd/better-compute"),
		"bc-fake-systemd": testutil.BuildBinary(t, "./internal/tools/bc-fake-systemd"),
	})
	conf := filepath.Join(t.TempDir(), "bc.yaml")
	require.NoError(t, os.WriteFile(conf, nil, 0o600))
	tmp := t.TempDir()
	t.Cleanup(func() { dumpLogs(t, tmp) })
	env := []string{"PATH=" + path, "TMPDIR=" + tmp, "GOWORK=off", "BIN=" + bin, "RELEASE_KEY=" + releaseKey,
		"BC_ENDPOINT=http://" + c.srv.GRPC, "BC_TOKEN=" + servertest.TokAdmin, "BC_TENANT=" + servertest.TenantA, "BC_CONFIG=" + conf,
		"GATEWAY=" + c.srv.Gateway, "NODE_CA=" + filepath.Join(c.srv.CADir, "ca.pem")}
	// go build needs the toolchain's own settings (its cache, the module
	// cache) as the test has them.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "HOME" || (strings.HasPrefix(k, "GO") && k != "GOWORK") || k == "CGO_CFLAGS" {
			env = append(env, kv)
		}
	}
	script := procedureBlock(t, filepath.Join("..", "docs", "operator-guide.md"), "try-rollout")
	out := runProcedureIn(t, testutil.RepoRoot(t), script, env, 8*time.Minute)
	require.Regexp(t, `node_try_up\s+1\.1\.0\s+1\.1\.0\s+upgraded`, out)
	require.Contains(t, out, "versions/1.1.0\n", "current points at the new version")
	require.Equal(t, "1.1.0", c.daemonVersion("node_try_up"))
}
