package smi

import (
	"context"
	"time"

	"github.com/better-compute/commands/plugins/internal/gpu/toolexec"
)

// DefaultPath is nvidia-smi on PATH.
const DefaultPath = "nvidia-smi"

// Tool runs nvidia-smi: every query and action of the GPU kinds goes through
// it, under a timeout that kills nvidia-smi's whole process group (a hung
// GPU firmware hangs nvidia-smi and whatever it started).
type Tool struct {
	// Path is the executable, DefaultPath when empty.
	Path string
	// Timeout bounds each run (toolexec.DefaultTimeout when zero).
	Timeout time.Duration
}

// Run runs nvidia-smi with args under the tool's timeout. A non-zero exit is
// not an error: the caller reads the exit code (see ExitReason and
// ExitError). The error is for a tool that could not start (wrapping
// toolexec.ErrNotFound), ran past its timeout (toolexec.ErrTimeout), or was
// stopped by ctx; it names the command line.
func (t Tool) Run(ctx context.Context, args ...string) (toolexec.Result, error) {
	path := t.Path
	if path == "" {
		path = DefaultPath
	}
	return toolexec.Tool{Path: path, Timeout: t.Timeout}.Run(ctx, args...)
}
