package smi

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/better-compute/commands/plugins/internal/gpu/toolexec"
)

// query runs a query and reads its rows strictly; a non-zero exit is an
// *ExitError.
func (t Tool) query(ctx context.Context, fields []string, args ...string) ([]Row, toolexec.Result, error) {
	res, err := t.Run(ctx, args...)
	if err != nil {
		return nil, res, err
	}
	if res.ExitCode != 0 {
		return nil, res, &ExitError{Args: args, Result: res}
	}
	rows, err := ReadRows(res.Stdout, fields)
	if err != nil {
		return nil, res, fmt.Errorf("nvidia-smi %s: %w", strings.Join(args, " "), err)
	}
	return rows, res, nil
}

// action runs a command that changes something; a non-zero exit is an
// *ExitError.
func (t Tool) action(ctx context.Context, args ...string) error {
	res, err := t.Run(ctx, args...)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &ExitError{Args: args, Result: res}
	}
	return nil
}

// GPU is one row of `--query-gpu=index,uuid,pci.bus_id`: how gpu.reset and
// diag.dcgm name a GPU.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	BusID string `json:"busId,omitempty"`
}

var gpuFields = []string{"index", "uuid", "pci.bus_id"}

// QueryGPUs lists the GPUs nvidia-smi sees. It answered only when it exits
// 0 with at least one well-formed row.
func (t Tool) QueryGPUs(ctx context.Context) ([]GPU, error) {
	rows, _, err := t.query(ctx, gpuFields, "--query-gpu="+strings.Join(gpuFields, ","), "--format=csv,noheader,nounits")
	if err != nil {
		return nil, err
	}
	out := make([]GPU, 0, len(rows))
	for _, row := range rows {
		idx, err := strconv.Atoi(row["index"])
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi --query-gpu: index %q: %w", row["index"], err)
		}
		out = append(out, GPU{Index: idx, UUID: row["uuid"], BusID: row["pci.bus_id"]})
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

var computeAppFields = []string{"gpu_uuid", "pid", "used_memory"}

// QueryComputeApps lists the processes that hold a compute context on a GPU.
func (t Tool) QueryComputeApps(ctx context.Context) ([]ComputeApp, error) {
	rows, _, err := t.query(ctx, computeAppFields, "--query-compute-apps="+strings.Join(computeAppFields, ","), "--format=csv,noheader,nounits")
	if err != nil {
		return nil, err
	}
	out := make([]ComputeApp, 0, len(rows))
	for _, row := range rows {
		pid, err := strconv.Atoi(row["pid"])
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi --query-compute-apps: pid %q: %w", row["pid"], err)
		}
		out = append(out, ComputeApp{GPU: row["gpu_uuid"], PID: pid, UsedMemory: row["used_memory"]})
	}
	return out, nil
}

var persistenceFields = []string{"uuid", "persistence_mode"}

// QueryPersistence reads whether persistence mode is on for the GPU.
func (t Tool) QueryPersistence(ctx context.Context, uuid string) (bool, error) {
	rows, _, err := t.query(ctx, persistenceFields, "--query-gpu="+strings.Join(persistenceFields, ","), "--format=csv,noheader,nounits", "-i", uuid)
	if err != nil {
		return false, err
	}
	if len(rows) != 1 {
		return false, fmt.Errorf("nvidia-smi --query-gpu=persistence_mode -i %s: %d rows, want 1", uuid, len(rows))
	}
	mode := rows[0]["persistence_mode"]
	switch strings.ToLower(mode) {
	case "enabled":
		return true, nil
	case "disabled":
		return false, nil
	}
	return false, fmt.Errorf("nvidia-smi: persistence mode of %s reads %q", uuid, mode)
}

// SetPersistence turns persistence mode on or off for the GPU.
func (t Tool) SetPersistence(ctx context.Context, uuid string, on bool) error {
	mode := "0"
	if on {
		mode = "1"
	}
	return t.action(ctx, "-pm", mode, "-i", uuid)
}

// ResetGPU runs `nvidia-smi --gpu-reset -i <uuid>`.
func (t Tool) ResetGPU(ctx context.Context, uuid string) error {
	return t.action(ctx, "--gpu-reset", "-i", uuid)
}

// Health is what a fresh query says of one GPU after a reset.
type Health struct {
	GPU
	// Healthy holds when the GPU answered and shows no uncorrectable volatile
	// ECC error, no pending row remap and no row-remap failure.
	Healthy bool `json:"healthy"`
	// Problems say why it is not healthy.
	Problems []string `json:"problems,omitempty"`
	// Notes say what could not be read and is not held against the GPU.
	Notes []string `json:"notes,omitempty"`
}

// healthFields are read after a reset; a field the GPU does not support
// reads [N/A] and is not held against it. The remapped rows are not among
// them: a driver that does not know the remapped_rows.* fields refuses a
// --query-gpu that names one as a whole, so they are asked for as the
// inventory asks (QueryRemappedRows).
var healthFields = []string{"index", "uuid", "pci.bus_id", "ecc.errors.uncorrected.volatile.total"}

// QueryHealth queries the GPU again and judges it: uncorrectable volatile
// ECC errors, then a row remap still pending or failed. Remapped rows that
// nvidia-smi cannot report are a note, not a problem.
func (t Tool) QueryHealth(ctx context.Context, uuid string) (Health, error) {
	rows, _, err := t.query(ctx, healthFields, "--query-gpu="+strings.Join(healthFields, ","), "--format=csv,noheader,nounits", "-i", uuid)
	if err != nil {
		return Health{GPU: GPU{UUID: uuid}, Problems: []string{"nvidia-smi does not answer for it: " + err.Error()}}, err
	}
	if len(rows) != 1 || !strings.EqualFold(rows[0]["uuid"], uuid) {
		return Health{GPU: GPU{UUID: uuid}, Problems: []string{"nvidia-smi no longer lists it"}}, nil
	}
	row := rows[0]
	h := Health{GPU: GPU{UUID: row["uuid"], BusID: row["pci.bus_id"]}}
	h.Index, _ = strconv.Atoi(row["index"])
	if v, missing := Cell(row["ecc.errors.uncorrected.volatile.total"]); missing == "" && v != "0" {
		h.Problems = append(h.Problems, "uncorrectable volatile ECC errors: "+v)
	}
	remapped, why := t.QueryRemappedRows(ctx)
	r, found := RemappedRowsOf(remapped, uuid)
	switch {
	case why != "":
		h.Notes = append(h.Notes, "row remapping not checked: "+why)
	case !found:
		h.Notes = append(h.Notes, "row remapping not checked: nvidia-smi listed no remapped rows for it")
	case r.Rows == nil:
		h.Notes = append(h.Notes, "row remapping not checked: "+r.Skipped)
	default:
		if r.Rows.Pending {
			h.Problems = append(h.Problems, "a row remap is still pending")
		}
		if r.Rows.Failure {
			h.Problems = append(h.Problems, "a row remap has failed: the GPU needs replacing")
		}
	}
	h.Healthy = len(h.Problems) == 0
	return h, nil
}
