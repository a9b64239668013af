package scaffold_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/sdk/internal/scaffold"
)

// sdkDir is the SDK module's directory; go test runs in sdk/internal/scaffold.
const sdkDir = "../.."

func TestDefault_NamesTheKindAndModuleAfterTheDirectory(t *testing.T) {
	o := scaffold.Default(scaffold.Options{Dir: "work/Acme-GPU/"})
	require.Equal(t, "acmegpu.hello", o.Kind)
	require.Equal(t, "example.com/acmegpu", o.Module)
	o = scaffold.Default(scaffold.Options{Dir: "acme", Kind: "acme.flash", Module: "corp.example/x/acme"})
	require.Equal(t, "acme.flash", o.Kind, "what is given is kept")
	require.Equal(t, "corp.example/x/acme", o.Module)
}

func TestFiles_TheModulesLayout(t *testing.T) {
	files, err := scaffold.Files(scaffold.Options{Dir: t.TempDir(), Kind: "acme.gpu.flash", Module: "example.com/acme"})
	require.NoError(t, err)
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	require.ElementsMatch(t, []string{"go.mod", "gpu_flash.go", "gpu_flash_test.go", "cmd/bc-kind-acme/main.go", "cmd/acme-tool/main.go", "README.md"}, paths)
	src := string(files["gpu_flash.go"])
	require.Contains(t, src, "var GpuFlashManifest = kind.Manifest{")
	require.Contains(t, src, `Kind:    "acme.gpu.flash",`)
	require.Contains(t, src, `"additionalProperties": false`, "the payload schema is closed")
	require.Contains(t, src, "APIRunnable: true")
	require.Contains(t, string(files["cmd/bc-kind-acme/main.go"]), `os.Getenv("BCD_ACME_TOOL")`)
	require.NotContains(t, string(files["go.mod"]), "replace", "no -sdk: the released SDK")
	require.Contains(t, string(files["go.mod"]), "require github.com/better-compute/commands/sdk v0.")
}

func TestFiles_RefusesWhatCannotBeAKindOrPackage(t *testing.T) {
	for _, o := range []scaffold.Options{
		{Kind: "Acme.hello", Module: "example.com/acme"},
		{Kind: "acme", Module: "example.com/acme"},
		{Kind: "acme.he-llo", Module: "example.com/acme"},
		{Kind: "acme.hello", Module: ""},
		{Kind: "acme.hello", Module: "example.com/other"},
		{Kind: "acme.hello", Module: "example.com/acme", SDKDir: t.TempDir()},
	} {
		_, err := scaffold.Files(o)
		require.Error(t, err, "%+v", o)
	}
}

// The go line of a new module is the SDK's own, so go mod tidy changes
// nothing there.
func TestGoVersion_IsTheSDKModules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(sdkDir, "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(b)
	require.NotNil(t, m)
	require.Equal(t, string(m[1]), scaffold.GoVersion)
}

func TestWrite_NeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mine.go"), []byte("package mine\n"), 0o644))
	_, err := scaffold.Write(scaffold.Options{Dir: dir, Kind: "acme.hello", Module: "example.com/acme"})
	require.ErrorIs(t, err, scaffold.ErrExists)
	b, err := os.ReadFile(filepath.Join(dir, "mine.go"))
	require.NoError(t, err)
	require.Equal(t, "package mine\n", string(b))
}

// What bc-kind new writes builds and passes its own tests as it is, the
// conformance harness among them, in a module outside this one that
// reaches the SDK through the replace -sdk writes.
func TestWrite_TheNewModulePassesItsTestsAsItIs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and tests a module of its own")
	}
	dir := filepath.Join(t.TempDir(), "acme")
	_, err := scaffold.Write(scaffold.Default(scaffold.Options{Dir: dir, SDKDir: sdkDir}))
	require.NoError(t, err)
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^replace github.com/better-compute/commands/sdk => \.\./`, string(gomod), "a relative replace")
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOWORK=off")
	for _, args := range [][]string{{"mod", "tidy"}, {"vet", "./..."}, {"test", "-race", "-count=1", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		if args[0] == "test" {
			require.Contains(t, string(out), "ok  \texample.com/acme")
		}
	}
}
