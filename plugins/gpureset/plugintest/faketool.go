// Package plugintest holds what the GPU kind tests share: fake nvidia-smi
// and dcgmi executables that answer scripted invocations and record them.
// The plugins themselves run out of process under sdk/kindtest.
package plugintest

import (
	"crypto/md5"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// fakeScript answers each invocation from files named by the MD5 of its
// arguments, records every invocation, and for a hang starts a child and
// waits, so a timeout must kill the whole process group to end it.
const fakeScript = `#!/bin/sh
d="$(dirname "$0")/r"
printf '%s\n' "$*" >> "$d/../calls.log"
key=$(printf '%s' "$*" | md5sum | cut -c1-32)
if [ -f "$d/$key.hang" ]; then
  sleep 1000 &
  echo $! > "$d/../hang-child.pid"
  wait
fi
[ -f "$d/$key.out" ] && cat "$d/$key.out"
[ -f "$d/$key.err" ] && cat "$d/$key.err" >&2
if [ -f "$d/$key.exit" ]; then exit "$(cat "$d/$key.exit")"; fi
if [ ! -f "$d/$key.out" ]; then echo "fake tool: no answer scripted for: $*" >&2; exit 2; fi
exit 0
`

// FakeTool is an executable the test writes (a fake nvidia-smi or dcgmi)
// that answers scripted invocations and records them.
type FakeTool struct {
	t   testing.TB
	dir string
	// Path is the executable.
	Path string
}

// NewFakeTool writes a fake tool named name into a temp dir. Write it
// before starting parallel work: exec of a file just written can fail with
// ETXTBSY while another goroutine forks.
func NewFakeTool(t testing.TB, name string) *FakeTool {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "r"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(fakeScript), 0o755); err != nil {
		t.Fatal(err)
	}
	return &FakeTool{t: t, dir: dir, Path: path}
}

// Dir is the directory holding the tool, for PATH.
func (f *FakeTool) Dir() string { return f.dir }

func (f *FakeTool) file(args, ext string) string {
	sum := md5.Sum([]byte(args))
	return filepath.Join(f.dir, "r", hex.EncodeToString(sum[:])+"."+ext)
}

func (f *FakeTool) write(args, ext, content string) {
	f.t.Helper()
	if err := os.WriteFile(f.file(args, ext), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// On scripts the answer to args (space-joined as the tool receives them):
// stdout and the exit status.
func (f *FakeTool) On(args, stdout string, exit int) *FakeTool {
	f.t.Helper()
	f.write(args, "out", stdout)
	f.write(args, "exit", strconv.Itoa(exit))
	return f
}

// OnErr scripts stderr as well.
func (f *FakeTool) OnErr(args, stdout, stderr string, exit int) *FakeTool {
	f.t.Helper()
	f.On(args, stdout, exit)
	f.write(args, "err", stderr)
	return f
}

// Hang makes args hang (with a child process) until killed.
func (f *FakeTool) Hang(args string) *FakeTool {
	f.t.Helper()
	f.write(args, "hang", "")
	return f
}

// Calls are the invocations so far, in order.
func (f *FakeTool) Calls() []string {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "calls.log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// HangChild is the pid of the child a hang started, 0 when none did.
func (f *FakeTool) HangChild() int {
	b, err := os.ReadFile(filepath.Join(f.dir, "hang-child.pid"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// Gone reports whether pid no longer runs (exited, or a zombie awaiting its
// reaper).
func Gone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return true
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// The state follows the ")" that closes the command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}
