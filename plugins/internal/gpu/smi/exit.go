package smi

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/commands/plugins/internal/gpu/toolexec"
)

// Exit codes of nvidia-smi, as nvidia-smi(1) documents them under RETURN
// VALUE. This table is the only place that reads them: the inventory's
// source status, gpu.reset's and diag.dcgm's errors and diag.nvml's advice
// all take their meaning from here.
const (
	ExitInvalidArgument = 2
	ExitNotAvailable    = 3
	ExitNoPermission    = 4
	ExitNotFound        = 6
	ExitPowerCables     = 8
	ExitDriverNotLoaded = 9
	ExitInterrupt       = 10
	ExitNVMLMissing     = 12
	ExitNVMLTooOld      = 13
	ExitInfoROM         = 14
	ExitFallenOffBus    = 15
	ExitOther           = 255
)

// exitMeanings words each documented code for an operator.
var exitMeanings = map[int]string{
	ExitInvalidArgument: "a supplied argument or flag is invalid",
	ExitNotAvailable:    "the operation is not available on this GPU",
	ExitNoPermission:    "not permitted: nvidia-smi needs root for this",
	ExitNotFound:        "a query to find an object was unsuccessful",
	ExitPowerCables:     "a GPU's external power cables are not properly attached",
	ExitDriverNotLoaded: "the NVIDIA driver is not loaded",
	ExitInterrupt:       "the kernel detected an interrupt issue with a GPU",
	ExitNVMLMissing:     "the NVML library was not found",
	ExitNVMLTooOld:      "the local NVML library does not implement this function",
	ExitInfoROM:         "a GPU's InfoROM is corrupted",
	ExitFallenOffBus:    "a GPU has fallen off the bus",
	ExitOther:           "other error or internal driver error",
}

// conclusive are the codes whose meaning says all an operator needs: the
// output adds nothing but noise to the reason.
var conclusive = map[int]bool{ExitDriverNotLoaded: true, ExitNVMLMissing: true, ExitInfoROM: true, ExitFallenOffBus: true}

// InUseText is what nvidia-smi prints when another client holds the GPU
// (persistence mode, nv-hostengine, a process): a reset is refused.
const InUseText = "In use by another client"

// ExitMeaning says what an nvidia-smi exit status means, in words an
// operator can act on ("" for 0 and for codes without a documented meaning).
func ExitMeaning(code int) string { return exitMeanings[code] }

// ExitReason explains a non-zero nvidia-smi exit for a source status: the
// meaning of a conclusive code, else the first line nvidia-smi printed.
func ExitReason(code int, output []byte) string {
	line := firstLine(output)
	switch {
	case code == 0:
		return ""
	case IsInUse(output):
		return fmt.Sprintf("the GPU is in use by another client (nvidia-smi exit %d): %s", code, line)
	case conclusive[code]:
		return fmt.Sprintf("%s (nvidia-smi exit %d)", ExitMeaning(code), code)
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

// ExitError is an nvidia-smi run that exited non-zero.
type ExitError struct {
	// Args are the arguments it ran with.
	Args []string
	// Result is what it printed and its exit code.
	Result toolexec.Result
}

// Error reads "nvidia-smi --gpu-reset -i GPU-…: exit 255 (other error …): <output>".
func (e *ExitError) Error() string {
	what := fmt.Sprintf("exit %d", e.Result.ExitCode)
	if m := ExitMeaning(e.Result.ExitCode); m != "" {
		what += " (" + m + ")"
	}
	if text := e.Result.Text(); text != "" {
		what += ": " + firstLines(text, 6)
	}
	return "nvidia-smi " + strings.Join(e.Args, " ") + ": " + what
}

// runFailure words a run that produced no exit status, for a source status.
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

// firstLine is the first line of b, trimmed and capped, for a reason.
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

// firstLines keeps the first n non-blank lines of s, joined for a message.
func firstLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && len(lines) < n {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " / ")
}
