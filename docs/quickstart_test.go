package docs_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// quickStartBlocks returns the ```sh blocks of the SDK guide's "Quick
// start" section, in order.
func quickStartBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("sdk-guide.md")
	require.NoError(t, err)
	_, sec, ok := strings.Cut(string(b), "\n## Quick start (5 minutes)\n")
	require.True(t, ok, "sdk-guide.md has a Quick start section")
	sec, _, _ = strings.Cut(sec, "\n## ")
	var out []string
	var cur *strings.Builder
	for _, l := range strings.Split(sec, "\n") {
		switch {
		case cur == nil && l == "```sh":
			cur = &strings.Builder{}
		case cur != nil && l == "```":
			out = append(out, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(l + "\n")
		}
	}
	return out
}

// lineLog collects a process's output lines and lets the test wait for one.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced at each new line
	done  bool
}

func newLineLog(r io.Reader) *lineLog {
	l := &lineLog{more: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l.mu.Lock()
			l.lines = append(l.lines, sc.Text())
			close(l.more)
			l.more = make(chan struct{})
			l.mu.Unlock()
		}
		l.mu.Lock()
		l.done = true
		close(l.more)
		l.mu.Unlock()
	}()
	return l
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// waitFor returns the first line from index from on that contains want,
// and the index after it; it fails the test at the deadline or when the
// output ends first.
func (l *lineLog) waitFor(t *testing.T, from int, want string, within time.Duration) (string, int) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		for i := from; i < len(l.lines); i++ {
			if strings.Contains(l.lines[i], want) {
				line := l.lines[i]
				l.mu.Unlock()
				return line, i + 1
			}
		}
		more, done := l.more, l.done
		l.mu.Unlock()
		if done {
			t.Fatalf("the output ended without %q:\n%s", want, l)
		}
		select {
		case <-more:
		case <-deadline.C:
			t.Fatalf("no %q within %s:\n%s", want, within, l)
		}
	}
}

