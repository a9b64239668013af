// Package sdktest holds what the SDK module's tests share: building a main
// package of the module into a binary, and waiting on an event with a
// deadline. It mirrors the repository's internal/testutil, which the SDK
// module cannot import (the SDK links nothing outside itself).
package sdktest

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

// ModuleRoot returns the SDK module's root (the directory holding its go.mod).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate sdktest source")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BuildBinary builds the main package pkg (relative to the SDK module's
// root, such as "./example/cmd/bc-kind-example") once per test process and
// returns the binary's path.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	buildLock.Lock()
	defer buildLock.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "bc-sdk-testbin-")
		if err != nil {
			t.Fatalf("temp dir: %v", err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "_"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = ModuleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
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

// WaitFor polls cond until it holds or the deadline passes: wait on an
// observable event with a deadline, never sleep a fixed time.
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
