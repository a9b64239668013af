package smi

import (
	"context"
	"fmt"
	"strings"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

// Answer is what nvidia-smi said about the GPUs.
type Answer struct {
	// Status says whether it answered (exit 0 with at least one well-formed
	// row) and, when not, why.
	Status gpu.SourceStatus
	// GPUs are the GPUs it listed, as partial inventory entries.
	GPUs []gpu.GPU
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
	rows, why := t.QueryRemappedRows(ctx)
	addRemappedRows(gpus, rows, why)
	return Answer{Status: st, GPUs: gpus}
}

// QueryRemappedRows asks for the row-remapping counters of every GPU with
// --query-remapped-rows, on its own: older drivers do not know the
// remapped_rows.* fields of --query-gpu and refuse a query that names them
// as a whole. When nvidia-smi cannot say, rows is nil and why says why.
func (t Tool) QueryRemappedRows(ctx context.Context) (rows []RemappedRows, why string) {
	res, err := t.Run(ctx, "--query-remapped-rows="+strings.Join(QueryRemappedRowsFields, ","), "--format=csv,noheader,nounits")
	switch {
	case err != nil:
		return nil, runFailure(err, res)
	case res.ExitCode != 0:
		return nil, ExitReason(res.ExitCode, append(res.Stdout, res.Stderr...))
	}
	rows, _, perr := ParseRemappedRows(res.Stdout)
	if perr != nil {
		return nil, "nvidia-smi listed no remapped rows: " + firstLine(res.Stdout)
	}
	return rows, ""
}

// RemappedRowsOf returns the answer for the GPU with uuid, or false.
func RemappedRowsOf(rows []RemappedRows, uuid string) (RemappedRows, bool) {
	for _, r := range rows {
		if strings.EqualFold(r.UUID, uuid) {
			return r, true
		}
	}
	return RemappedRows{}, false
}

// addRemappedRows puts the counters into the GPUs that --query-gpu left
// without them, and skips them with the reason when nvidia-smi cannot say.
func addRemappedRows(gpus []gpu.GPU, rows []RemappedRows, why string) {
	for i := range gpus {
		g := &gpus[i]
		if g.RemappedRows != nil {
			continue
		}
		r, found := RemappedRowsOf(rows, g.UUID)
		switch {
		case found && r.Rows != nil:
			g.RemappedRows = r.Rows
			g.Unskip(gpu.FieldRemappedRows)
		case found && g.MIGEnabled():
			// [N/A] with MIG instances active: the GPU has row remapping,
			// the driver does not say.
			g.Skip(gpu.FieldRemappedRows, gpu.RemapUnknownInMIG("nvidia-smi reports "+bracketed(r.Cell)))
		case found:
			g.Skip(gpu.FieldRemappedRows, r.Skipped)
		case why != "":
			g.Skip(gpu.FieldRemappedRows, why)
		default:
			g.Skip(gpu.FieldRemappedRows, "nvidia-smi listed no remapped rows for this GPU")
		}
	}
}
