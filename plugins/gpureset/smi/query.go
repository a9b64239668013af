package smi

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// ExitMeaning says what an nvidia-smi exit status means, in words an
// operator can act on ("" for codes without a documented meaning).
func ExitMeaning(code int) string {
	switch code {
	case 0:
		return ""
	case 2:
		return "invalid argument or flag"
	case 3:
		return "the operation is not available on this GPU"
	case 4:
		return "not permitted: nvidia-smi needs root for this"
	case 6:
		return "a query failed"
	case 9:
		return "the NVIDIA kernel driver is not loaded"
	case 12:
		return "the NVML shared library could not be found or loaded"
	case 14:
		return "the GPU's InfoROM is corrupted"
	case 15:
		return "the GPU has fallen off the bus or is otherwise inaccessible"
	case 255:
		return "other error or internal driver error"
	}
	return ""
}

// ExitError is a tool run that exited non-zero or timed out.
type ExitError struct {
	Output Output
}

// Error reads "nvidia-smi --gpu-reset -i GPU-…: exit 255 (other error …): <output>".
func (e *ExitError) Error() string {
	what := fmt.Sprintf("exit %d", e.Output.ExitCode)
	if m := ExitMeaning(e.Output.ExitCode); m != "" {
		what += " (" + m + ")"
	}
	if text := e.Output.Text(); text != "" {
		what += ": " + firstLines(text, 6)
	}
	return "nvidia-smi " + strings.Join(e.Output.Args, " ") + ": " + what
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

// Known reports whether a CSV cell carries a value: nvidia-smi writes
// "[N/A]", "[Not Supported]" or a deprecation notice where it has none.
func Known(cell string) bool {
	c := strings.TrimSpace(cell)
	switch {
	case c == "", c == "N/A", strings.HasPrefix(c, "[") && strings.HasSuffix(c, "]"):
		return false
	case strings.HasPrefix(c, "Requested functionality has been deprecated"):
		return false
	}
	return true
}

// ParseRows splits `--format=csv,noheader,nounits` output into rows of
// exactly fields cells, trimmed. Blank lines and nvidia-smi's notices that are
// not rows ("No running processes found") are skipped; any other line with
// the wrong number of cells is an error, since a partial answer must not pass
// for a healthy one.
func ParseRows(text string, fields int) ([][]string, error) {
	var rows [][]string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "No running") || strings.HasPrefix(line, "No devices") {
			continue
		}
		cells := strings.Split(line, ",")
		if len(cells) != fields {
			return nil, fmt.Errorf("line %d: %d fields, want %d: %q", i+1, len(cells), fields, line)
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	return rows, nil
}

// query runs a query and parses its rows; a non-zero exit is an *ExitError.
func (r Runner) query(ctx context.Context, fields int, args ...string) ([][]string, Output, error) {
	out, err := r.Run(ctx, args...)
	if err != nil {
		return nil, out, err
	}
	if out.ExitCode != 0 {
		return nil, out, &ExitError{Output: out}
	}
	rows, err := ParseRows(out.Stdout, fields)
	if err != nil {
		return nil, out, fmt.Errorf("nvidia-smi %s: %w", strings.Join(args, " "), err)
	}
	return rows, out, nil
}

// GPU is one row of `--query-gpu=index,uuid,pci.bus_id`.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	BusID string `json:"busId,omitempty"`
}

// QueryGPUs lists the GPUs nvidia-smi sees. It answered only when it exits
// 0 with at least one well-formed row.
func (r Runner) QueryGPUs(ctx context.Context) ([]GPU, error) {
	rows, _, err := r.query(ctx, 3, "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader,nounits")
	if err != nil {
		return nil, err
	}
	out := make([]GPU, 0, len(rows))
	for _, row := range rows {
		idx, err := strconv.Atoi(row[0])
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi --query-gpu: index %q: %w", row[0], err)
		}
		out = append(out, GPU{Index: idx, UUID: row[1], BusID: row[2]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nvidia-smi --query-gpu: no GPU rows")
	}
	return out, nil
}

// ComputeApp is one row of `--query-compute-apps=gpu_uuid,pid,used_memory`.
type ComputeApp struct {
	GPU        string `json:"gpu"`
	PID        int    `json:"pid"`
	UsedMemory string `json:"usedMemory,omitempty"`
}

// QueryComputeApps lists the processes that hold a compute context on a GPU.
func (r Runner) QueryComputeApps(ctx context.Context) ([]ComputeApp, error) {
	rows, _, err := r.query(ctx, 3, "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits")
	if err != nil {
		return nil, err
	}
	out := make([]ComputeApp, 0, len(rows))
	for _, row := range rows {
		pid, err := strconv.Atoi(row[1])
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi --query-compute-apps: pid %q: %w", row[1], err)
		}
		out = append(out, ComputeApp{GPU: row[0], PID: pid, UsedMemory: row[2]})
	}
	return out, nil
}

