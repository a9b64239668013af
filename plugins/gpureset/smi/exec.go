// Package smi runs the GPU vendor tools (nvidia-smi, dcgmi) the way a node
// daemon must: every run has a timeout, and on timeout or cancel the whole
// process group is killed, since a hung GPU firmware hangs nvidia-smi and
// whatever it started. It also parses the CSV that nvidia-smi's query modes
// print.
package smi

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

// DefaultTimeout bounds one nvidia-smi run when the caller sets none.
const DefaultTimeout = 60 * time.Second

// ErrTimeout is wrapped by Run's error when the tool ran past its timeout
// and was killed.
var ErrTimeout = errors.New("timed out")

// Output is what one run of a tool produced.
type Output struct {
	// Args are the arguments it ran with, for reports.
	Args []string `json:"args"`
	// Stdout and Stderr are what it printed.
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// ExitCode is its exit status; -1 when it did not exit on its own.
	ExitCode int `json:"exitCode"`
	// TimedOut says it was killed at its timeout.
	TimedOut bool `json:"timedOut,omitempty"`
}

// Text is stdout and stderr joined and trimmed, for messages.
func (o Output) Text() string {
	return strings.TrimSpace(strings.TrimSpace(o.Stdout) + "\n" + strings.TrimSpace(o.Stderr))
}

// Runner runs one tool.
type Runner struct {
	// Path is the executable, a name looked up on PATH or an absolute path.
	Path string
	// Timeout bounds each run; 0 means DefaultTimeout.
	Timeout time.Duration
}

// Run runs the tool with args. A non-zero exit is not an error: the caller
// reads ExitCode (nvidia-smi's codes mean things: 9 driver not loaded, 15
// fallen off the bus, 255 in use). The error is set when the tool could not
// start, ran past its timeout (wrapping ErrTimeout), or ctx ended.
func (r Runner) Run(ctx context.Context, args ...string) (Output, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	out := Output{Args: append([]string(nil), args...), ExitCode: -1}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	cmd := exec.CommandContext(runCtx, r.Path, args...)
	// Its own process group, so that a kill reaches the children a wrapper
	// script or the tool itself started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// A grandchild that outlives the kill could hold the pipes open; do not
	// wait on it for long.
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	out.Stdout, out.Stderr = stdout.String(), stderr.String()
	if ctx.Err() != nil {
		return out, fmt.Errorf("%s %s: %w", r.Path, strings.Join(args, " "), ctx.Err())
	}
	if runCtx.Err() != nil {
		out.TimedOut = true
		return out, fmt.Errorf("%s %s: %w after %s; its process group was killed", r.Path, strings.Join(args, " "), ErrTimeout, timeout)
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		out.ExitCode = exitErr.ExitCode()
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("running %s: %w", r.Path, err)
	}
	out.ExitCode = 0
	return out, nil
}
