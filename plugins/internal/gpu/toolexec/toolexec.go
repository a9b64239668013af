// Package toolexec runs the GPU tools (nvidia-smi, dcgmi) under a timeout
// that kills the tool's whole process group. A hung GPU firmware (XID 119,
// a GSP RPC timeout) also hangs nvidia-smi, and a tool may fork helpers: a
// kill of the direct child alone would leave them running, holding the GPU
// and the output pipes, after the call returned.
package toolexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// DefaultTimeout bounds one tool run when the caller sets none.
const DefaultTimeout = 30 * time.Second

// MaxOutputBytes caps what is kept of a tool's stdout and of its stderr.
const MaxOutputBytes = 8 << 20

// ErrTimeout is wrapped by Run's error when the tool ran past its timeout and
// its process group was killed.
var ErrTimeout = errors.New("tool timed out and was killed")

// ErrNotFound is wrapped by Run's error when the tool is not installed.
var ErrNotFound = errors.New("tool not found")

// Result is a finished run.
type Result struct {
	// Stdout and Stderr are the tool's output, each capped at MaxOutputBytes.
	Stdout []byte
	Stderr []byte
	// ExitCode is the exit status; -1 when the tool was killed or never ran.
	ExitCode int
	// Duration is how long the run took.
	Duration time.Duration
}

// Run runs path with args and waits at most timeout (DefaultTimeout when
// zero). A non-zero exit is not an error: the caller reads ExitCode (and
// nvidia-smi's exit codes mean things). The error is for a tool that could not
// start (wrapping ErrNotFound when it is missing), or that was killed by the
// timeout (wrapping ErrTimeout) or by ctx; the partial output comes back
// with it. When Run returns, no process of the tool's group is left.
func Run(ctx context.Context, timeout time.Duration, path string, args ...string) (Result, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var stdout, stderr capped
	stdout.limit, stderr.limit = MaxOutputBytes, MaxOutputBytes
	cmd := exec.CommandContext(runCtx, path, args...)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// A group of its own, so that the kill reaches every process the tool
	// forked, and a terminal's signals do not reach the tool.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return killGroup(cmd)
	}
	// Once the group is killed, do not wait for a straggler that escaped it
	// (setsid) to close the pipes.
	cmd.WaitDelay = 2 * time.Second

	start := time.Now()
	err := cmd.Run()
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: -1, Duration: time.Since(start)}
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	// The leader may have exited on its own while children of its group
	// live on (a shell that backgrounded a helper): kill them too. The
	// kernel does not reuse a pid as a process group id while that group
	// has a member, so this reaches only the tool's stragglers (or, with
	// none left, nobody: ESRCH).
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err == nil {
		return res, nil
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, syscall.ENOENT) {
		return res, fmt.Errorf("running %s: %w: %w", path, ErrNotFound, err)
	}
	if runCtx.Err() != nil {
		if ctx.Err() != nil {
			return res, fmt.Errorf("running %s: %w", path, ctx.Err())
		}
		res.ExitCode = -1
		return res, fmt.Errorf("running %s: %w after %s", path, ErrTimeout, timeout)
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return res, nil
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		return res, nil
	}
	return res, fmt.Errorf("running %s: %w", path, err)
}

// killGroup sends SIGKILL to the tool's process group: the pgid is the
// leader's pid because of Setpgid.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing process group %d: %w", cmd.Process.Pid, err)
	}
	return nil
}

// capped is a bytes.Buffer that drops what goes past its limit, so a tool
// that floods its output cannot exhaust the plugin's memory.
type capped struct {
	bytes.Buffer
	limit int
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.limit - c.Len()
	if room > 0 {
		if len(p) <= room {
			c.Buffer.Write(p)
		} else {
			c.Buffer.Write(p[:room])
		}
	}
	return len(p), nil
}

// Tool is one executable (nvidia-smi, dcgmi) and the timeout of each run.
type Tool struct {
	// Path is the executable, a name looked up on PATH or an absolute path.
	Path string
	// Timeout bounds each run; 0 means DefaultTimeout.
	Timeout time.Duration
}

// Run runs the tool with args as Run does; its error names the command line,
// so that a report says which call hung or could not start.
func (t Tool) Run(ctx context.Context, args ...string) (Result, error) {
	res, err := Run(ctx, t.Timeout, t.Path, args...)
	if err != nil {
		return res, fmt.Errorf("%s %s: %w", t.Path, strings.Join(args, " "), err)
	}
	return res, nil
}

// Text is stdout and stderr joined and trimmed, for messages.
func (r Result) Text() string {
	return strings.TrimSpace(strings.TrimSpace(string(r.Stdout)) + "\n" + strings.TrimSpace(string(r.Stderr)))
}
