// Package scripts_test checks the scripts and the documents that a newcomer
// reads first, as `make test` runs them: that the README's two commands
// install what they need, and that nothing names a script or a path that a
// clone does not have.
package scripts_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository root; go test runs in scripts/.
const root = ".."

// fakeBin is a world-readable directory of stand-ins for the tools
// install-deps looks for, with a copy of the script, so that it runs with a
// PATH of this directory only and, when the test is root, as nobody too.
func fakeBin(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "install-deps-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	b, err := os.ReadFile(filepath.Join(root, "scripts", "install-deps"))
	require.NoError(t, err, "scripts/install-deps is what make test and make demo call first")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "install-deps"), b, 0o755))
	return dir
}

// runDeps runs install-deps ARGS with PATH=dir (and as nobody when asNobody).
func runDeps(t *testing.T, dir string, asNobody bool, args ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	cmd := exec.Command(bash, append([]string{filepath.Join(dir, "install-deps")}, args...)...)
	cmd.Env = []string{"PATH=" + dir, "HOME=" + dir}
	if asNobody {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), code
}

// Not root, on a fresh machine: install-deps names the one command to run
// and fails, before anything starts.
func TestInstallDepsPrintsTheCommandWhenNotRoot(t *testing.T) {
	dir := fakeBin(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "apt-get"), []byte("#!/bin/sh\necho apt-get must not run >&2\nexit 99\n"), 0o755))
	out, code := runDeps(t, dir, os.Geteuid() == 0, "demo")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "pg_virtualenv dbus-daemon not found")
	require.Contains(t, out, "sudo apt-get install -y postgresql postgresql-common dbus-daemon")
	require.NotContains(t, out, "apt-get must not run")
}

// As root, on a fresh machine: install-deps installs PostgreSQL and
// dbus-daemon with apt-get, as .ci/run did, and checks they arrived.
func TestInstallDepsInstallsWithAptGetAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the install path runs as root only")
	}
	dir := fakeBin(t)
	calls := filepath.Join(dir, "apt-get.calls")
	chmod, err := exec.LookPath("chmod")
	require.NoError(t, err)
	// The stand-in records its arguments and, on install, puts the
	// commands the packages provide on the PATH.
	fake := `#!/bin/sh
echo "$*" >>` + calls + `
if [ "$1" != update ]; then
  for c in pg_virtualenv dbus-daemon; do printf '#!/bin/sh\n' >` + dir + `/$c; ` + chmod + ` 755 ` + dir + `/$c; done
fi
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "apt-get"), []byte(fake), 0o755))
	out, code := runDeps(t, dir, false, "demo")
	require.Equal(t, 0, code, out)
	b, err := os.ReadFile(calls)
	require.NoError(t, err)
	require.Equal(t, "update -qq\ninstall -y -qq --no-install-recommends postgresql postgresql-common dbus-daemon\n", string(b))

	// Everything there now: nothing runs, nothing prints.
	require.NoError(t, os.Remove(calls))
	out, code = runDeps(t, dir, false, "demo")
	require.Equal(t, 0, code, out)
	require.Empty(t, out)
	require.NoFileExists(t, calls)
}

// make test with the caller's PostgreSQL (PG* set) needs no pg_virtualenv.
func TestInstallDepsForTestWithTheCallersPostgres(t *testing.T) {
	dir := fakeBin(t)
	for _, c := range []string{"dbus-daemon", "chromium", "jq"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, c), []byte("#!/bin/sh\n"), 0o755))
	}
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	cmd := exec.Command(bash, filepath.Join(dir, "install-deps"), "test")
	cmd.Env = []string{"PATH=" + dir, "PGHOST=db.example"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, string(out))
}

// The README's two commands run install-deps before anything else they do.
func TestMakeTestAndDemoInstallFirst(t *testing.T) {
	for _, target := range []string{"test", "demo"} {
		cmd := exec.Command("make", "--no-print-directory", "-n", target)
		cmd.Dir = root
		// Run from make test, the outer make's settings must not reach
		// this one.
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" && k != "MAKEOVERRIDES" {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		first, _, _ := strings.Cut(string(out), "\n")
		require.Equal(t, "scripts/install-deps "+target, first, "make %s starts with the set-up", target)
	}
}

// docs lists the documents a newcomer reads: the README and docs/.
func docs(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	require.NoError(t, err)
	return files
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)#\s]+)`)
	codeSpan  = regexp.MustCompile("`([^`\\s]+)`")
	scriptRef = regexp.MustCompile(`(?:^|[\s"'(` + "`" + `/.])(scripts/[A-Za-z0-9_-]+(?:/[A-Za-z0-9_.-]+)?)`)
)

// A clone has only the repository: no document points outside it (the
// README used to name ../shared/spec/commands.md), and every relative link
// resolves to a file that is there.
func TestDocumentsNameNoPathOutsideTheRepository(t *testing.T) {
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	for _, f := range docs(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var refs []string
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(m[1], "://") && !strings.HasPrefix(m[1], "mailto:") {
				refs = append(refs, m[1])
			}
		}
		for _, m := range codeSpan.FindAllStringSubmatch(string(b), -1) {
			if strings.HasPrefix(m[1], "../") {
				refs = append(refs, m[1])
			}
		}
		for _, ref := range refs {
			p, err := filepath.Abs(filepath.Join(filepath.Dir(f), ref))
			require.NoError(t, err)
			require.True(t, p == abs || strings.HasPrefix(p, abs+string(filepath.Separator)),
				"%s names %s, outside the repository: a clone does not have it", f, ref)
			require.FileExists(t, p, "%s links to %s", f, ref)
		}
	}
}

// Every scripts/NAME that a script, the Makefile, CI or a document names
// exists, and local-stack.sh's callers are the scripts that source it (it
// used to name a run-local script that does not exist).
func TestEveryNamedScriptExists(t *testing.T) {
	files := append(docs(t), filepath.Join(root, "Makefile"), filepath.Join(root, ".ci", "run"))
	scripts, err := filepath.Glob(filepath.Join(root, "scripts", "*"))
	require.NoError(t, err)
	libs, err := filepath.Glob(filepath.Join(root, "scripts", "lib", "*"))
	require.NoError(t, err)
	files = append(files, scripts...)
	files = append(files, libs...)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if st, err := os.Stat(f); err != nil || st.IsDir() {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range scriptRef.FindAllStringSubmatch(string(b), -1) {
			require.FileExists(t, filepath.Join(root, strings.TrimRight(m[1], ".")), "%s names %s", f, m[1])
		}
	}

	// The ls_name values local-stack.sh documents are the ones its callers set.
	callers := map[string]bool{}
	for _, f := range scripts {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, m := range regexp.MustCompile(`(?m)^ls_name=(\S+)`).FindAllStringSubmatch(string(b), -1) {
			callers[m[1]] = true
		}
	}
	require.NotEmpty(t, callers)
	lib, err := os.ReadFile(filepath.Join(root, "scripts", "lib", "local-stack.sh"))
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^#\s+ls_name\s.*$`).Find(lib)
	require.NotNil(t, line, "local-stack.sh documents ls_name")
	for _, m := range regexp.MustCompile(`"([^"]+)"`).FindAllSubmatch(line, -1) {
		require.True(t, callers[string(m[1])], "local-stack.sh names the caller %q, which no script is", m[1])
	}
}
