package checkreport

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 5: "`bcd exec diag.nvml` on the mock server prints a readable
// report": one row per check, and for each failure which GPU and what to do.
func TestWrite_ReadableReportWithWhatToDo(t *testing.T) {
	result := json.RawMessage(`{"status":"fail","checks":[
	 {"check":"nvml.init","status":"pass","reason":"nvidia-smi answered for 8 GPUs"},
	 {"check":"row-remap.pending","gpu":{"index":3,"uuid":"GPU-3f","busId":"0000:48:00"},"status":"fail",
	  "reason":"GPU 3 (GPU-3f, 0000:48:00) has a row remap pending","action":"reset the GPU (gpu.reset) once no allocation is live"},
	 {"check":"pcie.link","gpu":{"index":3,"uuid":"GPU-3f","busId":"0000:48:00"},"status":"skipped","reason":"skipped: NOT_SUPPORTED"}]}`)
	var out bytes.Buffer
	require.True(t, Write(&out, result))
	s := out.String()
	require.Regexp(t, `(?m)^CHECK\s+GPU\s+STATUS\s+REASON$`, s)
	require.Regexp(t, `(?m)^nvml\.init\s+-\s+PASS\s+nvidia-smi answered for 8 GPUs$`, s)
	require.Regexp(t, `(?m)^row-remap\.pending\s+3 0000:48:00\s+FAIL\s+GPU 3 \(GPU-3f, 0000:48:00\) has a row remap pending$`, s)
	require.Regexp(t, `(?m)^pcie\.link\s+3 0000:48:00\s+SKIPPED\s+skipped: NOT_SUPPORTED$`, s)
	require.Contains(t, s, "What to do:\n  row-remap.pending GPU-3f: reset the GPU (gpu.reset) once no allocation is live\n")
	require.Contains(t, s, "overall: FAIL (1 of 3 checks failed)")
}

func TestWrite_NothingForOtherResults(t *testing.T) {
	var out bytes.Buffer
	require.False(t, Write(&out, json.RawMessage(`{"sizeBytes":12,"sha256":"ab"}`)))
	require.False(t, Write(&out, nil))
	require.False(t, Write(&out, json.RawMessage(`not json`)))
	require.Empty(t, out.String())
}
