package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/upgrade"
)

// procedure returns the sh block after the marker in docs/operator-guide.md.
func procedure(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "docs", "operator-guide.md"))
	require.NoError(t, err)
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	var cur *strings.Builder
	seen := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "<!-- procedure: "+marker+" -->":
			seen = true
		case seen && cur == nil && line == "```sh":
			cur = &strings.Builder{}
		case cur != nil && line == "```":
			return cur.String()
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	t.Fatalf("no procedure %q in the operator guide", marker)
	return ""
}

// The operator guide's "Setting a node up for in-place upgrades", run as
// written over a package's paths in a temp dir (the plugins and the
// plugin-sha256.json the package ships, written by scripts/build-packages'
// own plugin_pins): it copies the shipped pins rather than computing them,
// and leaves a version directory whose pins match its plugins, current
// pointing at it, and the config the guide gives passes bcd self-check
// through current.
func TestOperatorGuide_InstallLayoutProcedure(t *testing.T) {
	e := newEnv(t)
	lib := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(lib, "plugins"), 0o755))
	entries, err := os.ReadDir(e.plugins)
	require.NoError(t, err)
	for _, en := range entries {
		b, err := os.ReadFile(filepath.Join(e.plugins, en.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(lib, "plugins", en.Name()), b, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(lib, "bcd-upgrader"), []byte("#!/bin/true\n"), 0o755))
	pins := exec.Command("bash", "-euo", "pipefail", "-c", `. "$1"; plugin_pins "$2" >"$3"`, "pins",
		filepath.Join(testutil.RepoRoot(t), "scripts", "lib", "plugin-pins.sh"), filepath.Join(lib, "plugins"), filepath.Join(lib, "plugin-sha256.json"))
	out, err := pins.CombinedOutput()
	require.NoError(t, err, string(out))
	shipped, err := os.ReadFile(filepath.Join(lib, "plugin-sha256.json"))
	require.NoError(t, err)
	install := filepath.Join(t.TempDir(), "install")

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", procedure(t, "install-layout"))
	cmd.Env = append(os.Environ(), "INSTALL="+install, "BCD="+e.bin, "LIB="+lib)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, string(out))

	l := upgrade.Layout{Root: install}
	v, err := l.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, "dev", v)
	require.FileExists(t, filepath.Join(l.VersionDir(v), upgrade.HelperBinary))
	copied, err := os.ReadFile(filepath.Join(l.VersionDir(v), upgrade.PinsFile))
	require.NoError(t, err)
	require.Equal(t, string(shipped), string(copied), "the version directory carries the package's own pins")

	cfg := filepath.Join(t.TempDir(), "bcd.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.Join([]string{
		"installDir: " + install,
		"pluginDir: " + filepath.Join(install, "current", "plugins"),
		"pluginPinsFile: " + filepath.Join(install, "current", "plugin-sha256.json"),
		"stateDir: " + e.state,
	}, "\n")+"\n"), 0o600))
	sc := exec.Command(e.bin, "self-check", "--config", cfg)
	out, err = sc.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "self-check passed")

	// The pins have teeth: a plugin changed after the pins were written
	// fails the self-check, naming it.
	p := filepath.Join(l.VersionDir(v), "plugins", entries[0].Name())
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = f.WriteString("tampered")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	out, err = exec.Command(e.bin, "self-check", "--config", cfg).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), entries[0].Name())
}
