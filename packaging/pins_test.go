package packaging

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// pinsLib is the shell library scripts/build-packages and
// scripts/build-release write plugin-sha256.json with.
const pinsLib = "../scripts/lib/plugin-pins.sh"

// writePins runs plugin_pins over dir, as the build scripts do.
func writePins(t *testing.T, dir, out string) {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", `. "$1"; plugin_pins "$2" >"$3"`, "pins", pinsLib, dir, out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
}

// copyBinary copies a built binary into dir as name, executable.
func copyBinary(t *testing.T, src, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	dst := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(dst, b, 0o755))
	return dst
}

// "The packages carry the plugins with pins that match the new bcd": the
// recipe ships plugin-sha256.json beside (never inside) the plugin
// directory, and the shipped bcd.yaml points pluginPinsFile at it.
func TestBcdRecipe_ShipsThePluginPins(t *testing.T) {
	r := readRecipe(t, "bcd")
	src, typ, mode := dst(t, r, "/usr/lib/bcd/plugin-sha256.json")
	require.Equal(t, "dist/stage/plugin-sha256.json", src)
	require.Empty(t, typ, "a plain file the package replaces on upgrade, never a conffile")
	require.Equal(t, 0o644, mode)
	b, err := os.ReadFile("bcd/bcd.yaml")
	require.NoError(t, err)
	require.Contains(t, string(b), "\npluginPinsFile: /usr/lib/bcd/plugin-sha256.json\n")
	script, err := os.ReadFile("../scripts/build-packages")
	require.NoError(t, err)
	require.Contains(t, string(script), `plugin_pins "$STAGE/plugins" >"$STAGE/plugin-sha256.json"`,
		"the pins are computed from the very plugins staged for the package")
}

// The pins file the build writes is the format bcd's pluginPinsFile reads
// (a JSON object, file name -> hex SHA-256), and a plugin file name JSON
// would have to escape is refused rather than written.
func TestPluginPins_Format(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bc-kind-b"), []byte("b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bc-kind-a"), []byte("a"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "not-a-plugin.d"), 0o755))
	out := filepath.Join(t.TempDir(), "plugin-sha256.json")
	writePins(t, dir, out)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var pins map[string]string
	require.NoError(t, json.Unmarshal(b, &pins), string(b))
	require.Equal(t, map[string]string{
		// sha256sum of "a" and of "b".
		"bc-kind-a": "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb",
		"bc-kind-b": "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d",
	}, pins)

	require.NoError(t, os.WriteFile(filepath.Join(dir, `bad"name`), []byte("x"), 0o755))
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", `. "$1"; plugin_pins "$2"`, "pins", pinsLib, dir)
	b, err = cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(b), `bad"name`)
}

// The shipped bcd.yaml with the shipped pins: bcd starts its plugins
// (self-check passes, kinds lists them), and a plugin changed after the
// build is refused, the error naming it. The config is the packaged file
// with only its /usr/lib/bcd and /var/lib/bcd paths moved into a temp dir.
func TestShippedConfigAndPins_RefuseATamperedPlugin(t *testing.T) {
	bcd := testutil.BuildBinary(t, "./bcd/cmd/bcd")
	lib := t.TempDir()
	plugins := filepath.Join(lib, "plugins")
	require.NoError(t, os.Mkdir(plugins, 0o755))
	reboot := copyBinary(t, testutil.BuildBinary(t, "./plugins/reboot/cmd/bc-kind-reboot"), plugins, "bc-kind-reboot")
	copyBinary(t, testutil.BuildBinary(t, "./plugins/disk/cmd/bc-kind-disk"), plugins, "bc-kind-disk")
	writePins(t, plugins, filepath.Join(lib, "plugin-sha256.json"))

	shipped, err := os.ReadFile("bcd/bcd.yaml")
	require.NoError(t, err)
	state := t.TempDir()
	text := string(shipped)
	for from, to := range map[string]string{
		"pluginPinsFile: /usr/lib/bcd/plugin-sha256.json": "pluginPinsFile: " + filepath.Join(lib, "plugin-sha256.json"),
		"pluginDir: /usr/lib/bcd/plugins":                 "pluginDir: " + plugins,
		"stateDir: /var/lib/bcd":                          "stateDir: " + state,
	} {
		require.Contains(t, text, "\n"+from+"\n")
		text = strings.Replace(text, "\n"+from+"\n", "\n"+to+"\n", 1)
	}
	cfg := filepath.Join(t.TempDir(), "bcd.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(text), 0o600))

	out, err := exec.Command(bcd, "self-check", "--config", cfg).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "self-check passed")
	out, err = exec.Command(bcd, "kinds", "--config", cfg).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "node.reboot")

	f, err := os.OpenFile(reboot, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("tampered after the build")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	out, err = exec.Command(bcd, "self-check", "--config", cfg).CombinedOutput()
	require.Error(t, err, string(out))
	require.Contains(t, string(out), "refused plugin bc-kind-reboot")
	require.Contains(t, string(out), "does not match its pinned SHA-256")
	t.Logf("a tampered plugin: %s", strings.TrimSpace(string(out)))
}

// checkPins runs check_plugin_pins over lib, as scripts/check-packages does
// on the extracted and the installed package.
func checkPins(t *testing.T, lib string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", `. "$1"; check_plugin_pins "$2"`, "pins", pinsLib, lib)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// scripts/check-packages "asserts the pins file is in both packages and
// matches the plugin binaries": its check passes the pins the build wrote
// and fails, saying why, on a plugin changed since, a plugin without a pin,
// a pin without a plugin and a missing pins file.
func TestCheckPluginPins(t *testing.T) {
	lib := t.TempDir()
	plugins := filepath.Join(lib, "plugins")
	require.NoError(t, os.Mkdir(plugins, 0o755))
	for _, n := range []string{"bc-kind-a", "bc-kind-b"} {
		require.NoError(t, os.WriteFile(filepath.Join(plugins, n), []byte(n), 0o755))
	}
	pinsFile := filepath.Join(lib, "plugin-sha256.json")
	out, err := checkPins(t, lib)
	require.Error(t, err)
	require.Contains(t, out, pinsFile+" is missing")

	writePins(t, plugins, pinsFile)
	out, err = checkPins(t, lib)
	require.NoError(t, err, out)
	require.Contains(t, out, "  bc-kind-a\n")
	require.Contains(t, out, "  bc-kind-b\n")

	require.NoError(t, os.WriteFile(filepath.Join(plugins, "bc-kind-b"), []byte("changed"), 0o755))
	out, err = checkPins(t, lib)
	require.Error(t, err)
	require.Contains(t, out, "bc-kind-b: FAILED")
	require.Contains(t, out, "does not match the plugins in "+plugins)

	require.NoError(t, os.WriteFile(filepath.Join(plugins, "bc-kind-b"), []byte("bc-kind-b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(plugins, "bc-kind-c"), []byte("c"), 0o755))
	out, err = checkPins(t, lib)
	require.Error(t, err)
	require.Contains(t, out, "pins [bc-kind-a bc-kind-b], "+plugins+" holds [bc-kind-a bc-kind-b bc-kind-c]")

	require.NoError(t, os.Remove(filepath.Join(plugins, "bc-kind-c")))
	require.NoError(t, os.Remove(filepath.Join(plugins, "bc-kind-a")))
	out, err = checkPins(t, lib)
	require.Error(t, err)
	require.Contains(t, out, "bc-kind-a")
}