// Issue 33's done-when: the SDK guide's quick start, as written (its three
// ```sh blocks: bc-kind new, scripts/kind-dev, commands run --wait), from a
// clone of this checkout's HEAD, in a directory outside the clone's module
// with the replace bc-kind new writes. The clone holds only what is
// committed: work not committed yet is not seen by this test. The dev loop
// must print ready, run the kind through bc-server and a joined bcd, pick up
// a change of the handler (rebuild, re-register, live upgrade) so that the
// same command answers with the new code, and leave nothing running after
// Ctrl-C. Each step's wall time is logged.
func TestSDKGuide_QuickStartAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the system and runs a stack")
	}
	if _, err := exec.LookPath("pg_virtualenv"); err != nil {
		t.Skip("pg_virtualenv not found: scripts/kind-dev needs a throwaway PostgreSQL (apt-get install -y postgresql postgresql-common, or scripts/install-deps demo)")
	}
	blocks := quickStartBlocks(t)
	require.Len(t, blocks, 3, "the quick start is three commands")
	require.Contains(t, blocks[0], "bc-kind new")
	require.Contains(t, blocks[1], "scripts/kind-dev")
	require.Contains(t, blocks[2], "--wait")

	repo := testutil.RepoRoot(t)
	head, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	// Not t.TempDir (0700): as root, pg_virtualenv's initdb runs as the
	// postgres user, which must reach its cluster under TMPDIR.
	top, err := os.MkdirTemp("", "sdk-quickstart-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(top) })
	require.NoError(t, os.Chmod(top, 0o755))
	tmp := filepath.Join(top, "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o755))
	env := []string{"GOFLAGS=-mod=mod", "GOSUMDB=off", "GOWORK=off", "TMPDIR=" + tmp}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOFLAGS", "GOSUMDB", "GOWORK", "TMPDIR", "BIN", "PGHOST", "PGDATABASE", "PGPORT", "PGUSER", "PGPASSWORD":
		default:
			env = append(env, kv)
		}
	}
	sh := func(script string) *exec.Cmd {
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = top, env
		return cmd
	}
	step := func(what string, start time.Time) {
		t.Logf("quick start: %s: %s", what, time.Since(start).Round(100*time.Millisecond))
	}

	start := time.Now()
	clone := filepath.Join(top, "commands")
	out, err := exec.Command("git", "clone", "-q", "--no-checkout", repo, clone).CombinedOutput()
	require.NoError(t, err, string(out))
	out, err = exec.Command("git", "-C", clone, "checkout", "-q", strings.TrimSpace(string(head))).CombinedOutput()
	require.NoError(t, err, string(out))
	step("git clone of HEAD", start)

	start = time.Now()
	out, err = sh(blocks[0]).CombinedOutput()
	require.NoError(t, err, "%s\n%s", blocks[0], out)
	require.Contains(t, string(out), "bc-kind new: acme.hello (module example.com/acme)")
	step("bc-kind new (go run, go mod tidy)", start)
	gomod, err := os.ReadFile(filepath.Join(top, "acme", "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(gomod), "replace github.com/better-compute/commands/sdk => ../commands/sdk")

	start = time.Now()
	dev := sh(blocks[1])
	dev.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild outside the group (PostgreSQL's, under pg_virtualenv)
	// may hold the output pipe: Wait must not wait for it once the dev
	// loop itself exited, or a failure hangs in the cleanup.
	dev.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	dev.Stdout, dev.Stderr = pw, pw
	require.NoError(t, dev.Start())
	exited := make(chan error, 1)
	go func() { exited <- dev.Wait(); _ = pw.Close() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(-dev.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	log := newLineLog(pr)
	export, at := log.waitFor(t, 0, "export PATH=", 10*time.Minute)
	_, at = log.waitFor(t, at, "kind-dev: ready", 2*time.Minute)
	step("kind-dev to ready (the build included)", start)

	run := func(want ...string) {
		t.Helper()
		start := time.Now()
		out, err := sh(export + "\n" + blocks[2]).CombinedOutput()
		require.NoError(t, err, "%s\n%s\nkind-dev:\n%s", blocks[2], out, log)
		for _, w := range want {
			require.Contains(t, string(out), w)
		}
		step("commands run --wait", start)
	}
	run(`result: {"greeting":"hello, world","version":"0.1.0"}`, "succeeded")

	// Change the handler: a new version, a new greeting.
	src := filepath.Join(top, "acme", "hello.go")
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	next := strings.Replace(string(b), `Version:     "0.1.0"`, `Version:     "0.2.0"`, 1)
	next = strings.Replace(next, "res.Greeting = got.Greeting", `res.Greeting = got.Greeting + "!"`, 1)
	require.NotEqual(t, string(b), next)
	require.Contains(t, next, `"0.2.0"`)
	require.Contains(t, next, `+ "!"`)
	start = time.Now()
	require.NoError(t, os.WriteFile(src, []byte(next), 0o644))
	_, at = log.waitFor(t, at, "kind-dev: upgraded: acme.hello 0.2.0", 5*time.Minute)
	step("a change to upgraded (rebuild, register, live upgrade)", start)
	run(`result: {"greeting":"hello, world!","version":"0.2.0"}`, "succeeded")

	// Ctrl-C: INT to the foreground process group, as a terminal sends it.
	start = time.Now()
	require.NoError(t, syscall.Kill(-dev.Process.Pid, syscall.SIGINT))
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("kind-dev did not stop within 2m of Ctrl-C:\n%s", log)
	}
	stopped = true
	step("Ctrl-C to stopped", start)
	log.waitFor(t, at, "kind-dev: stopped; everything it started is gone", time.Second)
	require.Equal(t, 130, dev.ProcessState.ExitCode(), log.String())
	// A child may still be on its way out (a zombie has an empty command
	// line): wait, with a deadline, for none to be left.
	var left []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if left = leftOver(t, top); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	require.Empty(t, left, "processes left running after Ctrl-C")
	ents, err := os.ReadDir(tmp)
	require.NoError(t, err)
	left = nil
	for _, e := range ents {
		left = append(left, e.Name())
	}
	require.Empty(t, left, "kind-dev, PostgreSQL and their temporary files are gone from TMPDIR")
}

// leftOver lists the processes whose command line or working directory is
// under dir: what the quick start started and did not stop.
func leftOver(t *testing.T, dir string) []string {
	t.Helper()
	pids, err := filepath.Glob("/proc/[0-9]*")
	require.NoError(t, err)
	var out []string
	for _, p := range pids {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil {
			continue // gone since the glob
		}
		cwd, _ := os.Readlink(filepath.Join(p, "cwd"))
		args := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(args, dir) || strings.HasPrefix(cwd, dir) {
			out = append(out, filepath.Base(p)+": "+args)
		}
	}
	return out
}
