package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// copySDK copies the SDK module's Go files, go.mod and go.sum (not the
// TypeScript client) to a temporary directory that a test may change.
func copySDK(t *testing.T) string {
	t.Helper()
	src := filepath.Join(testutil.RepoRoot(t), "sdk")
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == "typescript" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		// Go files, the module files and what go:embed patterns name
		// (the scaffold's templates).
		if !strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, ".tmpl") && rel != "go.mod" && rel != "go.sum" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	require.NoError(t, err)
	return dst
}

// editFile applies f to the file at p.
func editFile(t *testing.T, p string, f func(string) string) {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	out := f(string(b))
	require.NotEqual(t, string(b), out, "the edit of %s changes it", p)
	require.NoError(t, os.WriteFile(p, []byte(out), 0o644))
}

var sdkVersionDecl = regexp.MustCompile(`const SDKVersion = "[^"]*"`)

// setVersion declares v (without the v) as kind.SDKVersion in sdk.
func setVersion(t *testing.T, sdk, v string) {
	t.Helper()
	editFile(t, filepath.Join(sdk, "kind", "serve.go"), func(s string) string {
		return sdkVersionDecl.ReplaceAllString(s, `const SDKVersion = "`+v+`"`)
	})
}

// released is a copy of the SDK whose API is written as its release's
// baseline, in a directory of its own: a checker for it.
func released(t *testing.T, version string) checker {
	t.Helper()
	c := checker{sdk: copySDK(t), baseline: t.TempDir(), toolsMod: filepath.Join(testutil.RepoRoot(t), "tools", "go.mod")}
	setVersion(t, c.sdk, version)
	require.NoError(t, c.write(io.Discard))
	files, err := filepath.Glob(filepath.Join(c.baseline, "*"))
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(c.baseline, "v"+version+".apidiff")}, files)
	return c
}

// The tree's SDK is compatible with its committed release: what make
// sdk-api-check runs in make test.
func TestTheSDKIsCompatibleWithItsRelease(t *testing.T) {
	root := testutil.RepoRoot(t)
	c := checker{sdk: filepath.Join(root, "sdk"), baseline: filepath.Join(root, "internal", "tools", "sdkapi", "baseline"), toolsMod: filepath.Join(root, "tools", "go.mod")}
	require.NoError(t, c.check(io.Discard))
}

// Issue 33: the check fails on an incompatible change (an exported function
// removed: kind.NewLogger, which plugins' mains call) under the released
// version, names it, and passes once kind.SDKVersion declares a new major.
func TestCheckFailsOnARemovedFunction(t *testing.T) {
	c := released(t, "0.4.0")
	require.NoError(t, c.check(io.Discard), "unchanged, the copy is its own release")
	err := filepath.WalkDir(c.sdk, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
			b, rerr := os.ReadFile(p)
			if rerr != nil {
				return rerr
			}
			if strings.Contains(string(b), "NewLogger") {
				return os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "NewLogger", "newLogger")), 0o644)
			}
		}
		return err
	})
	require.NoError(t, err)

	err = c.check(io.Discard)
	var ie *incompatibleError
	require.True(t, errors.As(err, &ie), "an incompatible change fails: %v", err)
	require.Contains(t, ie.msg, "incompatible with its release v0.4.0")
	require.Len(t, ie.changes, 1, "%v", ie.changes)
	require.Contains(t, ie.changes[0], "NewLogger")
	require.Contains(t, ie.changes[0], "removed")

	setVersion(t, c.sdk, "0.5.0")
	require.Error(t, c.check(io.Discard), "a new minor does not allow it")
	setVersion(t, c.sdk, "1.0.0")
	require.NoError(t, c.check(io.Discard), "a new major does")
}

// An addition needs a new minor version: the same version would publish two
// APIs under one tag.
func TestCheckWantsANewMinorForAnAddition(t *testing.T) {
	c := released(t, "0.4.0")
	require.NoError(t, os.WriteFile(filepath.Join(c.sdk, "kind", "added.go"), []byte("package kind\n\n// Added is new.\nfunc Added() {}\n"), 0o644))

	err := c.check(io.Discard)
	var ie *incompatibleError
	require.True(t, errors.As(err, &ie), "an addition under the released version fails: %v", err)
	require.Contains(t, ie.msg, "grew since its release v0.4.0")
	require.Contains(t, ie.hint, "0.5.0")
	require.Contains(t, strings.Join(ie.changes, "\n"), "Added")

	setVersion(t, c.sdk, "0.5.0")
	require.NoError(t, c.check(io.Discard))
}

// A version older than the release is a mistake, whatever the API.
func TestCheckRefusesAVersionBeforeTheRelease(t *testing.T) {
	c := released(t, "0.4.0")
	setVersion(t, c.sdk, "0.3.9")
	require.ErrorContains(t, c.check(io.Discard), "older than the released API")
}
