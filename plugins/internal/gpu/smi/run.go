package smi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/toolexec"
)

// DefaultPath is nvidia-smi on PATH.
const DefaultPath = "nvidia-smi"

// Exit codes of nvidia-smi that mean something to an operator.
const (
	ExitDriverNotLoaded = 9
	ExitNVMLMissing     = 12
	ExitInfoROM         = 14
	ExitFallenOffBus    = 15
	ExitOther           = 255
)

// InUseText is what nvidia-smi prints when another client holds the GPU
// (persistence mode, nv-hostengine, a process): a reset is refused.
const InUseText = "In use by another client"

// Tool runs nvidia-smi.
type Tool struct {
	// Path is the executable, DefaultPath when empty.
	Path string
	// Timeout bounds each run (toolexec.DefaultTimeout when zero).
	Timeout time.Duration
}

// Answer is what nvidia-smi said about the GPUs.
type Answer struct {
	// Status says whether it answered (exit 0 with at least one well-formed
	// row) and, when not, why.
	Status gpu.SourceStatus
	// GPUs are the GPUs it listed, as partial inventory entries.
	GPUs []gpu.GPU
}

// Run runs nvidia-smi with args under the tool's timeout.
func (t Tool) Run(ctx context.Context, args ...string) (toolexec.Result, error) {
	path := t.Path
	if path == "" {
		path = DefaultPath
	}
	return toolexec.Run(ctx, t.Timeout, path, args...)
}

// Query asks nvidia-smi for the inventory fields and the remapped rows.
// It never fails: a tool that did not answer is an Answer that says why.
func (t Tool) Query(ctx context.Context) Answer {
	res, err := t.Run(ctx, "--query-gpu="+strings.Join(QueryGPUFields, ","), "--format=csv,noheader,nounits")
	st := gpu.SourceStatus{}
	if err != nil {
		st.Reason = runFailure(err, res)
		if res.ExitCode >= 0 {
			st.ExitCode = gpu.Ptr(res.ExitCode)
		}
		return Answer{Status: st}
	}
	st.ExitCode = gpu.Ptr(res.ExitCode)
	if res.ExitCode != 0 {
		st.Reason = ExitReason(res.ExitCode, append(res.Stdout, res.Stderr...))
		return Answer{Status: st}
	}
	gpus, bad, perr := ParseQueryGPU(res.Stdout)
	if perr != nil {
		st.Reason = fmt.Sprintf("nvidia-smi exited 0 but printed no well-formed GPU row (%d malformed): %s", bad, firstLine(res.Stdout))
		return Answer{Status: st}
	}
	st.Answered = true
	st.GPUs = len(gpus)
	t.addRemappedRows(ctx, gpus)
	return Answer{Status: st, GPUs: gpus}
}

// addRemappedRows asks for the row-remapping counters, which older drivers
// do not offer among the --query-gpu fields, and skips them with the reason
// when nvidia-smi cannot say.
func (t Tool) addRemappedRows(ctx context.Context, gpus []gpu.GPU) {
	res, err := t.Run(ctx, "--query-remapped-rows="+strings.Join(QueryRemappedRowsFields, ","), "--format=csv,noheader,nounits")
	why := ""
	var rows []RemappedRows
	switch {
	case err != nil:
		why = runFailure(err, res)
	case res.ExitCode != 0:
		why = ExitReason(res.ExitCode, append(res.Stdout, res.Stderr...))
	default:
		var perr error
		rows, _, perr = ParseRemappedRows(res.Stdout)
		if perr != nil {
			why = "nvidia-smi listed no remapped rows: " + firstLine(res.Stdout)
		}
	}
	for i := range gpus {
		g := &gpus[i]
		if g.RemappedRows != nil {
			continue
		}
		found := false
		for _, r := range rows {
			if r.UUID != g.UUID {
				continue
			}
			found = true
			if r.Rows != nil {
				g.RemappedRows = r.Rows
				g.Unskip(gpu.FieldRemappedRows)
			} else {
				g.Skip(gpu.FieldRemappedRows, r.Skipped)
			}
		}
		if !found {
			if why == "" {
				why = "nvidia-smi listed no remapped rows for this GPU"
			}
			g.Skip(gpu.FieldRemappedRows, why)
		}
	}
}

// ExitReason explains a non-zero nvidia-smi exit in an operator's words.
func ExitReason(code int, output []byte) string {
	line := firstLine(output)
	switch {
	case code == 0:
		return ""
	case IsInUse(output):
		return fmt.Sprintf("the GPU is in use by another client (nvidia-smi exit %d): %s", code, line)
	case code == ExitDriverNotLoaded:
		return "the NVIDIA driver is not loaded (nvidia-smi exit 9)"
	case code == ExitNVMLMissing:
		return "the NVML library was not found (nvidia-smi exit 12)"
	case code == ExitInfoROM:
		return "a GPU's InfoROM is corrupted (nvidia-smi exit 14)"
	case code == ExitFallenOffBus:
		return "a GPU has fallen off the bus (nvidia-smi exit 15)"
	case line != "":
		return fmt.Sprintf("nvidia-smi failed (exit %d): %s", code, line)
	default:
		return fmt.Sprintf("nvidia-smi failed (exit %d)", code)
	}
}

// IsInUse reports whether nvidia-smi refused because another client holds
// the GPU.
func IsInUse(output []byte) bool {
	return bytes.Contains(bytes.ToLower(output), bytes.ToLower([]byte(InUseText)))
}

func runFailure(err error, res toolexec.Result) string {
	switch {
	case errors.Is(err, toolexec.ErrNotFound):
		return "nvidia-smi is not installed (not found)"
	case errors.Is(err, toolexec.ErrTimeout):
		return fmt.Sprintf("nvidia-smi hung and was killed after %s (a GSP or driver hang; see XID 119)", res.Duration.Round(time.Millisecond))
	default:
		return "nvidia-smi did not run: " + err.Error()
	}
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
