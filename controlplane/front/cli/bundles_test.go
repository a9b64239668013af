package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// "Operators read bundles from the blob store ... give the CLI a command that
// downloads one": the CLI opens the store the server's config names.
func TestBundlesDownload_CopiesFromTheDirStore(t *testing.T) {
	dir := t.TempDir()
	blobs := filepath.Join(dir, "blobs")
	key := "support-bundles/node_1/abc.bundle"
	body := []byte("a tar.gz, as far as this test cares")
	require.NoError(t, os.MkdirAll(filepath.Join(blobs, "support-bundles", "node_1"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(blobs, filepath.FromSlash(key)), body, 0o644))
	secret := filepath.Join(dir, "blob.key")
	require.NoError(t, os.WriteFile(secret, bytes.Repeat([]byte("k"), 32), 0o600))
	cfg := filepath.Join(dir, "server.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`supportBundles:
  blob:
    driver: dir
    dir:
      path: "`+blobs+`"
      baseURL: "http://127.0.0.1:1/v1/blobs"
      secretFile: "`+secret+`"
`), 0o600))
	out := filepath.Join(dir, "out.tar.gz")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), Env{Args: []string{"bundles", "download", key, "--server-config", cfg, "-o", out},
		Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	require.Equal(t, ExitOK, code, stderr.String())
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, body, got)
	sum := sha256.Sum256(body)
	require.Contains(t, stderr.String(), hex.EncodeToString(sum[:]))

	// A missing bundle is an error that names it, and nothing is written.
	code = Main(context.Background(), Env{Args: []string{"bundles", "download", "support-bundles/node_1/nope.bundle", "--server-config", cfg, "-o", filepath.Join(dir, "x")},
		Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	require.Equal(t, ExitError, code)
	require.Contains(t, stderr.String(), "nope.bundle")
	require.NoFileExists(t, filepath.Join(dir, "x"))

	// Without --server-config the CLI says what it needs.
	stderr.Reset()
	code = Main(context.Background(), Env{Args: []string{"bundles", "download", key}, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	require.Equal(t, ExitUsage, code)
	require.Contains(t, stderr.String(), "--server-config is required")
}
