package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The GPUs the fake nvidia-smi lists (gpu.reset and diag.dcgm ask it).
const (
	fakeGPU0 = "GPU-934a71d6-e50c-86a3-f752-3743a8c1bbb2"
	fakeGPU1 = "GPU-1f2e3d4c-5b6a-7988-a7b6-c5d4e3f2a1b0"
)

// nodeEnv is a node's pluginEnv; configure writes it into bcd.yaml with
// the mock GPUs (nvmlSource mock:dgxh200), as scripts/lib/local-stack.sh
// configures the demo's nodes. bcd reads it when it starts.
type nodeEnv map[string]string

func (n *node) configure(env nodeEnv) {
	n.c.t.Helper()
	var b strings.Builder
	b.WriteString("role: node\nlogLevel: debug\nnvmlSource: \"mock:dgxh200\"\npluginEnv:\n")
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %q\n", k, env[k])
	}
	require.NoError(n.c.t, os.WriteFile(n.config, []byte(b.String()), 0o600))
}

// writeExec writes an executable script.
func writeExec(t *testing.T, path, script string) string {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path
}

// baseEnv is what every node of these tests gets: the kernel log is an
// empty file (no XIDs from the host the test runs on), journalctl a fake
// that prints one line, and logs.collect assembles its bundle in a temp
// dir, as the demo's nodes do.
func baseEnv(t *testing.T) nodeEnv {
	t.Helper()
	d := t.TempDir()
	kmsg := filepath.Join(d, "kmsg")
	require.NoError(t, os.WriteFile(kmsg, nil, 0o644))
	journalctl := writeExec(t, filepath.Join(d, "journalctl"), "#!/bin/sh\necho '2026-01-01T00:00:00+0000 node bcd[1]: a line from the fake journalctl'\n")
	return nodeEnv{"BCD_KMSG_PATH": kmsg, "BCD_JOURNALCTL": journalctl, "BCD_LOGS_TMPDIR": t.TempDir()}
}

// fakeSmi writes a fake nvidia-smi for gpu.reset and diag.dcgm: two idle
// healthy GPUs with persistence mode on, whose resets succeed. It records
// every call in calls.log beside it.
func fakeSmi(t *testing.T) (path, calls string) {
	t.Helper()
	d := t.TempDir()
	script := `#!/bin/sh
printf '%s\n' "$*" >> "$(dirname "$0")/calls.log"
last=""
for a in "$@"; do last=$a; done
case "$last" in
` + fakeGPU0 + `) idx=0 bus=00000000:3B:00.0 ;;
` + fakeGPU1 + `) idx=1 bus=00000000:86:00.0 ;;
esac
case "$*" in
"--query-gpu=index,uuid,pci.bus_id --format=csv,noheader,nounits")
  printf '0, ` + fakeGPU0 + `, 00000000:3B:00.0\n1, ` + fakeGPU1 + `, 00000000:86:00.0\n' ;;
"--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits") ;;
"--query-remapped-rows=gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits")
  printf '` + fakeGPU0 + `, 0, 0, No, No\n` + fakeGPU1 + `, 0, 0, No, No\n' ;;
"--query-gpu=uuid,persistence_mode --format=csv,noheader,nounits -i "*) printf '%s, Enabled\n' "$last" ;;
"--query-gpu=index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits -i "*)
  printf '%s, %s, %s, 0\n' "$idx" "$last" "$bus" ;;
"-pm 0 -i "*) printf 'Disabled persistence mode for GPU %s.\nAll done.\n' "$last" ;;
"-pm 1 -i "*) printf 'Enabled persistence mode for GPU %s.\nAll done.\n' "$last" ;;
"--gpu-reset -i "*) printf 'GPU %s was successfully reset.\nAll done.\n' "$last" ;;
*) echo "fake nvidia-smi: no answer scripted for: $*" >&2; exit 2 ;;
esac
`
	return writeExec(t, filepath.Join(d, "nvidia-smi"), script), filepath.Join(d, "calls.log")
}

// fakeDcgmi writes a fake dcgmi that answers level 1's calls and `dcgmi
// diag -r 3 -j` with the real DCGM 3 captures in testdata.
func fakeDcgmi(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, f := range []string{"diag-r3-j-dcgm3-tesla-t4-pass.json", "discovery-l-tesla-t4-1gpu.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(d, f), b, 0o644))
	}
	script := `#!/bin/sh
d=$(dirname "$0")
printf '%s\n' "$*" >> "$d/calls.log"
case "$*" in
"--version") printf '\ndcgmi  version: 3.3.9\n\n' ;;
"discovery -l") cat "$d/discovery-l-tesla-t4-1gpu.txt" ;;
"diag -r 3 -j") cat "$d/diag-r3-j-dcgm3-tesla-t4-pass.json" ;;
*) echo "fake dcgmi: no answer scripted for: $*" >&2; exit 2 ;;
esac
`
	return writeExec(t, filepath.Join(d, "dcgmi"), script)
}

// toolEnv adds the fake nvidia-smi and dcgmi to env, and an empty /proc
// (no process holds a GPU device node) for the in-use check.
func toolEnv(t *testing.T, env nodeEnv) (nodeEnv, string) {
	t.Helper()
	smiPath, calls := fakeSmi(t)
	out := nodeEnv{}
	for k, v := range env {
		out[k] = v
	}
	out["BCD_NVIDIA_SMI"] = smiPath
	out["BCD_DCGMI"] = fakeDcgmi(t)
	out["BCD_PROC_ROOT"] = t.TempDir()
	return out, calls
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}
