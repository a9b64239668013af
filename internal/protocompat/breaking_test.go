package protocompat

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// breaking runs make proto-breaking's two steps on the protos under dir
// (a copy of the repository's buf workspace) and returns buf's output and
// whether it passed.
func breaking(t *testing.T, root, dir string) (string, bool) {
	t.Helper()
	image := filepath.Join(t.TempDir(), "current.binpb")
	build := exec.Command("go", "tool", "-modfile=tools/go.mod", "buf", "build", dir, "-o", image)
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "buf build: %s", out)
	check := exec.Command("go", "tool", "-modfile=tools/go.mod", "buf", "breaking", image, "--against", filepath.Join(root, "buf.baseline.binpb"), "--exclude-imports")
	check.Dir = root
	out, err = check.CombinedOutput()
	return string(out), err == nil
}

// copyWorkspace copies buf.yaml and every .proto file of the repository
// into a temporary directory.
func copyWorkspace(t *testing.T, root string) string {
	t.Helper()
	dst := t.TempDir()
	files := []string{"buf.yaml"}
	for _, mod := range []string{"proto", "sdk/proto"} {
		require.NoError(t, filepath.WalkDir(filepath.Join(root, mod), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".proto") {
				rel, _ := filepath.Rel(root, path)
				files = append(files, rel)
			}
			return err
		}))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dst, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dst, f), b, 0o644))
	}
	return dst
}

// The protos keep every field, message and RPC of the last release's
// (buf.baseline.binpb), and buf breaking catches a field removed from
// them: the two TrustBundle fields dropped once, which broke out-of-tree
// Go code, fail it, and a field removed with its number reserved does too.
func TestProtosAreCompatibleWithTheLastRelease(t *testing.T) {
	root := testutil.RepoRoot(t)
	out, ok := breaking(t, root, root)
	require.True(t, ok, "buf breaking against the last release's protos:\n%s", out)

	dir := copyWorkspace(t, root)
	agent := filepath.Join(dir, "proto/bc/agent/v1/agent.proto")
	b, err := os.ReadFile(agent)
	require.NoError(t, err)
	field := "  repeated bytes approver_keys = 3 [deprecated = true];\n"
	require.Contains(t, string(b), field)
	require.NoError(t, os.WriteFile(agent, []byte(strings.Replace(string(b), field, "  reserved 3;\n  reserved \"approver_keys\";\n", 1)), 0o644))
	out, ok = breaking(t, root, dir)
	require.False(t, ok, "buf breaking passed a removed field:\n%s", out)
	require.Contains(t, out, `Previously present field "3" with name "approver_keys" on message "TrustBundle" was deleted.`)
}
