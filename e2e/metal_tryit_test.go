package e2e

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
)

// procedureBlock returns the sh block after <!-- procedure: marker --> in
// the markdown file, as written.
func procedureBlock(t *testing.T, file, marker string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(b))
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
	t.Fatalf("no procedure %q in %s", marker, file)
	return ""
}

// toolPath puts the binaries, under the names the docs use, in a directory
// and returns a PATH that starts with it.
func toolPath(t *testing.T, bins map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range bins {
		require.NoError(t, os.Symlink(src, filepath.Join(dir, name)))
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// runProcedure runs a docs procedure with bash -e, in a process group of
// its own (its background jobs are killed with it at the end), and returns
// its output.
func runProcedure(t *testing.T, script string, env []string, timeout time.Duration) string {
	t.Helper()
	return runProcedureIn(t, "", script, env, timeout)
}

// runProcedureIn is runProcedure in directory dir ("" for the test's).
func runProcedureIn(t *testing.T, dir, script string, env []string, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Env, cmd.Dir = env, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	require.NoError(t, err, "the procedure as written:\n%s\noutput:\n%s", script, out.String())
	return out.String()
}

// Issue 35: "docs/metal.md … get[s] a 'try it on one machine' procedure that
// a test runs as written". The block runs with bash -e against a real
// bc-server with the metal kinds, with bc-fake-bmc, bcd and better-compute
// as binaries on PATH and bc-kind-bmc in $PLUGINS: a site agent of its own
// joins, metal power turns fake-r1 (Redfish) and fake-i1 (IPMI) off, and
// the fake's power file shows it.
func TestE2E_MetalTryItProcedure(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) { metalKinds(t, cfg) })
	plugins := t.TempDir()
	// bcd refuses a plugin that is a symlink out of its directory.
	installPlugin(t, testutil.BuildBinary(t, "./plugins/bmc/cmd/bc-kind-bmc"), filepath.Join(plugins, "bc-kind-bmc"))
	path := toolPath(t, map[string]string{
		"bcd":            c.bcd,
		"better-compute": testutil.BuildBinary(t, "./controlplane/cmd/better-compute"),
		"bc-fake-bmc":    testutil.BuildBinary(t, "./internal/tools/bc-fake-bmc"),
	})
	conf := filepath.Join(t.TempDir(), "bc.yaml")
	require.NoError(t, os.WriteFile(conf, nil, 0o600))
	tmp := t.TempDir()
	t.Cleanup(func() { dumpLogs(t, tmp) })
	env := []string{"PATH=" + path, "HOME=" + t.TempDir(), "TMPDIR=" + tmp,
		"BC_ENDPOINT=http://" + c.srv.GRPC, "BC_TOKEN=" + servertest.TokAdmin, "BC_TENANT=" + servertest.TenantA, "BC_CONFIG=" + conf,
		"GATEWAY=" + c.srv.Gateway, "NODE_CA=" + filepath.Join(c.srv.CADir, "ca.pem"), "PLUGINS=" + plugins}
	script := procedureBlock(t, filepath.Join("..", "docs", "metal.md"), "try-metal")
	out := runProcedure(t, script, env, 3*time.Minute)
	require.Contains(t, out, "fake-r1 Off\nfake-r2 On\nfake-i1 Off\n", out)
	require.Contains(t, out, "joined as node_try_site (role site)")
}

// dumpLogs shows the *.log files a failed procedure left under dir.
func dumpLogs(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".log") {
			b, _ := os.ReadFile(p)
			if len(b) > 32<<10 {
				b = b[len(b)-32<<10:]
			}
			t.Logf("%s:\n%s", filepath.Base(p), b)
		}
		return nil
	})
}
