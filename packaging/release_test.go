package packaging

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/plugins/upgrade"
)

// releaseVersion is the version the test's bcd is built as.
const releaseVersion = "1.4.0-pkgtest"

// releaseStage is a stage as scripts/build-packages leaves it: bcd,
// bcd-upgrader and plugins/, built at releaseVersion.
func releaseStage(t *testing.T) string {
	t.Helper()
	stage := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(stage, "plugins"), 0o755))
	copyBinary(t, testutil.BuildLDFlags(t, "./bcd/cmd/bcd", releaseVersion, "-X github.com/better-compute/commands/internal/version.Version="+releaseVersion), stage, "bcd")
	copyBinary(t, testutil.BuildBinary(t, "./bcd/cmd/bcd-upgrader"), stage, "bcd-upgrader")
	copyBinary(t, testutil.BuildBinary(t, "./plugins/reboot/cmd/bc-kind-reboot"), filepath.Join(stage, "plugins"), "bc-kind-reboot")
	copyBinary(t, testutil.BuildBinary(t, "./plugins/disk/cmd/bc-kind-disk"), filepath.Join(stage, "plugins"), "bc-kind-disk")
	return stage
}

// buildRelease runs scripts/build-release with env over the stage.
func buildRelease(t *testing.T, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("../scripts/build-release")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// nodeConfig is a node's bcd.yaml for the staged self-check.
func nodeConfig(t *testing.T, state string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "bcd.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("role: node\nstateDir: "+state+"\n"), 0o600))
	return cfg
}

// `make release-package` (scripts/build-release) "builds the daemon.upgrade
// release package the operator guide describes" ("a tar.gz holding bcd,
// bcd-upgrader, plugins/ and plugin-sha256.json (the same layout as a
// version directory)"), signs it with RELEASE_KEY through pki sign-release,
// and a node's daemon.upgrade accepts it: the release verifies against the
// release key and matches the file, and the plugin's own unpack and staged
// self-check (with the package's pins) pass.
func TestBuildRelease_ANodeAcceptsIt(t *testing.T) {
	stage := releaseStage(t)
	cli := testutil.BuildBinary(t, "./controlplane/cmd/better-compute")
	keyPath := filepath.Join(t.TempDir(), "release.pem")
	out, err := exec.Command(cli, "pki", "create-release-key", "--out", keyPath).CombinedOutput()
	require.NoError(t, err, string(out))

	dist := t.TempDir()
	sout, err := buildRelease(t, "STAGE="+stage, "OUT="+dist, "RELEASE_KEY="+keyPath, "BETTER_COMPUTE="+cli)
	require.NoError(t, err, sout)
	pkg := filepath.Join(dist, "bcd-"+releaseVersion+"-"+runtime.GOARCH+".tar.gz")
	require.FileExists(t, pkg)

	// The layout: a version directory, nothing else, modes kept.
	entries := tarEntries(t, pkg)
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	require.Equal(t, []string{"bcd", "bcd-upgrader", "plugin-sha256.json", "plugins/", "plugins/bc-kind-disk", "plugins/bc-kind-reboot"}, names)
	for _, n := range []string{"bcd", "bcd-upgrader", "plugins/bc-kind-disk", "plugins/bc-kind-reboot"} {
		require.Equal(t, int64(0o755), entries[n].hdr.Mode, n)
	}
	var pins map[string]string
	require.NoError(t, json.Unmarshal(entries["plugin-sha256.json"].body, &pins))
	for _, p := range []string{"bc-kind-disk", "bc-kind-reboot"} {
		sum := sha256.Sum256(entries["plugins/"+p].body)
		require.Equal(t, hex.EncodeToString(sum[:]), pins[p], "the pin of %s is its packaged file's digest", p)
	}

	// The signed release: verified by the release key, naming this file.
	b, err := os.ReadFile(filepath.Join(dist, "bcd-"+releaseVersion+"-"+runtime.GOARCH+".release.json"))
	require.NoError(t, err)
	var rep struct {
		Version, SHA256, Release string
		Size                     int64
	}
	require.NoError(t, json.Unmarshal(b, &rep))
	wire, err := base64.StdEncoding.DecodeString(rep.Release)
	require.NoError(t, err)
	key, err := trust.LoadEd25519PrivateKey(keyPath)
	require.NoError(t, err)
	bundle := &trust.Bundle{Version: 1, ReleaseKeys: []trust.Root{{PublicKey: key.Public().(ed25519.PublicKey)}}}
	rel, err := trust.VerifyRelease(bundle, wire, time.Now())
	require.NoError(t, err)
	body, err := os.ReadFile(pkg)
	require.NoError(t, err)
	sum := sha256.Sum256(body)
	require.Equal(t, releaseVersion, rel.Version)
	require.Equal(t, hex.EncodeToString(sum[:]), rel.SHA256)
	require.Equal(t, int64(len(body)), rel.Size)
	require.False(t, rel.AllowDowngrade)

	// The node's side: unpack and self-check exactly as daemon.upgrade does.
	state := t.TempDir()
	cfg := upgrade.Config{StateDir: state, ConfigFile: nodeConfig(t, state)}
	staged := filepath.Join(t.TempDir(), "versions", releaseVersion)
	selfOut, err := upgrade.StageRelease(context.Background(), cfg, pkg, staged, rel.Size)
	require.NoError(t, err, selfOut)
	require.Contains(t, selfOut, "self-check passed: bcd "+releaseVersion)

	// Built again from the same binaries: the same bytes (so the same
	// digest the release signed).
	again := t.TempDir()
	sout, err = buildRelease(t, "STAGE="+stage, "OUT="+again)
	require.NoError(t, err, sout)
	body2, err := os.ReadFile(filepath.Join(again, filepath.Base(pkg)))
	require.NoError(t, err)
	require.Equal(t, body, body2, "the release package is reproducible")
}

// The package's pins have teeth on the node: a package whose plugin
// differs from what its plugin-sha256.json pins is never accepted by the
// staged self-check, which names the plugin; and a VERSION that is not the
// staged bcd's is refused at build time.
func TestBuildRelease_PinsHaveTeethAndVersionMustMatch(t *testing.T) {
	stage := releaseStage(t)
	dist := t.TempDir()
	out, err := buildRelease(t, "STAGE="+stage, "OUT="+dist)
	require.NoError(t, err, out)
	pkg := filepath.Join(dist, "bcd-"+releaseVersion+"-"+runtime.GOARCH+".tar.gz")

	// Repack with one plugin changed after the pins were written.
	entries := tarEntries(t, pkg)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, n := range []string{"bcd", "bcd-upgrader", "plugin-sha256.json", "plugins/", "plugins/bc-kind-disk", "plugins/bc-kind-reboot"} {
		e := entries[n]
		hdr := *e.hdr
		body := e.body
		if n == "plugins/bc-kind-reboot" {
			body = append(append([]byte{}, body...), "tampered"...)
			hdr.Size = int64(len(body))
		}
		require.NoError(t, tw.WriteHeader(&hdr))
		_, err := tw.Write(body)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	bad := filepath.Join(t.TempDir(), "tampered.tar.gz")
	require.NoError(t, os.WriteFile(bad, buf.Bytes(), 0o644))

	state := t.TempDir()
	cfg := upgrade.Config{StateDir: state, ConfigFile: nodeConfig(t, state)}
	selfOut, err := upgrade.StageRelease(context.Background(), cfg, bad, filepath.Join(t.TempDir(), "v"), int64(buf.Len()))
	require.Error(t, err)
	require.Contains(t, selfOut, "refused plugin bc-kind-reboot")
	require.Contains(t, selfOut, "does not match its pinned SHA-256")

	out, err = buildRelease(t, "STAGE="+stage, "OUT="+dist, "VERSION=9.9.9")
	require.Error(t, err)
	require.Contains(t, out, "VERSION=9.9.9, but "+stage+"/bcd is "+releaseVersion)
}

type tarEntry struct {
	hdr  *tar.Header
	body []byte
}

// tarEntries reads a tar.gz into name -> entry.
func tarEntries(t *testing.T, path string) map[string]tarEntry {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	m := map[string]tarEntry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return m
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		m[h.Name] = tarEntry{hdr: h, body: b}
	}
}
