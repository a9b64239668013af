// Package testutil holds helpers that tests across the repository share.
package testutil

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildLock sync.Mutex
	built     = map[string]string{}
	buildDir  string
)

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate testutil source")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BuildBinary builds the Go main package pkg (a path relative to the
// repository root, such as "./sdk/example/cmd/bc-kind-example") once per test
// process and returns the binary's path. A package under ./sdk/ is built in
// the SDK's own module. Tests run real subprocesses built
// from the tree, never stand-ins.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	return build(t, pkg, "")
}

// BuildVersion builds the main package pkg with its main.version variable
// set to version (-ldflags -X), once per test process: one plugin in
// several versions, for upgrade tests.
func BuildVersion(t testing.TB, pkg, version string) string {
	t.Helper()
	return build(t, pkg, version)
}

// BuildLDFlags builds the main package pkg with ldflags (-X settings of
// internal/version or internal/testhook), once per test process per tag:
// several builds of bcd that differ only in version or test hook.
func BuildLDFlags(t testing.TB, pkg, tag, ldflags string) string {
	t.Helper()
	return buildWith(t, pkg, tag, ldflags)
}

func build(t testing.TB, pkg, version string) string {
	t.Helper()
	if version == "" {
		return buildWith(t, pkg, "", "")
	}
	return buildWith(t, pkg, version, "-X main.version="+version)
}

func buildWith(t testing.TB, pkg, version, ldflags string) string {
	t.Helper()
	buildLock.Lock()
	defer buildLock.Unlock()
	key := pkg + "@" + version
	if p, ok := built[key]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "bc-testbin-")
		if err != nil {
			t.Fatalf("temp dir: %v", err)
		}
		buildDir = d
	}
	name := strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "_")
	args := []string{"build"}
	if version != "" {
		name += "-" + version
		args = append(args, "-ldflags", ldflags)
	}
	out := filepath.Join(buildDir, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, target := RepoRoot(t), pkg
	if rest, ok := strings.CutPrefix(pkg, "./sdk/"); ok {
		// The SDK is its own module: build its packages from its root, so
		// that it works with the workspace (go.work) and without it.
		dir, target = filepath.Join(dir, "sdk"), "./"+rest
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, target)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[key] = out
	return out
}

// CleanupBuilds removes the binaries built by BuildBinary; call it from TestMain.
func CleanupBuilds() {
	buildLock.Lock()
	defer buildLock.Unlock()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
		buildDir = ""
		built = map[string]string{}
	}
}

// WaitFor polls cond until it holds or the deadline passes. Use it to wait on
// an observable event with a deadline, never to sleep a fixed time.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
