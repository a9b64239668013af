// Package tools runs the drive tools disk.wipe needs (nvme-cli, hdparm,
// wipefs) behind one Runner interface and parses what they print. The real
// Runner executes them; tests give a Recorded runner that replays output
// captured from real drives, so the NVMe and ATA paths are exercised
// without the hardware, through the same parsers and state machines.
package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/commands/plugins/internal/gpu/toolexec"
)

// Output is one finished tool run.
type Output struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
}

// Runner runs a drive tool. A non-zero exit is an Output, not an error;
// the error is for a tool that could not run at all.
type Runner interface {
	Run(ctx context.Context, timeout time.Duration, name string, args ...string) (Output, error)
}

// Exec runs the real tools from PATH, each under a timeout that kills its
// whole process group (a hung drive hangs its tool too).
type Exec struct{}

// Run implements Runner.
func (Exec) Run(ctx context.Context, timeout time.Duration, name string, args ...string) (Output, error) {
	r, err := toolexec.Run(ctx, timeout, name, args...)
	if err != nil {
		return Output{Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode}, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return Output{Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode}, nil
}

// Checked runs a tool and turns a non-zero exit into an error that quotes
// the tool's stderr, for calls whose failure ends the wipe.
func Checked(ctx context.Context, r Runner, timeout time.Duration, name string, args ...string) ([]byte, error) {
	out, err := r.Run(ctx, timeout, name, args...)
	if err != nil {
		return nil, err
	}
	if out.ExitCode != 0 {
		msg := strings.TrimSpace(string(out.Stderr))
		if msg == "" {
			msg = strings.TrimSpace(string(out.Stdout))
		}
		if len(msg) > 400 {
			msg = msg[:400] + "…"
		}
		return out.Stdout, fmt.Errorf("%s %s exited %d: %s", name, strings.Join(args, " "), out.ExitCode, msg)
	}
	return out.Stdout, nil
}

// Version asks a tool for its version line ("nvme version 2.3",
// "hdparm v9.65"), or "" when it does not answer.
func Version(ctx context.Context, r Runner, name string) string {
	out, err := r.Run(ctx, 10*time.Second, name, "--version")
	if err != nil || out.ExitCode != 0 {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out.Stdout)), "\n")
	return strings.TrimSpace(line)
}
