package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// env is one node's directories and the real bcd binary and plugins.
type env struct {
	t       *testing.T
	bin     string
	plugins string
	state   string
	bootID  string
	config  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, bin: testutil.BuildBinary(t, "./bcd/cmd/bcd"), plugins: t.TempDir(), state: t.TempDir()}
	for _, pkg := range []string{"./sdk/example/cmd/bc-kind-example", "./internal/testplugins/bcdcore_plugin"} {
		src := testutil.BuildBinary(t, pkg)
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(e.plugins, filepath.Base(src)), b, 0o755))
	}
	e.bootID = filepath.Join(t.TempDir(), "boot_id")
	require.NoError(t, os.WriteFile(e.bootID, []byte("boot-a\n"), 0o600))
	e.config = filepath.Join(t.TempDir(), "bcd.yaml")
	require.NoError(t, os.WriteFile(e.config, []byte("role: node\nlanes:\n  bulk: 1\n"), 0o600))
	return e
}

func (e *env) command(args ...string) *exec.Cmd {
	full := append(append([]string{}, args...),
		"--config", e.config,
		"--plugins", e.plugins, "--state-dir", e.state, "--node-id", "node_e2e", "--boot-id-file", e.bootID)
	cmd := exec.Command(e.bin, full...)
	cmd.Dir = e.state
	return cmd
}

// bcd runs a bcd command to its end and returns stdout, stderr and the exit status.
func (e *env) bcd(args ...string) (string, string, int) {
	e.t.Helper()
	cmd := e.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(e.t, err)
	}
	return out.String(), errb.String(), code
}

type holdFiles struct {
	CountFile   string `json:"countFile"`
	StartedFile string `json:"startedFile"`
	ReleaseFile string `json:"releaseFile,omitempty"`
}

func newHold(t *testing.T) holdFiles {
	d := t.TempDir()
	return holdFiles{CountFile: filepath.Join(d, "count"), StartedFile: filepath.Join(d, "started"), ReleaseFile: filepath.Join(d, "release")}
}

func (h holdFiles) json(t *testing.T) string {
	b, err := json.Marshal(h)
	require.NoError(t, err)
	return string(b)
}

