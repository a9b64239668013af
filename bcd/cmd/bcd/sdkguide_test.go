package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// guideBlocks returns docs/sdk-guide.md's fenced code blocks of language
// lang, each without its fences.
func guideBlocks(t *testing.T, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "docs", "sdk-guide.md"))
	require.NoError(t, err)
	var out []string
	var cur *strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && line == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && line == "```":
			out = append(out, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return out
}

// moduleGo is the environment for the go command of a module outside the
// repository in a test: the module cache first and the configured module
// proxy for what it lacks, no checksum database, no workspace. The proxy
// is needed on a fresh machine: the repository's own builds fetch only the
// modules they build with, while go mod tidy in the new module also wants
// the modules that the SDK's dependencies' tests import (go-plugin's
// jhump/protoreflect, jsonschema's regexp2). With GOPROXY=off the guide's
// steps failed there, and passed only on a machine whose cache an earlier
// tidy had filled.
func moduleGo() []string {
	return append(os.Environ(), "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOWORK=off")
}

func runIn(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = moduleGo()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	return string(out)
}

// Issue 12's done-when: a kind made in a module of its own, outside the
// repository's, exactly as the SDK guide's "acme plugin, whole" says (its
// files and its build steps are read from the guide and run as written),
// builds with go build against the SDK module through a replace, passes
// the conformance harness (its own go test), runs through bcd exec, and is
// upgraded to a new version under a running bcd with bcd reload.
func TestSDKGuide_AKindFromOutsideTheRepository(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and tests a module of its own")
	}
	root := t.TempDir()
	// The guide's layout: acme/ beside a checkout of the repository.
	require.NoError(t, os.Symlink(testutil.RepoRoot(t), filepath.Join(root, "commands")))
	acme := filepath.Join(root, "acme")
	files := 0
	for _, blk := range guideBlocks(t, "go") {
		first, rest, _ := strings.Cut(blk, "\n")
		path, ok := strings.CutPrefix(first, "// file: acme/")
		if !ok {
			continue
		}
		dst := filepath.Join(acme, filepath.FromSlash(path))
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.WriteFile(dst, []byte(rest), 0o644))
		files++
	}
	require.Equal(t, 3, files, "the guide's acme plugin is three files")
	var steps string
	for _, blk := range guideBlocks(t, "sh") {
		if strings.Contains(blk, "go mod init example.com/acme") && strings.Contains(blk, "go test -race ./...") {
			steps = blk
		}
	}
	require.NotEmpty(t, steps, "the guide's build steps")
	out := runIn(t, acme, "bash", "-euo", "pipefail", "-c", steps)
	require.Contains(t, out, "ok  \texample.com/acme", "the module's tests, the conformance harness among them, pass")
	gomod, err := os.ReadFile(filepath.Join(acme, "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(gomod), "github.com/better-compute/commands/sdk v0.0.0")
	require.NotContains(t, string(gomod), "github.com/jackc/pgx", "none of the control plane's dependencies")
	require.NotContains(t, string(gomod), "github.com/better-compute/commands v", "the repository's own module is not required")

	// bcd exec, as section 6 says.
	e := newEnv(t)
	try := filepath.Join(root, "try")
	for _, d := range []string{"plugins", "state"} {
		require.NoError(t, os.MkdirAll(filepath.Join(try, d), 0o755))
	}
	installFile(t, filepath.Join(acme, "bc-kind-acme"), filepath.Join(try, "plugins", "bc-kind-acme"))
	base := []string{"--plugins", filepath.Join(try, "plugins"), "--state-dir", filepath.Join(try, "state"), "--node-id", "node_try", "--boot-id-file", e.bootID}
	kinds := exec.Command(e.bin, append([]string{"kinds", "--json"}, base...)...)
	kout, err := kinds.Output()
	require.NoError(t, err, "bcd kinds exits 0")
	v1Digest := digestOf(t, kout, "acme.flash")
	ex := exec.Command(e.bin, append([]string{"exec", "acme.flash", "--payload", `{"image":"fw-1.bin","blocks":3,"blockMs":5}`}, base...)...)
	var stderr strings.Builder
	ex.Stderr = &stderr
	xout, err := ex.Output()
	require.NoError(t, err, stderr.String())
	require.Contains(t, stderr.String(), "block 1 of 3")
	require.Contains(t, stderr.String(), "SUCCEEDED")
	var res struct {
		State  string
		Result struct {
			Written int
			Version string
		}
	}
	require.NoError(t, json.Unmarshal(xout, &res), string(xout))
	require.Equal(t, "succeeded", res.State)
	require.Equal(t, 3, res.Result.Written)
	require.Equal(t, "1.0.0", res.Result.Version)

	// Upgrade it under a running bcd: raise Version, rebuild, install over
	// the old binary, bcd reload.
	e.installAs(filepath.Join(acme, "bc-kind-acme"), "bc-kind-acme")
	run := e.command("run")
	require.NoError(t, run.Start())
	defer func() { _ = run.Process.Kill(); _ = run.Wait() }()
	testutil.WaitFor(t, 60*time.Second, "bcd run to write its pid file", func() bool {
		_, err := os.Stat(filepath.Join(e.state, "bcd.pid"))
		return err == nil
	})
	src := filepath.Join(acme, "flash.go")
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.Contains(t, string(b), `Version:     "1.0.0"`)
	require.NoError(t, os.WriteFile(src, []byte(strings.Replace(string(b), `Version:     "1.0.0"`, `Version:     "1.1.0"`, 1)), 0o644))
	runIn(t, acme, "go", "build", "-o", "bc-kind-acme", "./cmd/bc-kind-acme")
	e.installAs(filepath.Join(acme, "bc-kind-acme"), "bc-kind-acme")
	rout, errs, code := e.bcd("reload", "--json")
	require.Zero(t, code, errs)
	var st reloadStatus
	require.NoError(t, json.Unmarshal([]byte(rout), &st), rout)
	require.Equal(t, []string{"bc-kind-acme"}, st.Started)
	require.Equal(t, []string{"bc-kind-acme"}, st.Retired)
	require.NotEqual(t, v1Digest, st.Kinds["acme.flash"], "bcd runs the new manifest")
	installFile(t, filepath.Join(acme, "bc-kind-acme"), filepath.Join(try, "plugins", "bc-kind-acme"))
	kout, err = exec.Command(e.bin, append([]string{"kinds", "--json"}, base...)...).Output()
	require.NoError(t, err)
	require.Equal(t, digestOf(t, kout, "acme.flash"), st.Kinds["acme.flash"], "the reloaded digest is v1.1.0's")
}

// installFile copies src to dst 0755 through a rename.
func installFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	tmp := dst + ".new"
	require.NoError(t, os.WriteFile(tmp, b, 0o755))
	require.NoError(t, os.Chmod(tmp, 0o755))
	require.NoError(t, os.Rename(tmp, dst))
}

