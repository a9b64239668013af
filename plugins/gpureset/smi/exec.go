// Package smi runs nvidia-smi and dcgmi the way a node daemon must (through
// plugins/internal/gpu/toolexec: every run has a timeout, and on timeout or
// cancel the tool's whole process group is killed, since a hung GPU firmware
// hangs nvidia-smi and whatever it started), and reads what gpu.reset and
// diag.dcgm need from nvidia-smi's query modes: the GPU list, compute
// processes, persistence mode, and health after a reset.
package smi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/commands/plugins/internal/gpu/toolexec"
)

// DefaultTimeout bounds one run when the caller sets none.
const DefaultTimeout = toolexec.DefaultTimeout

// ErrTimeout is wrapped by Run's error when the tool ran past its timeout
// and its process group was killed.
var ErrTimeout = toolexec.ErrTimeout

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
	res, err := toolexec.Run(ctx, r.Timeout, r.Path, args...)
	out := Output{
		Args:     append([]string(nil), args...),
		Stdout:   string(res.Stdout),
		Stderr:   string(res.Stderr),
		ExitCode: res.ExitCode,
	}
	if err != nil {
		out.ExitCode = -1
		out.TimedOut = errors.Is(err, toolexec.ErrTimeout)
		return out, fmt.Errorf("%s %s: %w", r.Path, strings.Join(args, " "), err)
	}
	return out, nil
}
