package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/sdk/kind"
)

// guideBlock is the one block of lang in the SDK guide that has every one
// of has and none of hasNot.
func guideBlock(t *testing.T, lang string, has []string, hasNot ...string) string {
	t.Helper()
	var found []string
	for _, b := range guideBlocks(t, lang) {
		ok := true
		for _, h := range has {
			ok = ok && strings.Contains(b, h)
		}
		for _, h := range hasNot {
			ok = ok && !strings.Contains(b, h)
		}
		if ok {
			found = append(found, b)
		}
	}
	require.Len(t, found, 1, "the guide's %s block with %q", lang, has)
	return found[0]
}

// pluginBesideACheckout is a module directory acme/ beside commands/, a
// link to this checkout, as the guide lays them out, holding a main that
// serves through the SDK.
func pluginBesideACheckout(t *testing.T) (acme string) {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.Symlink(testutil.RepoRoot(t), filepath.Join(root, "commands")))
	acme = filepath.Join(root, "acme")
	require.NoError(t, os.MkdirAll(acme, 0o755))
	main := "package main\n\nimport \"github.com/better-compute/commands/sdk/kind\"\n\nfunc main() { kind.Serve() }\n"
	require.NoError(t, os.WriteFile(filepath.Join(acme, "main.go"), []byte(main), 0o644))
	return acme
}

// runSteps runs a guide's sh block in dir with env, and returns its output
// and whether it succeeded.
func runSteps(t *testing.T, dir string, env []string, steps string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", steps)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// taggedRepository is a git repository holding this tree's SDK, tagged
// sdk/v<version> as a release is, and the go command's environment in
// which github.com/better-compute/commands is that repository: git's
// insteadOf points the URL the go command fetches at it, the other modules
// come from this machine's module cache (then the configured proxy), and a
// module cache of its own keeps the tagged copy out of the real one.
func taggedRepository(t *testing.T, version string) []string {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "commands")
	src := filepath.Join(testutil.RepoRoot(t), "sdk")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(repo, "sdk", rel)
		if d.IsDir() {
			if rel == "typescript" {
				return filepath.SkipDir
			}
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	require.NoError(t, err)
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=release", "-c", "user.email=release@example.com"}, args...)...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "release")
	git("tag", "sdk/v"+version)

	cache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	require.NoError(t, err)
	proxy, err := exec.Command("go", "env", "GOPROXY").Output()
	require.NoError(t, err)
	return append(moduleGo(),
		"GOMODCACHE="+filepath.Join(t.TempDir(), "modcache"),
		"GOFLAGS=-mod=mod -modcacherw",
		"GOPROXY=file://"+filepath.Join(strings.TrimSpace(string(cache)), "cache", "download")+","+strings.TrimSpace(string(proxy)),
		"GONOPROXY=github.com/better-compute", "GONOSUMDB=github.com/better-compute",
		"GIT_CONFIG_COUNT=1",
		"GIT_CONFIG_KEY_0=url.file://"+repo+".insteadOf",
		"GIT_CONFIG_VALUE_0=https://github.com/better-compute/commands",
	)
}

// Issue 33: section 1's "Depend on the SDK", as written. Today's replace
// onto a checkout builds; then, with the release the guide names tagged
// sdk/vX.Y.Z (in a repository standing in for the real one), its go get
// resolves the tag and the plugin builds on the released module.
func TestSDKGuide_DependOnTheSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own")
	}
	acme := pluginBesideACheckout(t)
	today := guideBlock(t, "sh", []string{"go mod init example.com/acme", "-replace=github.com/better-compute/commands/sdk=../commands/sdk"}, "go build", "-droprequire")
	out, err := runSteps(t, acme, moduleGo(), today)
	require.NoError(t, err, out)
	runIn(t, acme, "go", "build", "-o", "bc-kind-acme", ".")

	// A new plugin on the release, and the checkout's plugin moved to it.
	tagged := taggedRepository(t, kind.SDKVersion)
	fresh := pluginBesideACheckout(t)
	start := guideBlock(t, "sh", []string{"go get github.com/better-compute/commands/sdk@v"})
	move := guideBlock(t, "sh", []string{"-dropreplace=github.com/better-compute/commands/sdk \\", "go mod tidy"})
	for _, c := range []struct{ dir, steps string }{{fresh, start}, {acme, move}} {
		require.Contains(t, c.steps, "@v"+kind.SDKVersion+"\n", "the guide names the release this tree declares (kind.SDKVersion)")
		out, err = runSteps(t, c.dir, tagged, c.steps)
		require.NoError(t, err, out)
		gomod, err := os.ReadFile(filepath.Join(c.dir, "go.mod"))
		require.NoError(t, err)
		require.Contains(t, string(gomod), "github.com/better-compute/commands/sdk v"+kind.SDKVersion)
		require.NotContains(t, string(gomod), "replace", "the released module, not the checkout")
		// Every import resolves, from the tagged module (a build would
		// compile gRPC again in a module cache of its own: a minute).
		cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", ".")
		cmd.Dir, cmd.Env = c.dir, tagged
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", b)
		require.Contains(t, string(b), "github.com/better-compute/commands/sdk v"+kind.SDKVersion+"\n")
	}
}

// Issue 33: a plugin written against the root module (a require and a
// replace of github.com/better-compute/commands) fails on today's checkout
// with the error the guide quotes, and the guide's go mod edit lines fix it.
func TestSDKGuide_MigrationFromTheRootModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own")
	}
	acme := pluginBesideACheckout(t)
	runIn(t, acme, "go", "mod", "init", "example.com/acme")
	runIn(t, acme, "go", "mod", "edit", "-require=github.com/better-compute/commands@v0.0.0", "-replace=github.com/better-compute/commands=../commands")

	quoted := guideBlock(t, "text", []string{"github.com/better-compute/commands/sdk@v0.0.0: reading"})
	// The proxy (its URL, and its answer after the zip's: 404, 410, 403)
	// is this machine's; the rest is the go command's.
	want, _, ok := strings.Cut(quoted, "reading https://")
	require.True(t, ok, quoted)
	cmd := exec.Command("go", "mod", "tidy")
	cmd.Dir = acme
	cmd.Env = moduleGo()
	got, err := cmd.CombinedOutput()
	require.Error(t, err, "the old layout no longer builds: %s", got)
	require.Contains(t, string(got), want+"reading ", "the guide quotes the error")
	require.Contains(t, string(got), "github.com/better-compute/commands/sdk/@v/v0.0.0.zip: ")

	fix := guideBlock(t, "sh", []string{"-droprequire=github.com/better-compute/commands "})
	out, err := runSteps(t, acme, moduleGo(), fix)
	require.NoError(t, err, out)
	runIn(t, acme, "go", "build", "-o", "bc-kind-acme", ".")
	gomod, err := os.ReadFile(filepath.Join(acme, "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(gomod), "github.com/better-compute/commands/sdk v0.0.0")
	require.NotContains(t, string(gomod), "github.com/better-compute/commands v", "the root module is no longer required")
}
