package cli

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/trust"
)

// The release tooling as the operator guide runs it: a release key, and a
// signed release that verifies against a bundle holding the key and names
// the package's digest and size.
func TestPKI_SignReleaseVerifiesUnderTheReleaseKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := filepath.Join(dir, "release.pem")
	code, _, errOut := runPKI(t, "create-release-key", "--out", key)
	require.Equal(t, ExitOK, code, errOut)
	pkg := filepath.Join(dir, "bcd-1.4.0.tar.gz")
	require.NoError(t, os.WriteFile(pkg, []byte("package"), 0o644))
	code, out, errOut := runPKI(t, "sign-release", "--key", key, "--version", "1.4.0", "--package", pkg, "--json")
	require.Equal(t, ExitOK, code, errOut)
	var rep releaseReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, int64(7), rep.Size)
	wire, err := base64.StdEncoding.DecodeString(rep.Release)
	require.NoError(t, err)
	pub, err := trust.LoadEd25519PublicKey(key + ".pub")
	require.NoError(t, err)
	rel, err := trust.VerifyRelease(&trust.Bundle{Version: 1, ReleaseKeys: []trust.Root{{PublicKey: pub}}}, wire, time.Now())
	require.NoError(t, err)
	require.Equal(t, "1.4.0", rel.Version)
	require.Equal(t, rep.SHA256, rel.SHA256)
	require.False(t, rel.AllowDowngrade)

	code, _, errOut = runPKI(t, "sign-release", "--key", key, "--package", pkg)
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "--version")
}