// QueryPersistence reads whether persistence mode is on for the GPU.
func (r Runner) QueryPersistence(ctx context.Context, uuid string) (bool, error) {
	rows, _, err := r.query(ctx, 2, "--query-gpu=uuid,persistence_mode", "--format=csv,noheader,nounits", "-i", uuid)
	if err != nil {
		return false, err
	}
	if len(rows) != 1 {
		return false, fmt.Errorf("nvidia-smi --query-gpu=persistence_mode -i %s: %d rows, want 1", uuid, len(rows))
	}
	switch strings.ToLower(rows[0][1]) {
	case "enabled":
		return true, nil
	case "disabled":
		return false, nil
	}
	return false, fmt.Errorf("nvidia-smi: persistence mode of %s reads %q", uuid, rows[0][1])
}

// SetPersistence turns persistence mode on or off for the GPU.
func (r Runner) SetPersistence(ctx context.Context, uuid string, on bool) error {
	mode := "0"
	if on {
		mode = "1"
	}
	return r.action(ctx, "-pm", mode, "-i", uuid)
}

// ResetGPU runs `nvidia-smi --gpu-reset -i <uuid>`.
func (r Runner) ResetGPU(ctx context.Context, uuid string) error {
	return r.action(ctx, "--gpu-reset", "-i", uuid)
}

func (r Runner) action(ctx context.Context, args ...string) error {
	out, err := r.Run(ctx, args...)
	if err != nil {
		return err
	}
	if out.ExitCode != 0 {
		return &ExitError{Output: out}
	}
	return nil
}

// Health is what a fresh query says of one GPU after a reset.
type Health struct {
	GPU
	// Healthy holds when the GPU answered and shows no uncorrectable volatile
	// ECC error, no pending row remap and no row-remap failure.
	Healthy bool `json:"healthy"`
	// Problems say why it is not healthy.
	Problems []string `json:"problems,omitempty"`
}

// healthFields are read after a reset; a field the GPU does not support
// reads [N/A] and is not held against it.
var healthFields = []string{"index", "uuid", "pci.bus_id", "ecc.errors.uncorrected.volatile.total", "remapped_rows.pending", "remapped_rows.failure"}

// QueryHealth queries the GPU again and judges it.
func (r Runner) QueryHealth(ctx context.Context, uuid string) (Health, error) {
	rows, _, err := r.query(ctx, len(healthFields), "--query-gpu="+strings.Join(healthFields, ","), "--format=csv,noheader,nounits", "-i", uuid)
	if err != nil {
		return Health{GPU: GPU{UUID: uuid}, Problems: []string{"nvidia-smi does not answer for it: " + err.Error()}}, err
	}
	if len(rows) != 1 || !strings.EqualFold(rows[0][1], uuid) {
		return Health{GPU: GPU{UUID: uuid}, Problems: []string{"nvidia-smi no longer lists it"}}, nil
	}
	row := rows[0]
	h := Health{GPU: GPU{UUID: row[1], BusID: row[2]}}
	h.Index, _ = strconv.Atoi(row[0])
	if Known(row[3]) && row[3] != "0" {
		h.Problems = append(h.Problems, "uncorrectable volatile ECC errors: "+row[3])
	}
	if Known(row[4]) && strings.EqualFold(row[4], "yes") {
		h.Problems = append(h.Problems, "a row remap is still pending")
	}
	if Known(row[5]) && strings.EqualFold(row[5], "yes") {
		h.Problems = append(h.Problems, "a row remap has failed: the GPU needs replacing")
	}
	h.Healthy = len(h.Problems) == 0
	return h, nil
}