func (h holdFiles) runs(t *testing.T) int {
	b, err := os.ReadFile(h.CountFile)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

// waitStarted waits for the kind to start and returns its plugin's pid.
func (h holdFiles) waitStarted(t *testing.T) int {
	var pid int
	testutil.WaitFor(t, 60*time.Second, "the kind to start", func() bool {
		b, err := os.ReadFile(h.StartedFile)
		if err != nil || len(b) == 0 {
			return false
		}
		pid, err = strconv.Atoi(string(b))
		return err == nil
	})
	return pid
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// A zombie is dead for our purposes.
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

// killed starts `bcd exec`, waits for the kind to start, and kill -9s bcd
// mid-command. It checks the plugin does not outlive bcd.
func (e *env) killMidCommand(kindName, id string, h holdFiles) {
	e.t.Helper()
	cmd := e.command("exec", kindName, "--payload", h.json(e.t), "--id", id)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(e.t, cmd.Start())
	pluginPID := h.waitStarted(e.t)
	require.NoError(e.t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	require.Equal(e.t, syscall.SIGKILL, cmd.ProcessState.Sys().(syscall.WaitStatus).Signal(), "stderr: %s", errb.String())
	testutil.WaitFor(e.t, 30*time.Second, "the plugin to die with bcd", func() bool { return !alive(pluginPID) })
	require.NoError(e.t, os.Remove(h.StartedFile))
}

type journalDump struct {
	JournalID string           `json:"journalId"`
	Records   []journal.Record `json:"records"`
}

func (e *env) journal() journalDump {
	e.t.Helper()
	out, errs, code := e.bcd("journal", "--json")
	require.Zero(e.t, code, errs)
	var d journalDump
	require.NoError(e.t, json.Unmarshal([]byte(out), &d), out)
	return d
}

func (d journalDump) get(t *testing.T, id string) journal.Record {
	for _, r := range d.Records {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no record %s in %+v", id, d.Records)
	return journal.Record{}
}

func TestKill9_RetrySafeRunsAgainOthersFailInterrupted(t *testing.T) {
	// Issue 2, done when: "kill -9 of bcd mid-command, then a restart, reruns
	// a retry-safe command and fails a non-retry-safe one with interrupted".
	e := newEnv(t)
	once := newHold(t)
	e.killMidCommand("bcdcore.holdonce", "cmd_once", once)
	retry := newHold(t)
	// This bcd's start settles cmd_once (not retry-safe: interrupted) first.
	e.killMidCommand("bcdcore.hold", "cmd_retry", retry)
	require.NoError(t, os.WriteFile(retry.ReleaseFile, nil, 0o600))

	// Restart the daemon on the same state directory.
	run := e.command("run", "--log-json")
	stderr, err := run.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, run.Start())
	defer func() { _ = run.Process.Kill(); _ = run.Wait() }()
	finished := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["@message"] == "command finished" {
				finished <- line
			}
		}
		close(finished)
	}()
	select {
	case line := <-finished:
		require.Equal(t, "cmd_retry", line["command_id"])
		require.Equal(t, "succeeded", line["state"])
	case <-time.After(60 * time.Second):
		t.Fatal("the retry-safe command did not finish after the restart")
	}
	require.NoError(t, run.Process.Signal(syscall.SIGTERM))
	require.NoError(t, run.Wait(), "bcd run stops cleanly on SIGTERM")

	j := e.journal()
	r := j.get(t, "cmd_once")
	require.Equal(t, journal.StateFailed, r.State)
	require.Equal(t, "interrupted", r.Reason)
	require.Equal(t, 1, once.runs(t), "not run again")
	r = j.get(t, "cmd_retry")
	require.Equal(t, journal.StateSucceeded, r.State)
	require.Equal(t, 2, retry.runs(t), "run again after the crash")
	require.JSONEq(t, `{"runs":2,"released":true}`, string(r.Result))

	// A duplicate delivery now gets the stored answers.
	out, _, code := e.bcd("exec", "bcdcore.holdonce", "--payload", once.json(t), "--id", "cmd_once", "-q")
	require.Equal(t, 1, code, "failed is a non-zero exit")
	require.Contains(t, out, `"interrupted"`)
	require.Contains(t, out, `"duplicate": true`)
	require.Equal(t, 1, once.runs(t))
}

func TestExec_DuplicateReturnsTheStoredResult(t *testing.T) {
	e := newEnv(t)
	h := newHold(t)
	require.NoError(t, os.WriteFile(h.ReleaseFile, nil, 0o600))
	first, errs, code := e.bcd("exec", "bcdcore.hold", "--payload", h.json(t), "--id", "cmd_twice")
	require.Zero(t, code, errs)
	require.Contains(t, errs, "SUCCEEDED")
	second, errs, code := e.bcd("exec", "bcdcore.hold", "--payload", h.json(t), "--id", "cmd_twice")
	require.Zero(t, code, errs)
	require.Contains(t, errs, "answered from the journal")
	var a, b map[string]any
	require.NoError(t, json.Unmarshal([]byte(first), &a))
	require.NoError(t, json.Unmarshal([]byte(second), &b))
	require.Equal(t, a["resultSha256"], b["resultSha256"])
	require.Equal(t, true, b["duplicate"])
	require.Equal(t, 1, h.runs(t), "the kind ran once")
}

func TestExec_CancelWithCtrlC(t *testing.T) {
	e := newEnv(t)
	h := newHold(t)
	cmd := e.command("exec", "bcdcore.hold", "--payload", h.json(t), "--id", "cmd_ctrl_c")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	h.waitStarted(t)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	require.Error(t, err)
	require.Equal(t, 1, cmd.ProcessState.ExitCode(), errb.String())
	require.Contains(t, out.String(), `"cancelled"`)
	require.Contains(t, out.String(), `"released": false`, "the plugin's real outcome")
}

func TestExec_RefusalExitsNonZero(t *testing.T) {
	e := newEnv(t)
	out, errs, code := e.bcd("exec", "no.such", "--id", "cmd_unsupported")
	require.Equal(t, 1, code)
	require.Contains(t, out, `"rejectCode": "UNSUPPORTED"`)
	require.Contains(t, errs, "REJECTED UNSUPPORTED")
	out, _, code = e.bcd("exec", "example.noop", "--not-after", "-1s")
	require.Equal(t, 1, code)
	require.Contains(t, out, `"EXPIRED"`)
	_, _, code = e.bcd("exec")
	require.Equal(t, 2, code, "usage error")
	_, _, code = e.bcd("exec", "example.noop", "--payload", "{nope")
	require.Equal(t, 2, code)
}

func TestJournal_CorruptMeansANewJournalID(t *testing.T) {
	// Spec: "A daemon whose journal is gone (... corruption) comes back with
	// a new journal id", never a crash loop.
	e := newEnv(t)
	_, errs, code := e.bcd("exec", "example.noop", "--id", "cmd_before")
	require.Zero(t, code, errs)
	before := e.journal().JournalID
	require.NoError(t, os.WriteFile(filepath.Join(e.state, journal.FileName), []byte("garbage, not bbolt"), 0o600))
	_, errs, code = e.bcd("exec", "example.noop", "--id", "cmd_after", "--log-level", "info")
	require.Zero(t, code, errs)
	require.Contains(t, errs, "journal is corrupt")
	after := e.journal()
	require.NotEqual(t, before, after.JournalID)
	require.Len(t, after.Records, 1)
	aside, _ := filepath.Glob(filepath.Join(e.state, journal.FileName+".corrupt-*"))
	require.Len(t, aside, 1)
}

func TestKinds_ListsTheLoadedManifests(t *testing.T) {
	e := newEnv(t)
	out, errs, code := e.bcd("kinds")
	require.Zero(t, code, errs)
	require.Regexp(t, `(?m)^KIND\s+LANE\s+TIMEOUT\s+FLAGS\s+VERSION`, out)
	require.Regexp(t, `(?m)^example\.echo\s+control\s+2m0s\s+retry-safe,api\s+1\.0\.0`, out)
	require.Regexp(t, `(?m)^bcdcore\.reboot\s+control\s+2m0s\s+destructive,self-terminating`, out)
	out, _, code = e.bcd("kinds", "--json")
	require.Zero(t, code)
	var ms []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &ms))
	kinds := map[string]bool{}
	for _, m := range ms {
		kinds[m["kind"].(string)] = true
		require.Len(t, m["digest"], 64, "every kind lists its manifest digest")
	}
	for _, k := range []string{"example.echo", "example.noop", "bcdcore.hold", "bcdcore.holdonce", "bcdcore.reboot", "bcdcore.bulk"} {
		require.True(t, kinds[k], "bcd kinds --json lists %s", k)
	}
}

