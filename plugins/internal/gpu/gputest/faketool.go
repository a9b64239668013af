package gputest

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
// arguments, or else from the first glob pattern they match, records every
// invocation, and for a hang starts a child and waits, so a timeout must
// kill the whole process group to end it.
const fakeScript = `#!/bin/sh
d="$(dirname "$0")/r"
printf '%s\n' "$*" >> "$d/../calls.log"
key=$(printf '%s' "$*" | md5sum | cut -c1-32)
if [ ! -f "$d/$key.exit" ] && [ ! -f "$d/$key.hang" ]; then
  for g in "$d"/*.glob; do
    [ -f "$g" ] || continue
    case "$*" in
      $(cat "$g")) key=$(basename "$g" .glob); break ;;
    esac
  done
fi
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
// that answers scripted invocations and records them. An answer scripted
// for the exact arguments wins over one scripted for a pattern.
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

func key(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func (f *FakeTool) write(k, ext, content string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "r", k+"."+ext), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *FakeTool) remove(k, ext string) {
	f.t.Helper()
	if err := os.Remove(filepath.Join(f.dir, "r", k+"."+ext)); err != nil && !os.IsNotExist(err) {
		f.t.Fatal(err)
	}
}

// On scripts the answer to args (space-joined as the tool receives them):
// stdout and the exit status.
func (f *FakeTool) On(args, stdout string, exit int) *FakeTool {
	f.t.Helper()
	return f.answer(key(args), stdout, "", exit)
}

// OnErr scripts stderr as well.
func (f *FakeTool) OnErr(args, stdout, stderr string, exit int) *FakeTool {
	f.t.Helper()
	return f.answer(key(args), stdout, stderr, exit)
}

// OnMatching scripts the answer to every invocation whose space-joined
// arguments match the shell pattern (case's glob: "*--query-gpu=*").
func (f *FakeTool) OnMatching(pattern, stdout string, exit int) *FakeTool {
	f.t.Helper()
	k := "g" + key(pattern)
	f.write(k, "glob", pattern)
	return f.answer(k, stdout, "", exit)
}

func (f *FakeTool) answer(k, stdout, stderr string, exit int) *FakeTool {
	f.t.Helper()
	f.write(k, "out", stdout)
	f.write(k, "exit", strconv.Itoa(exit))
	if stderr != "" {
		f.write(k, "err", stderr)
	} else {
		f.remove(k, "err")
	}
	f.remove(k, "hang")
	return f
}

// Hang makes args hang (with a child process) until killed.
func (f *FakeTool) Hang(args string) *FakeTool {
	f.t.Helper()
	f.write(key(args), "hang", "")
	return f
}

// HangMatching makes every invocation matching the pattern hang.
func (f *FakeTool) HangMatching(pattern string) *FakeTool {
	f.t.Helper()
	k := "g" + key(pattern)
	f.write(k, "glob", pattern)
	f.write(k, "hang", "")
	return f
}

// Calls are the invocations so far, in order; nil when it never ran.
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
