package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/trust"
)

func runPKI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{Args: append([]string{"pki"}, args...), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

// createCommandSigningAuthority and issueWorkerKey, as the CLI runs them:
// the root is written 0600 and never overwritten, and a worker key it
// certifies verifies against a bundle holding the root.
func TestPKI_CreateRootAndIssueAWorkerKeyItCertifies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := filepath.Join(dir, "root.pem")
	code, out, errOut := runPKI(t, "create-root", "--out", root, "--json")
	require.Equal(t, ExitOK, code, errOut)
	var rep keyReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	st, err := os.Stat(root)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	pub, err := trust.LoadEd25519PublicKey(root + ".pub")
	require.NoError(t, err)
	require.Equal(t, trust.Ed25519KeyID(pub), rep.KeyID)

	code, _, errOut = runPKI(t, "create-root", "--out", root)
	require.Equal(t, ExitError, code)
	require.Contains(t, errOut, "refusing to overwrite")

	wk, wc := filepath.Join(dir, "w.pem"), filepath.Join(dir, "w.cert")
	code, _, errOut = runPKI(t, "issue-worker-key", "--root", root, "--out-key", wk, "--out-cert", wc, "--lifetime", "2h")
	require.Equal(t, ExitOK, code, errOut)
	key, err := trust.LoadEd25519PrivateKey(wk)
	require.NoError(t, err)
	cert, err := os.ReadFile(wc)
	require.NoError(t, err)
	body := []byte("command bytes")
	b := &trust.Bundle{Version: 1, Roots: []trust.Root{{PublicKey: pub}}}
	_, err = trust.VerifyWorkerSigned(b, cert, trust.PurposeCommand, body, trust.SignEd25519(key, trust.PurposeCommand, body), time.Now())
	require.NoError(t, err)

	code, _, errOut = runPKI(t, "issue-worker-key", "--root", root, "--out-key", filepath.Join(dir, "x"), "--out-cert", filepath.Join(dir, "y"), "--lifetime", "48h")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "24h")
}

func TestPKI_RotatePrintsTheThreeSteps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := filepath.Join(dir, "root.pem")
	code, _, errOut := runPKI(t, "create-root", "--out", root)
	require.Equal(t, ExitOK, code, errOut)
	code, out, errOut := runPKI(t, "rotate", "--current", root, "--out", filepath.Join(dir, "next.pem"))
	require.Equal(t, ExitOK, code, errOut)
	for _, want := range []string{"1. Announce", "2. Switch", "3. Retire", "commandSigningRoots: [" + filepath.Join(dir, "next.pem") + ".pub]", "rejoined"} {
		require.Contains(t, out, want)
	}
	_, err := trust.LoadEd25519PrivateKey(filepath.Join(dir, "next.pem"))
	require.NoError(t, err)
}

func TestPKI_CreateApproverAndPublicKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := filepath.Join(dir, "alice.pem")
	code, _, errOut := runPKI(t, "create-approver", "--out", k)
	require.Equal(t, ExitOK, code, errOut)
	code, out, errOut := runPKI(t, "public-key", "--key", k)
	require.Equal(t, ExitOK, code, errOut)
	p, err := trust.ParseEd25519PublicKeyPEM([]byte(out))
	require.NoError(t, err)
	require.Contains(t, errOut, trust.Ed25519KeyID(p))
}