func TestVersionAndHelp(t *testing.T) {
	e := newEnv(t)
	out, _, code := e.bcd("--version")
	require.Zero(t, code)
	require.True(t, strings.HasPrefix(out, "bcd "))
	cmd := exec.Command(e.bin, "--help")
	b, err := cmd.Output()
	require.NoError(t, err)
	require.Contains(t, string(b), "bcd exec KIND")
}

// docs/cli.md names every config flag that `bcd run --help` lists ("Every
// command takes the config flags"), so none is undocumented.
func TestCLIReferenceNamesEveryConfigFlag(t *testing.T) {
	e := newEnv(t)
	stdout, stderr, code := e.bcd("run", "--help")
	require.Zero(t, code)
	out := stdout + stderr
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	const intro = "Every command takes the config flags"
	i := strings.Index(string(doc), intro)
	require.GreaterOrEqual(t, i, 0, "docs/cli.md has %q", intro)
	para := string(doc)[i:]
	para = para[:strings.Index(para, "\n\n")]
	flags := regexp.MustCompile(`--[a-z][a-z0-9-]+`).FindAllString(out, -1)
	require.NotEmpty(t, flags)
	for _, f := range flags {
		if f == "--help" {
			continue
		}
		require.Regexp(t, "[`/]"+regexp.QuoteMeta(f)+"[` ]", para, "docs/cli.md's config flags paragraph names %s", f)
	}
}

func TestJoin_NeedsTokenServerAndCAFile(t *testing.T) {
	e := newEnv(t)
	_, errs, code := e.bcd("join", "--token", "t")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "--token, --server and --ca-file")
	_, errs, code = e.bcd("join", "--token", "t", "--server", "127.0.0.1:1", "--ca-file", filepath.Join(t.TempDir(), "missing.pem"))
	require.Equal(t, 2, code)
	require.Contains(t, errs, "--ca-file")
}

func TestRun_ControlPlaneWithoutJoinIsRefused(t *testing.T) {
	e := newEnv(t)
	_, errs, code := e.bcd("run", "--control-plane", "127.0.0.1:7444")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "run bcd join first")
}

// docs/cli.md's refusal example, run as written: the outcome it shows
// (the command id aside) and its exit status.
func TestCLIReferenceRefusalExampleRunsAsWritten(t *testing.T) {
	e := newEnv(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	const intro = "A refusal:\n\n```text\n"
	i := strings.Index(string(doc), intro)
	require.GreaterOrEqual(t, i, 0, "docs/cli.md has %q", intro)
	block := string(doc)[i+len(intro):]
	block = block[:strings.Index(block, "```")]
	lines := strings.Split(block, "\n")
	require.True(t, strings.HasPrefix(lines[0], "$ bcd exec "), lines[0])
	args := strings.Fields(strings.TrimPrefix(lines[0], "$ bcd "))
	start, end := strings.Index(block, "\n{"), strings.Index(block, "\n}")
	require.True(t, start >= 0 && end > start, block)
	var want map[string]any
	require.NoError(t, json.Unmarshal([]byte(block[start:end+2]), &want))
	wantCode := strings.TrimSpace(block[strings.Index(block, "$ echo $?")+len("$ echo $?"):])

	// The example's ./plugins and ./state, in a directory of their own.
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "plugins"), 0o755))
	// An empty config file in place of the default /etc/bcd/bcd.yaml, so
	// that a host's own bcd.yaml cannot change the outcome.
	empty := filepath.Join(dir, "bcd.yaml")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	cmd := exec.Command(e.bin, append(args, "--config", empty)...)
	cmd.Dir = dir
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err = cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	require.Equal(t, wantCode, strconv.Itoa(code), "the exit status docs/cli.md shows")
	var got map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), stdout.String())
	require.Regexp(t, `^cmd_local_`, got["commandId"])
	got["commandId"], want["commandId"] = "", ""
	require.Equal(t, want, got, "docs/cli.md's refusal outcome")
}