func digestOf(t *testing.T, kindsJSON []byte, kindName string) string {
	t.Helper()
	var ms []struct {
		Kind   string `json:"kind"`
		Digest string `json:"digest"`
	}
	require.NoError(t, json.Unmarshal(kindsJSON, &ms), string(kindsJSON))
	for _, m := range ms {
		if m.Kind == kindName {
			return m.Digest
		}
	}
	t.Fatalf("%s not listed in %s", kindName, kindsJSON)
	return ""
}

// The guide shows TestConformance twice: alone, where it explains
// kindtest, and in the acme plugin, whole, which the test above builds and
// runs. The first must be the second, or a reader copies a test that was
// never run.
func TestSDKGuide_ConformanceSketchIsTheTestedOne(t *testing.T) {
	var found []string
	for _, b := range guideBlocks(t, "go") {
		i := strings.Index(b, "func TestConformance(")
		if i < 0 {
			continue
		}
		f := b[i:]
		f = f[:strings.Index(f, "\n}\n")+3]
		found = append(found, f)
	}
	require.Len(t, found, 2, "docs/sdk-guide.md shows TestConformance alone and in the whole plugin")
	require.Equal(t, found[1], found[0])
}

// The guide's excerpts of the SDK's example ("From sdk/example/…") are the
// code as it is: each Go block before the acme plugin that is not a file of
// the acme plugin is found, verbatim, in a Go file under sdk/ or in this
// test's sketch (TestConformance, compared above).
func TestSDKGuide_ExcerptsAreTheSDKsCode(t *testing.T) {
	root := testutil.RepoRoot(t)
	var sources []string
	require.NoError(t, filepath.WalkDir(filepath.Join(root, "sdk"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sources = append(sources, string(b))
		}
		return nil
	}))
	checked := 0
	for _, b := range guideBlocks(t, "go") {
		if strings.HasPrefix(b, "// file: ") || strings.HasPrefix(b, "func TestConformance(") {
			continue
		}
		found := false
		for _, src := range sources {
			found = found || strings.Contains(src, b)
		}
		require.True(t, found, "docs/sdk-guide.md shows code that no file under sdk/ holds as written:\n%s", b)
		checked++
	}
	require.GreaterOrEqual(t, checked, 5)
}
